"""The chat card's rendering cost per streamed token, split by kind of work.

    # once: real answers from the embedded model, with the worker's update cadence
    python scripts/profile_app_render.py record --out docs/bench/app-render/answers.jsonl
    # replay them into a real MessageWidget inside a ChatView (offscreen)
    QT_QPA_PLATFORM=offscreen python scripts/profile_app_render.py replay \
        --answers docs/bench/app-render/answers.jsonl --out docs/bench/app-render/after.json
    python scripts/profile_app_render.py table before.json after.json

`record` runs the engine as the app's worker does (HyFlash, block size auto, temperature 0.2,
top-p 0.9) and groups the text deltas into the updates the worker would emit (at most one per
EMIT_INTERVAL_S, on a step boundary), each with its time since the first token. `replay` feeds
those updates into a card at the same cadence, the Qt event loop running between them as in
the app, then finishes the card as the window does. The UI thread's CPU time (thread time,
not wall time) is split into: block split/parse, Markdown/plain-text conversion, tinting,
document layout (height/width fitting), the window's layout requests and painting (the Qt
events that carry them), and the rest. A benchmark (numbers printed and written), not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from engine.bench.app_tables import RENDER_CATEGORIES, render_cost_table

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

# Prompts per answer kind, tried in order until one answers with MIN_TOKENS or more (the
# small model often stops early or never writes code); the longest fitting answer is kept.
# A mixed answer must hold prose and code: the embedded SmolLM2-135M does not write one that
# long, Qwen2.5-Coder-0.5B does (record --kinds mixed --model qwen2.5-coder-0.5b-instruct).
ANSWERS = {
    "prose": [
        "Explain in detail how the Internet works: write many paragraphs about packets, "
        "routing, DNS, TCP and HTTP, with a few bulleted lists and nested lists.",
    ],
    "code": [
        "Write one long Python module, in a single code block, that implements a to-do list "
        "manager: a Task dataclass, a TaskList class with add, remove, complete, search, sort "
        "and JSON save/load methods, and an argparse command-line interface with subcommands.",
    ],
    "mixed": [
        "Write a long tutorial on Python decorators. For each of these six topics write a "
        "paragraph of explanation followed by a complete code example: a simple decorator, "
        "decorators with arguments, functools.wraps, class decorators, stacking decorators, "
        "and a caching decorator.",
        "Write a complete beginner's guide to Python lists, dictionaries, sets and tuples. For "
        "each one, explain it in two paragraphs, then give a code example, then list its most "
        "common methods as a bulleted list.",
        "Explain how to build a small web server in Python step by step: for each of eight "
        "steps write a paragraph and then a code block.",
        "Write a detailed README for a Python project called taskman: overview, installation "
        "with shell commands, usage examples in code blocks, a configuration section, an API "
        "reference with code, and a FAQ.",
    ],
}
MIN_TOKENS = 800


def _record_one(engine, prompt: str, settings) -> dict:
    from app.worker import EMIT_INTERVAL_S
    from engine.events import Finished, StepStats, TextDelta

    updates: list[dict] = []
    pending: list[list] = []
    t0 = None
    last_emit = 0.0
    for event in engine.generate(prompt, settings=settings):
        now = time.monotonic()
        if isinstance(event, TextDelta):
            t0 = now if t0 is None else t0
            pending.append([event.text, event.drafted])
        elif isinstance(event, StepStats | Finished) and pending:
            # the worker's rule: flush on a step once EMIT_INTERVAL_S has passed
            if isinstance(event, Finished) or now - last_emit >= EMIT_INTERVAL_S:
                updates.append({"t": round(now - t0, 4), "runs": pending})
                pending, last_emit = [], now
        if isinstance(event, Finished):
            fin = event
    return {
        "prompt": prompt,
        "model": engine.model_id,
        "tokens": len(fin.token_ids),
        "stop_reason": fin.stop_reason,
        "text": fin.text,
        "updates": updates,
    }


def _fits(kind: str, entry: dict) -> bool:
    has_code = "```" in entry["text"]
    return has_code if kind == "mixed" else kind != "code" or has_code


def record(
    out: Path, max_tokens: int, threads: int | None, kinds: list[str], model: str | None
) -> None:
    """Record answers of `kinds` into `out`, keeping the entries of other kinds there."""
    from engine.engine import Engine
    from engine.events import GenerationSettings

    engine = Engine(model, drafter="hyflash", n_threads=threads)
    settings = GenerationSettings(
        max_tokens=max_tokens, block_size="auto", temperature=0.2, top_p=0.9, seed=0
    )
    kept = {}
    if out.exists():
        for line in out.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            kept[entry["kind"]] = entry
    for kind in kinds:
        best = None
        for prompt in ANSWERS[kind]:
            entry = {"kind": kind, **_record_one(engine, prompt, settings)}
            print(
                f"{kind}: {entry['tokens']} tokens, {len(entry['updates'])} updates",
                file=sys.stderr,
            )
            if not _fits(kind, entry):
                continue
            if best is None or entry["tokens"] > best["tokens"]:
                best = entry
            if best["tokens"] >= MIN_TOKENS:
                break
        if best is None:
            raise SystemExit(f"no {kind} answer fits (see above)")
        kept[kind] = best
    engine.close()
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(kept[k]) for k in ANSWERS if k in kept]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")


class _Clock:
    """Exclusive UI-thread CPU time per category: a wrapped call's time goes to its own
    category minus what the calls nested in it spent."""

    def __init__(self) -> None:
        self.totals = dict.fromkeys(RENDER_CATEGORIES, 0.0)
        self.calls = dict.fromkeys(RENDER_CATEGORIES, 0)
        self._stack: list[list] = []

    def run(self, category: str, fn, *args, **kwargs):
        frame = [time.thread_time(), 0.0]
        self._stack.append(frame)
        try:
            return fn(*args, **kwargs)
        finally:
            self._stack.pop()
            spent = time.thread_time() - frame[0]
            self.totals[category] += spent - frame[1]
            self.calls[category] += 1
            if self._stack:
                self._stack[-1][1] += spent

    def wrap(self, owner, name: str, category: str) -> None:
        original = getattr(owner, name, None)
        if original is None:
            return
        clock = self

        def timed(*args, **kwargs):
            return clock.run(category, original, *args, **kwargs)

        setattr(owner, name, timed)


def _instrument(clock: _Clock) -> None:
    """Wrap the rendering path's pieces (those that exist in this version of the code)."""
    from PySide6.QtWidgets import QPlainTextEdit, QTextBrowser

    import app.chat_view as cv

    cv_names = [
        (cv, "split_blocks", "split"),
        (cv, "resume_at", "split"),
        (cv, "settled_end", "split"),
        (cv, "run_pieces", "split"),
        (cv, "_tint_rendered", "tint"),
        (cv.MarkdownBlock, "_fit", "fit"),
        (cv.CodeBlockWidget, "_fit", "fit"),
        (cv.CodeBlockWidget, "_append_code", "convert"),
        (cv.MarkdownBlock, "_replace_tail", "convert"),
    ]
    for owner, name, category in cv_names:
        clock.wrap(owner, name, category)
    # the Qt conversions themselves, called from Python on these classes
    cv.MarkdownBlock.setMarkdown = lambda self, md: clock.run(
        "convert", QTextBrowser.setMarkdown, self, md
    )
    cv.CodeView.setPlainText = lambda self, text: clock.run(
        "convert", QPlainTextEdit.setPlainText, self, text
    )


