"""A fixed, varied prompt set: chat questions, maths, code, and prompts that invite copying
from the context (where prompt-lookup drafting shines), and the grounded set: code edits,
rewrites and quotes over 20-80-line inputs (data/grounded/prompts.jsonl)."""

from __future__ import annotations

import json

from engine.paths import REPO

GROUNDED_FILE = REPO / "data" / "grounded" / "prompts.jsonl"

CHAT_PROMPTS: list[str] = [
    "What is the capital of France? Answer in one sentence.",
    "Write a short poem about the sea.",
    "Explain what a hash table is to a beginner.",
    "Give me three tips for learning a new language.",
    "What causes the seasons on Earth?",
    "Write a Python function that returns the n-th Fibonacci number.",
    "Write a Python function that checks whether a string is a palindrome, with a docstring.",
    "A farmer has 17 sheep and buys 5 more, then sells 8. How many sheep are left? Explain.",
    "If a train travels 60 km per hour for 2.5 hours, how far does it go? Show your steps.",
    "List the planets of the solar system in order from the sun.",
    "Summarise the plot of Romeo and Juliet in three sentences.",
    "What is the difference between a list and a tuple in Python?",
    "Translate 'Good morning, how are you?' into French and Spanish.",
    "Write a haiku about autumn leaves.",
    "How do I reverse a linked list? Give code in Python.",
    "Write a SQL query that selects the ten most recent orders from a table named orders.",
    "Explain recursion with an example.",
    "What are the benefits of regular exercise?",
    (
        "Here is a function:\n\ndef add(a, b):\n    return a + b\n\n"
        "Rewrite it with type hints and a docstring, keeping the same name."
    ),
    (
        "Repeat the following list exactly, then add one more item in the same style:\n"
        "- apples: 3 kg at 2.50 EUR\n- pears: 2 kg at 3.10 EUR\n- plums: 1 kg at 4.20 EUR"
    ),
    (
        "Correct the spelling in this sentence and print the corrected sentence: "
        "'The quick brwn fox jumpd over the lazzy dog near the rivr bank.'"
    ),
    (
        "Convert this JSON to YAML:\n"
        '{"name": "Ada", "age": 36, "languages": ["English", "French"], "active": true}'
    ),
    (
        "class Stack:\n    def __init__(self):\n        self.items = []\n\n"
        "Add push, pop and peek methods to this class and show the full class."
    ),
    "Count from 1 to 20, separated by commas.",
    "Write the alphabet in uppercase letters separated by spaces, then in lowercase.",
    "Explain the difference between TCP and UDP.",
    "Give a recipe for pancakes.",
    "What is 12 times 13? Explain how you computed it.",
]

RAW_PROMPTS: list[str] = [
    "The history of the printing press",
    "def quicksort(arr):",
    "Once upon a time, in a small village,",
    "1, 2, 3, 4, 5,",
    "import numpy as np\n\n",
    "Q: What is the boiling point of water?\nA:",
]

# Prompts whose answers repeat, quote or edit text given in the prompt: where a drafter can be
# sure, and block size auto must notice quickly (issue 15). Benchmark only, never training.
REPEAT_PROMPTS: list[str] = [
    (
        "Repeat the following paragraph exactly, word for word:\n\n"
        "The library opens at nine in the morning and closes at six in the evening. Members "
        "may borrow up to five books at a time for three weeks. Late returns cost ten cents "
        "a day, and lost books must be replaced or paid for at the listed price."
    ),
    (
        "Fix the bug in this function and print the whole corrected function:\n\n"
        "def average(numbers):\n    total = 0\n    for n in numbers:\n        total += n\n"
        "    return total / len(number)\n"
    ),
    (
        "Rename the variable `x` to `count` everywhere in this code and show the full result:\n\n"
        "def tally(items):\n    x = 0\n    for item in items:\n        if item:\n"
        "            x += 1\n    print(x)\n    return x\n"
    ),
    (
        "Copy this list and add a fourth line in the same format:\n"
        "Name: Alice | Age: 30 | City: Paris\nName: Bob | Age: 25 | City: Berlin\n"
        "Name: Carol | Age: 35 | City: Madrid"
    ),
    (
        "Quote the second sentence of this text, then the whole text again:\n\n"
        "Rivers carry water from the mountains to the sea. Along the way they shape valleys "
        "and feed farmland. Cities grew beside them because they offered water and trade."
    ),
    (
        "Convert every line of this CSV to a JSON object, one per line:\n"
        "id,name,price\n1,pen,1.20\n2,notebook,3.50\n3,ruler,0.80\n4,eraser,0.60"
    ),
    (
        "Add a docstring to this class and show the full class unchanged otherwise:\n\n"
        "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n"
        "    def distance(self, other):\n"
        "        return ((self.x - other.x) ** 2 + (self.y - other.y) ** 2) ** 0.5\n"
    ),
    (
        "Write the following sentence five times, each on its own line: "
        "'Practice makes progress, and progress makes confidence.'"
    ),
]


def grounded_prompts() -> list[tuple[str, str]]:
    """(task kind, prompt) of the grounded set, written for the project and never trained on:
    the instruction, then the input in a fenced block of its language, as an editor sends it."""
    lines = GROUNDED_FILE.read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    return [
        (r["kind"], f"{r['instruction']}\n\n```{r['language']}\n{r['input'].rstrip()}\n```")
        for r in rows
    ]
