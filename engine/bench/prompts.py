"""A fixed, varied prompt set: chat questions, maths, code, and prompts that invite copying
from the context (where prompt-lookup drafting shines)."""

from __future__ import annotations

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