def _make_app(clock: _Clock):
    from PySide6.QtCore import QEvent
    from PySide6.QtWidgets import QApplication

    kinds = {QEvent.Type.LayoutRequest: "layout_events", QEvent.Type.UpdateRequest: "paint_events"}

    class TimedApp(QApplication):
        """Times the events that carry the window's layout and painting (the outermost
        only: an UpdateRequest paints every dirty child inside it)."""

        def notify(self, receiver, event):  # noqa: N802 - Qt override
            category = kinds.get(event.type())
            if category is None:
                return super().notify(receiver, event)
            return clock.run(category, super().notify, receiver, event)

    return TimedApp([])


def replay(answers: Path, out: Path | None, label: str, speed: float) -> dict:
    from PySide6.QtCore import QEventLoop, QTimer

    clock = _Clock()
    qapp = _make_app(clock)
    _instrument(clock)
    from app.chat_view import ChatView
    from app.theme import apply_theme

    apply_theme(qapp, "light", 11)
    view = ChatView()
    view.resize(900, 700)
    view.show()

    def idle_until(deadline: float) -> None:
        """The event loop runs (idle between events, as in the app) until `deadline`."""
        loop = QEventLoop()
        QTimer.singleShot(max(0, int((deadline - time.monotonic()) * 1000)), loop.quit)
        loop.exec()

    rows = []
    for line in answers.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        view.clear()
        view.add_message("user", entry["prompt"], 11)
        card = view.add_message("assistant", "", 11)
        stream = getattr(card, "stream_text", card.set_text)  # the old code had one entry
        idle_until(time.monotonic() + 0.2)
        before = dict(clock.totals)
        cpu0 = time.thread_time()
        start = time.monotonic()
        text, runs = "", []
        for update in entry["updates"]:
            idle_until(start + update["t"] / speed)
            new = [(t, bool(d)) for t, d in update["runs"]]
            runs.extend(new)
            text += "".join(t for t, _d in new)
            stream(text, runs)
        card.set_text(entry["text"], runs)
        idle_until(time.monotonic() + 0.3)  # the last layout and paint
        cpu = time.thread_time() - cpu0
        assert card.rendered_text() is not None
        tokens = entry["tokens"]
        split = {c: (clock.totals[c] - before[c]) * 1000 / tokens for c in RENDER_CATEGORIES}
        split["other"] = cpu * 1000 / tokens - sum(split.values())
        row = {
            "kind": entry["kind"],
            "tokens": tokens,
            "updates": len(entry["updates"]),
            "chars": len(entry["text"]),
            "ui_cpu_ms_per_token": cpu * 1000 / tokens,
            "ms_per_token": split,
        }
        rows.append(row)
        print(
            f"{label} {entry['kind']}: {tokens} tok, {row['ui_cpu_ms_per_token']:.2f} ms/token "
            + " ".join(f"{k}={v:.3f}" for k, v in split.items()),
            file=sys.stderr,
        )
    result = {"label": label, "answers": str(answers), "speed": speed, "rows": rows}
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    view.close()
    return result


