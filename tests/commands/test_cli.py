"""The `hyflash` CLI end to end, as a user runs it (subprocesses on the real model)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CLI = [sys.executable, "-m", "engine.commands.cli"]


def run_cli(*args: str, stdin: str | None = None, timeout: int = 300):
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, input=stdin, timeout=timeout
    )


def test_generate_json_has_text_tokens_and_stats():
    out = run_cli(
        "generate",
        "--prompt",
        "Name three colours.",
        "--max-tokens",
        "24",
        "--json",
        "--block-size",
        "4",
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["text"] and len(data["tokens"]) == data["stats"]["tokens_generated"]
    stats = data["stats"]
    for key in (
        "tau_mean",
        "slot_accept_counts",
        "tokens_per_s",
        "ttft_s",
        "prefill_tokens_per_s",
        "target_kv_bytes",
        "draft_memory_bytes",
        "block_size",
        "accepted",
    ):
        assert key in stats
    assert stats["block_size_mode"] == "fixed" and stats["tau_mean"] >= 1.0


def test_raw_generate_matches_between_main_py_and_console_script():
    args = ["generate", "--prompt", "def add(a, b):", "--raw", "--max-tokens", "16", "--json"]
    a = run_cli(*args, "--drafter", "none")
    b = subprocess.run(
        [sys.executable, "main.py", "--cli", *args, "--drafter", "ngram"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert json.loads(a.stdout)["tokens"] == json.loads(b.stdout)["tokens"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--block-size", "1000"], "block size"),
        (["--block-size", "0"], "block size"),
        (["--model", "/nonexistent/model.gguf"], "not found"),
        (["--drafter", "bogus"], "Unknown drafter"),
    ],
)
def test_bad_arguments_give_clear_errors(args, message):
    out = run_cli("generate", "--prompt", "Hi", "--max-tokens", "4", *args)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "command", [["generate", "--prompt", "Hi"], ["chat"], ["bench", "--quick"]], ids=str
)
@pytest.mark.parametrize(
    ("args", "message"),
    [(["--temperature", "-1"], "temperature"), (["--top-p", "5"], "top-p")],
)
def test_bad_sampling_options_are_refused_before_loading(command, args, message):
    out = run_cli(*command, *args, timeout=60)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr
    assert out.stdout == ""  # refused before the model loads (chat prints a banner once loaded)


def test_empty_prompt_is_refused():
    out = run_cli("generate", "--prompt", "  ")
    assert out.returncode == 2 and "empty" in out.stderr


def test_interactive_chat_streams_and_prints_stats():
    out = run_cli("chat", "--max-tokens", "16", stdin="Say hello.\nAnd again.\n\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("tau ") == 2 and "tok/s" in out.stdout
