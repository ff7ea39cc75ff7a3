"""`hyflash data generate` and `hyflash data conversations`: the self-distillation corpora."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.paths import conversations_path, default_answers_path
from engine.training.selection import selected_prompts
from engine.training.target_vocab import eog_ids


def cmd_data_generate(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from engine.llama.target import LlamaTarget
    from engine.models.resolve import resolve_target
    from engine.training.distill import generate_corpus

    model_id, path = resolve_target(args.model)
    out = Path(args.out) if args.out else default_answers_path(model_id, args.split, args.bucket)
    with LlamaTarget(path, n_ctx=64) as probe:
        prompts, longest = selected_prompts(args, probe)
        if args.generator == "torch":  # (generate_corpus picks its own for llama.cpp)
            prompts = prompts_to_answer(probe, prompts, out, longest)
    bar = tqdm(total=len(prompts), unit="answer", file=sys.stderr)

    def progress(done: int, total: int, tok_s: float) -> None:
        bar.total = total
        bar.update(done - bar.n)
        bar.set_postfix(tok_s=f"{tok_s:.0f}")

    if args.generator == "torch":
        return _generate_torch(args, path, prompts, out, progress, bar)
    target = LlamaTarget(path, n_ctx=max(512, longest), n_threads=args.threads)
    try:
        written = generate_corpus(
            target,
            prompts,
            out,
            streams=args.streams,
            max_tokens=args.max_tokens,
            max_prompt_tokens=longest,
            n_threads=args.threads,
            progress=progress,
        )
    finally:
        bar.close()
        target.close()
    print(f"wrote {written} answers to {out}")
    return 0


def prompts_to_answer(target, prompts: list, out: Path, longest: int) -> list[tuple]:
    """(prompt, chat-templated ids) of the prompts out does not answer yet, up to longest."""
    from engine.llama.chat_template import ChatTemplate
    from engine.training.distill import done_keys

    template = ChatTemplate.for_target(target)
    have = done_keys(out)
    todo = []
    for p in prompts:
        if p.key not in have:
            ids = template.tokenize(target, [{"role": "user", "content": p.text}])
            if len(ids) <= longest:
                todo.append((p, ids))
    return todo


def _generate_torch(args: argparse.Namespace, path: Path, todo: list, out: Path, progress, bar):
    """data generate --generator torch: the GGUF in torch answers in batches of --streams."""
    from engine.training.torch_target import TorchTarget, generate_answers

    eos = eog_ids(path)
    target = TorchTarget(
        path, dtype=args.torch_dtype, device=args.torch_device, threads=args.threads
    )
    try:
        written = generate_answers(
            target,
            todo,
            out,
            batch=args.streams,
            max_tokens=args.max_tokens,
            eos_ids=eos,
            progress=progress,
        )
    finally:
        bar.close()
        target.close()
    print(f"wrote {written} answers to {out} (torch {target.dtype} on {target.device})")
    return 0


def cmd_data_conversations(args: argparse.Namespace) -> int:
    """ShareGPT first turns with the dataset's own answers, as token ids (no generation): the
    cheap complement to self-distillation, labelled by the target at training time."""
    import json

    from engine.bench.corpora import sharegpt_conversations
    from engine.llama.chat_template import ChatTemplate
    from engine.llama.target import LlamaTarget
    from engine.models.resolve import resolve_target
    from engine.training.distill import append_rows, done_keys

    model_id, path = resolve_target(args.model)
    out = Path(args.out) if args.out else conversations_path(model_id)
    have = done_keys(out)
    # prompts unlike the generated answers' first; once the answers cover them (the corpus
    # answers every ShareGPT prompt up to 512 tokens), the dataset's own reply to an answered
    # prompt is still a different text to learn from
    answered = done_keys(default_answers_path(model_id, "train", ""))
    convs = [c for c in sharegpt_conversations(10**9) if c[0].key not in have]
    convs.sort(key=lambda c: c[0].key in answered)  # stable: dataset order within each group
    written = 0
    with LlamaTarget(path, n_ctx=64) as target, append_rows(out) as f:
        template = ChatTemplate.for_target(target)
        for prompt, answer in convs:
            if written >= args.limit:
                break
            prompt_ids = template.tokenize(target, [{"role": "user", "content": prompt.text}])
            answer_ids = target.tokenize(answer, add_special=False, parse_special=False)
            stop = "eos" if len(answer_ids) < args.max_tokens else "length"
            answer_ids = answer_ids[: args.max_tokens] + (
                [target.eos_token] if stop == "eos" else []
            )
            if len(prompt_ids) > 512 or len(answer_ids) < 8:
                continue
            row = {
                "key": prompt.key,
                "source": "sharegpt-answer",
                "prompt_ids": prompt_ids,
                "answer_ids": answer_ids,
                "stop": stop,
            }
            f.write(json.dumps(row, separators=(",", ":")) + "\n")
            written += 1
    print(f"wrote {written} conversations to {out}")
    return 0