def table(results: list[Path]) -> str:
    """A markdown table of replay results side by side (e.g. before and after a change)."""
    loaded = [json.loads(path.read_text(encoding="utf-8")) for path in results]
    return "\n".join(render_cost_table(loaded)) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="generate the answers (real model)")
    r.add_argument("--out", type=Path, default=Path("docs/bench/app-render/answers.jsonl"))
    r.add_argument("--max-tokens", type=int, default=1000)
    r.add_argument("--threads", type=int, default=None)
    r.add_argument("--kinds", default=",".join(ANSWERS), help="answer kinds to (re)record")
    r.add_argument("--model", default=None, help="the target (default: the embedded model)")
    q = sub.add_parser("replay", help="replay the answers into a card, timed")
    q.add_argument("--answers", type=Path, default=Path("docs/bench/app-render/answers.jsonl"))
    q.add_argument("--out", type=Path, default=None)
    q.add_argument("--label", default="")
    q.add_argument("--speed", type=float, default=1.0, help="replay this many times faster")
    t = sub.add_parser("table", help="a markdown table of replay results")
    t.add_argument("results", type=Path, nargs="+")
    args = p.parse_args(argv)
    if args.cmd == "record":
        kinds = [k for k in args.kinds.split(",") if k]
        record(args.out, args.max_tokens, args.threads, kinds, args.model)
    elif args.cmd == "replay":
        replay(args.answers, args.out, args.label, args.speed)
    else:
        print(table(args.results), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
