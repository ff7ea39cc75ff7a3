"""`--self-test`: load the default model headless, generate with the drafter, report, exit 0.

Used by installers and the frozen bundle to prove that llama.cpp, onnxruntime and the shipped
model and drafter all load on this machine. Exit status 1 on any failure."""

from __future__ import annotations

import argparse
import json
import sys
import time


def run_self_test(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="hyflash-chat --self-test")
    parser.add_argument("--drafter", default=None, help="default: hyflash if shipped, else ngram")
    parser.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args(argv)
    try:
        from engine.engine import Engine
        from engine.events import DrafterMismatchError, ErrorEvent, Finished, GenerationSettings

        start = time.perf_counter()
        drafter = args.drafter or "hyflash"
        try:
            engine = Engine(None, drafter=drafter, n_ctx=2048)
        except DrafterMismatchError:
            if args.drafter:
                raise
            drafter = "ngram"
            engine = Engine(None, drafter=drafter, n_ctx=2048)
        load_s = time.perf_counter() - start
        settings = GenerationSettings(max_tokens=args.max_tokens, block_size="auto")
        finished = None
        for event in engine.generate(
            "List three primary colours, one per line.", settings=settings
        ):
            if isinstance(event, ErrorEvent):
                raise RuntimeError(event.message)
            if isinstance(event, Finished):
                finished = event
        if finished is None or not finished.token_ids:
            raise RuntimeError("the model produced no tokens")
        info = engine.info()
        report = {
            "ok": True,
            "model": info.model_id,
            "drafter": drafter,
            "backend": info.backend,
            "load_s": round(load_s, 2),
            "tokens": len(finished.token_ids),
            "tau": round(finished.stats.tau_mean, 3),
            "tokens_per_s": round(finished.stats.tokens_per_s, 1),
            "kernels": list(info.kernels),
            "verify_mode": info.verify_mode,
            "verify_reason": info.verify_reason,
            "text": finished.text,
        }
        print(json.dumps(report))
        engine.close()
        return 0
    except Exception as exc:  # noqa: BLE001 - the self-test reports every failure the same way
        print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}))
        return 1


if __name__ == "__main__":
    sys.exit(run_self_test(sys.argv[1:]))
