"""One settings contract (issue 40): GenerationSettings checks itself when made, and every
surface (CLI, server: tests/server/test_settings_errors.py, app) shows its one-line message;
a damaged model file is named as such before any kernel check, in one line with no
traceback, by every entry point."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine.events import GenerationSettings, ModelFileError, ModelLoadError, SettingError
from engine.options import MAX_BLOCK_SIZE
from engine.paths import REPO

CLI = [sys.executable, "-m", "engine.commands.cli"]

BAD = {
    "block size 0": ({"block_size": 0}, "block_size", "block size must be 'auto' or 1..32, not 0"),
    "block size 33": ({"block_size": 33}, "block_size", "block size must be 'auto' or 1..32"),
    "block size -3": ({"block_size": -3}, "block_size", "block size must be 'auto' or 1..32"),
    "block size text": ({"block_size": "big"}, "block_size", "not 'big'"),
    "block size as text": ({"block_size": "4"}, "block_size", "not '4'"),
    "block size bool": ({"block_size": True}, "block_size", "not True"),
    "block size float": ({"block_size": 4.0}, "block_size", "not 4.0"),
    "temperature -1": (
        {"temperature": -1},
        "temperature",
        "temperature must be 0 (greedy) or more, not -1",
    ),
    "temperature NaN": ({"temperature": float("nan")}, "temperature", "0 (greedy) or more"),
    "temperature inf": ({"temperature": float("inf")}, "temperature", "must be finite"),
    "temperature text": ({"temperature": "hot"}, "temperature", "not 'hot'"),
    "top_p 5": ({"top_p": 5}, "top_p", "top-p must be above 0 and at most 1, not 5"),
    "top_p 0": ({"top_p": 0.0}, "top_p", "top-p must be above 0 and at most 1, not 0.0"),
    "top_k -1": ({"top_k": -1}, "top_k", "top-k must be 0 (off) or more, not -1"),
    "top_k 1.5": ({"top_k": 1.5}, "top_k", "top-k must be 0 (off) or more"),
    "max_tokens 0": ({"max_tokens": 0}, "max_tokens", "max tokens must be at least 1, not 0"),
    "max_tokens text": ({"max_tokens": "8"}, "max_tokens", "max tokens must be at least 1"),
    "seed text": ({"seed": "x"}, "seed", "seed must be a whole number or None"),
    "seed float": ({"seed": 1.5}, "seed", "seed must be a whole number or None"),
    "stop a string": ({"stop": "END"}, "stop", "stop must be a list of strings"),
    "stop a number": ({"stop": ["a", 3]}, "stop", "stop must be a list of strings"),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_settings_raise_one_line_naming_the_field(case):
    kwargs, field, says = BAD[case]
    with pytest.raises(ValueError) as caught:
        GenerationSettings(**kwargs)
    assert isinstance(caught.value, SettingError) and caught.value.field == field
    message = str(caught.value)
    assert says in message and "\n" not in message


def test_good_settings_pass():
    default = GenerationSettings()
    assert default.block_size == "auto" and default.fixed_block is None
    for block in (1, 4, MAX_BLOCK_SIZE):
        assert GenerationSettings(block_size=block).fixed_block == block
    GenerationSettings(temperature=0, top_p=1, top_k=0, max_tokens=1, seed=0)
    GenerationSettings(temperature=1.7, top_p=0.01, top_k=40, max_tokens=32768, seed=2**62)
    assert GenerationSettings(stop=("a", "b")).stop == ["a", "b"]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, cwd=REPO)


def one_error_line(out: subprocess.CompletedProcess) -> str:
    """The CLI refused: exit status 2 and one `error:` line on stderr, no traceback."""
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr + out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--block-size", "0", "block size must be 'auto' or 1..32, not 0"),
        ("--temperature", "-1", "temperature must be 0 (greedy) or more"),
        ("--top-p", "5", "top-p must be above 0 and at most 1"),
    ],
)
def test_cli_shows_the_settings_message(option, value, says):
    # refused before any model is loaded
    line = one_error_line(run_cli("generate", "--prompt", "Hi", option, value))
    assert says in line


def test_serve_shows_the_block_size_message():
    line = one_error_line(run_cli("serve", "--port", "0", "--block-size", "0"))
    assert "block size must be 'auto' or 1..32, not 0" in line


# ----- damaged model files ----------------------------------------------------------------


def _gguf_head(model_path: Path, path: Path, size: int) -> Path:
    """The first `size` bytes of the real GGUF, written to `path`."""
    with open(model_path, "rb") as src:
        path.write_bytes(src.read(size))
    return path


@pytest.fixture()
def truncated(tmp_path, model_path) -> Path:
    """The first 1 MB of the real GGUF: its header is cut short."""
    return _gguf_head(model_path, tmp_path / "trunc.gguf", 1_000_000)


@pytest.fixture()
def cut_data(tmp_path, model_path) -> Path:
    """The first 3 MB: the header is whole, the tensor data is not."""
    return _gguf_head(model_path, tmp_path / "cut.gguf", 3_000_000)


@pytest.fixture()
def kernel_cache(tmp_path, monkeypatch) -> None:
    """A fresh kernel-check cache (nothing remembered about these files), for this process
    and the CLI's."""
    monkeypatch.setenv("HYFLASH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("HYFLASH_KERNEL_CHECK", raising=False)


def assert_names_damage(message: str, path: Path) -> None:
    assert "\n" not in message.strip() and "Traceback" not in message, message
    assert path.name in message and "damaged" in message, message
    assert "on this machine" not in message and "check failed" not in message, message


@pytest.mark.parametrize("which", ["truncated", "cut_data"])
def test_generate_names_a_damaged_file(which, request, kernel_cache):
    path = request.getfixturevalue(which)
    line = one_error_line(run_cli("generate", "--model", str(path), "--prompt", "Hi"))
    assert_names_damage(line, path)
    assert "cut short" in line


def test_serve_names_a_damaged_file(truncated, kernel_cache):
    line = one_error_line(run_cli("serve", "--port", "0", "--model", str(truncated)))
    assert_names_damage(line, truncated)


def test_engine_names_a_damaged_file_before_the_kernel_check(cut_data, kernel_cache):
    from engine.engine import Engine

    steps: list[str] = []
    with pytest.raises(ModelFileError) as caught:
        Engine(cut_data, profile=False, progress=steps.append)
    assert_names_damage(str(caught.value), cut_data)
    assert not any("kernels" in s for s in steps), steps  # no child was started


def test_app_load_names_a_damaged_file(qtbot, truncated, kernel_cache):
    """What the app's worker does on load, and so what its error banner shows."""
    from qt_helpers import spin

    from app.worker import EngineConfig, EngineHost

    host = EngineHost()
    failures: list[str] = []
    host.worker.loadFailed.connect(failures.append)
    try:
        host.load(EngineConfig(model=str(truncated), drafter="ngram", n_threads=1))
        assert spin(lambda: host.state in ("ready", "failed"), 120)
        assert host.state == "failed" and failures, host.state_message
        assert_names_damage(failures[0], truncated)
        assert host.state_message == failures[0]
    finally:
        host.shutdown()


def test_kernel_child_reports_a_kind_and_one_line(truncated, kernel_cache):
    """The child itself (run directly): a file llama.cpp will not load comes back as kind
    "load" and one line, whatever the configuration."""
    from engine.llama import kernels

    result = kernels.run_check(truncated, kernels.KernelConfig(False), n_threads=1)
    assert result.outcome == "fails" and result.kind == "load"
    assert_names_damage(result.detail, truncated)


def test_a_file_no_configuration_loads_is_blamed_on_the_file(truncated, kernel_cache, monkeypatch):
    """Past the header check (skipped here), the children's "load" failures make one line
    about the file, not "cannot run on this machine"."""
    from engine.llama import gguf_file, kernels

    monkeypatch.setattr(gguf_file, "check_gguf_data", lambda path: None)
    with pytest.raises(ModelLoadError) as caught:
        kernels.decide(truncated, n_threads=1)
    assert_names_damage(str(caught.value), truncated)


def test_block_size_validation():
    assert GenerationSettings(block_size="auto").fixed_block is None
    assert GenerationSettings(block_size=4).fixed_block == 4
    for bad in (0, 1000, "x", -1):
        with pytest.raises(ValueError, match="block size"):
            GenerationSettings(block_size=bad)
