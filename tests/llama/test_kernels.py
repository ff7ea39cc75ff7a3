"""The kernel check (engine.llama.kernels, engine.bench.kernel_probe): real children on the
real models for what this machine does, scripted children for what it may not do (die, hang,
fail), the cache, the overrides, the verify plan, chunked verification, and the drafter's
providers."""

from __future__ import annotations

import json
import platform
import struct
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from engine.bench.kernel_probe import exact_rows
from engine.events import ModelLoadError
from engine.llama import kernels as k
from engine.llama.kernels import CheckResult, KernelConfig, KernelVerdict

ON, OFF = KernelConfig(True), KernelConfig(False)


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HYFLASH_CACHE_DIR", str(tmp_path / "cache"))
    for name in (k.ENV_EXTRA_BUFTS, k.ENV_VERIFY, k.ENV_CHECK):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "cache" / "kernels"


@pytest.fixture()
def fake_model(tmp_path) -> Path:
    """A whole GGUF header with no tensors: it passes the file check decide() makes first."""
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 0) + bytes(40))
    return path


def scripted_child(tmp_path: Path, on: str, off: str) -> list[str]:
    """A stand-in for the child: per --extra-bufts value it dies (SIGILL), hangs, fails, or
    reports rows exact up to N ("exact:N")."""
    script = tmp_path / "child.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import json, os, signal, sys, time
            args = sys.argv[1:]
            out = open(args[args.index("--out") + 1], "a")
            def write(step, **kw):
                out.write(json.dumps(dict(step=step, **kw)) + "\\n"); out.flush()
            action = {{"on": {on!r}, "off": {off!r}}}[args[args.index("--extra-bufts") + 1]]
            write("start"); write("loaded")
            if action == "die":
                os.kill(os.getpid(), signal.SIGILL)
            if action == "hang":
                time.sleep(60)
            if action == "fail":
                sys.stderr.write("boom: no such tensor\\n"); sys.exit(3)
            n = int(action.split(":")[1])
            write("done", exact_upto=n, checked_rows=32, max_abs_diff=None if n == 32 else 0.5,
                  decode_ms={{"1": 10.0}})
            """
        )
    )
    return [sys.executable, str(script)]


# ----- one child --------------------------------------------------------------------------------


def test_a_child_killed_by_a_signal_counts_as_dies(tmp_path, fake_model):
    cmd = scripted_child(tmp_path, on="die", off="exact:32")
    result = k.run_check(fake_model, ON, n_threads=1, command=cmd)
    assert result.outcome == "dies" and not result.works
    assert "SIGILL" in result.detail and "SIGILL" in result.describe()


def test_a_silent_child_is_killed_and_counts_as_hangs(tmp_path, fake_model):
    cmd = scripted_child(tmp_path, on="hang", off="exact:32")
    start = time.monotonic()
    result = k.run_check(fake_model, ON, n_threads=1, command=cmd, stall_s=1.0)
    assert result.outcome == "hangs" and "loaded" in result.detail
    assert time.monotonic() - start < 20


def test_a_child_that_exits_with_an_error_counts_as_fails(tmp_path, fake_model):
    result = k.run_check(fake_model, ON, n_threads=1, command=scripted_child(tmp_path, "fail", ""))
    assert result.outcome == "fails" and "boom" in result.detail and "exit 3" in result.detail


def test_real_child_on_the_embedded_model(model_path, cache):
    """The real child, both configurations: each either works (then it has checked rows and
    timed decodes) or dies/hangs; and at least one works, or no chat would be possible."""
    results = [k.run_check(model_path, c, n_threads=2) for c in (ON, OFF)]
    for r in results:
        assert r.outcome in ("works", "dies", "hangs"), r.describe()
        if r.works:
            assert r.checked_rows == 32 and 0 <= r.exact_upto <= 32
            assert set(r.decode_ms) >= {1, 4, 16} and r.decode_ms[1] > 0
    assert any(r.works for r in results)
    # SmolLM2's Q4_1 takes one kernel at every row count with extra buffer types off
    assert results[1].works and results[1].exact_upto == 32


# ----- the rows comparison itself ------------------------------------------------------------


class RowsTarget:
    """A target whose batched rows drift from single-row results from `drift_at` rows on, as
    llama.cpp's tiled K-quant kernel does from 8."""

    def __init__(self, drift_at: int) -> None:
        self.drift_at, self.tokens = drift_at, []

    n_past = property(lambda self: len(self.tokens))

    def reset(self):
        self.tokens = []

    def prefill(self, tokens):
        self.tokens += tokens

    def truncate(self, n):
        del self.tokens[n:]

    def decode(self, tokens):
        rows = np.array([[float(t * 7 + len(self.tokens) + i)] for i, t in enumerate(tokens)])
        if len(tokens) >= self.drift_at:
            rows = rows + 0.5
        self.tokens += tokens
        return SimpleNamespace(logits=rows.astype(np.float32))


def test_exact_rows_finds_the_first_row_count_that_differs():
    seen = []
    found, diff = exact_rows(
        RowsTarget(5), [1, 2, 3], list(range(10, 20)), lambda b, same: seen.append(same)
    )
    assert found == 4 and diff > 0
    assert seen == [True] * 4 + [False]  # stops at the first difference
    assert exact_rows(RowsTarget(99), [1], list(range(10, 42))) == (32, None)


def _x86_with_avx2() -> bool:
    from engine.llama.backends import probe

    return platform.machine().lower() in ("x86_64", "amd64") and probe().cpu.has("avx2")


@pytest.mark.skipif(not _x86_with_avx2(), reason="ggml's tiled K-quant kernel is x86 AVX2+ only")
def test_real_check_flags_gemma_q4_k_m_rows_from_8_and_not_with_the_tiled_kernel_off(
    gemma_path, cache, monkeypatch
):
    """Gemma-3-270M Q4_K_M: from 8 rows ggml-cpu takes its tiled K-quant matmul, whose rows are
    not bit-identical to the per-row dot products of a single decode; GGML_CPU_TILED_MM=0
    keeps the per-row kernel at every B. The check must tell the two apart."""
    default = k.run_check(gemma_path, OFF, n_threads=2)
    assert default.works and default.exact_upto == 7 and default.max_abs_diff > 0
    monkeypatch.setenv("GGML_CPU_TILED_MM", "0")
    untiled = k.run_check(gemma_path, OFF, n_threads=2)
    assert untiled.works and untiled.exact_upto == 32


# ----- the decision, the cache and the overrides ----------------------------------------------


def test_decide_skips_a_dying_configuration_and_remembers(tmp_path, cache, fake_model):
    lines = []
    cmd = scripted_child(tmp_path, on="die", off="exact:32")
    verdict = k.decide(fake_model, n_threads=2, command=cmd, progress=lines.append)
    assert verdict.config == OFF and verdict.exact_upto == 32 and not verdict.from_cache
    assert [r.outcome for r in verdict.results] == ["dies", "works"]
    assert lines and "checking this CPU" in lines[0]
    assert "dies here (SIGILL" in verdict.summary()[0]
    # the second start pays nothing: a child that would fail is never run
    again = k.decide(fake_model, n_threads=2, command=scripted_child(tmp_path, "fail", "fail"))
    assert again.from_cache and again.config == OFF and again.exact_upto == 32
    # another thread count is another verdict
    other = k.decide(fake_model, n_threads=1, command=scripted_child(tmp_path, "exact:32", ""))
    assert other.config == ON and [r.outcome for r in other.results] == ["works"]


def test_decide_prefers_the_more_exact_configuration(tmp_path, cache, fake_model):
    cmd = scripted_child(tmp_path, on="exact:7", off="exact:32")
    verdict = k.decide(fake_model, n_threads=2, command=cmd)
    assert verdict.config == OFF and verdict.exact_upto == 32
    tie = k.decide(fake_model, n_threads=3, command=scripted_child(tmp_path, "exact:7", "exact:7"))
    assert tie.config == ON and tie.exact_upto == 7  # equal: the faster kernels stay on


def test_a_damaged_verdict_is_ignored_and_rewritten(tmp_path, cache, fake_model):
    cmd = scripted_child(tmp_path, on="hang", off="exact:32")
    k.decide(fake_model, n_threads=2, command=cmd, stall_s=1.0)
    (verdict_file,) = cache.glob("*.json")
    verdict_file.write_text("{ not json", encoding="utf-8")
    again = k.decide(fake_model, n_threads=2, command=scripted_child(tmp_path, "die", "exact:9"))
    assert not again.from_cache and again.exact_upto == 9
    assert json.loads(verdict_file.read_text())["exact_upto"] == 9


def test_nothing_works_is_a_clear_load_error(tmp_path, cache, fake_model):
    with pytest.raises(ModelLoadError, match="cannot run m.gguf.*dies here.*fail"):
        k.decide(fake_model, n_threads=2, command=scripted_child(tmp_path, "die", "fail"))


def test_setting_and_environment_force_either_way(tmp_path, cache, fake_model, monkeypatch):
    cmd = scripted_child(tmp_path, on="exact:32", off="exact:32")
    monkeypatch.setenv(k.ENV_EXTRA_BUFTS, "off")
    verdict = k.decide(fake_model, n_threads=2, command=cmd)
    assert verdict.config == OFF and [r.config for r in verdict.results] == [OFF]
    assert (
        verdict.forced == "HYFLASH_EXTRA_BUFTS=off"
        and "HYFLASH_EXTRA_BUFTS" in verdict.summary()[-1]
    )
    # the argument (the app's setting) wins over the environment
    forced_on = k.decide(fake_model, n_threads=2, extra_bufts=True, command=cmd)
    assert forced_on.config == ON and forced_on.forced == "set in settings"
    # forcing a configuration that dies here is refused, not a crash
    with pytest.raises(ModelLoadError, match="dies here"):
        k.decide(
            fake_model, n_threads=4, extra_bufts=True, command=scripted_child(tmp_path, "die", "")
        )
    monkeypatch.setenv(k.ENV_CHECK, "off")
    unchecked = k.decide(fake_model, n_threads=5, command=scripted_child(tmp_path, "die", "die"))
    assert unchecked.exact_upto is None and unchecked.config == OFF  # HYFLASH_EXTRA_BUFTS=off


def test_verify_plan():
    exact32 = KernelVerdict(OFF, 32)  # options.MAX_BLOCK_SIZE: no block is ever larger
    assert exact32.verify_plan("auto").chunk is None
    assert exact32.verify_plan("fast").mode == "exact"  # whole blocks are exact anyway
    seven = KernelVerdict(OFF, 7)
    plan = seven.verify_plan("auto")
    assert (plan.mode, plan.chunk) == ("exact", 7) and "chunks of 7" in plan.reason
    fast = seven.verify_plan("fast")
    assert (fast.mode, fast.chunk) == ("fast", None) and "from B=8" in fast.reason
    assert KernelVerdict(OFF, 20).verify_plan("auto").chunk == 20  # 20 < 32: still chunked
    two = KernelVerdict(OFF, 2)
    assert two.verify_plan("auto").mode == "fast"  # chunks of 2 would cost the gain
    assert two.verify_plan("exact").chunk == 2
    assert KernelVerdict(ON, None).verify_plan("exact").mode == "fast"
    with pytest.raises(ValueError):
        seven.verify_plan("fastest")


def test_the_verify_plan_covers_every_block_size_the_settings_allow():
    """A fixed --block-size may reach options.MAX_BLOCK_SIZE (32) while the chooser stops at
    Engine.max_block (16): with batched rows exact up to B=20, a block of 32 must still be
    verified in chunks of 20, not in one decode that the stats would call exact."""
    from engine.engine import Engine
    from engine.events import GenerationSettings
    from engine.options import DEFAULT_MAX_BLOCK, MAX_BLOCK_SIZE

    GenerationSettings(block_size=MAX_BLOCK_SIZE)  # the settings allow it
    eng = Engine.__new__(Engine)  # no model: only the verify plan is under test
    eng.kernels, eng.max_block = KernelVerdict(OFF, 20), DEFAULT_MAX_BLOCK
    eng.set_verify_mode("auto")
    assert (eng.verify.mode, eng.verify.chunk) == ("exact", 20)


def test_verdict_round_trips_through_json():
    result = CheckResult(OFF, "works", 7, 32, 0.25, {1: 10.0, 16: 90.0})
    verdict = KernelVerdict(OFF, 7, (CheckResult(ON, "dies", detail="SIGILL"), result), "x")
    again = KernelVerdict.from_dict(json.loads(json.dumps(verdict.to_dict())))
    assert again.results == verdict.results and again.config == OFF and again.exact_upto == 7


def test_the_engine_on_this_machine_uses_a_configuration_that_works(engine):
    verdict = engine.kernels
    chosen = next(r for r in verdict.results if r.config == verdict.config)
    assert chosen.works and engine.target.kernels == verdict.config
    info = engine.info()
    assert info.kernels == tuple(verdict.summary()) and info.verify_mode in ("exact", "fast")
    assert info.verify_reason


def test_every_llama_load_goes_through_the_decision(model_path, monkeypatch):
    from engine.llama import target as target_module

    seen = []

    def decide(path, **kw):
        seen.append((Path(path), kw))
        return KernelVerdict(OFF, 32)

    monkeypatch.setattr(target_module, "decide", decide)
    with target_module.LlamaTarget(model_path, n_ctx=64, n_threads=1) as t:
        assert t.kernels == OFF and t.kernel_verdict.exact_upto == 32
    assert seen == [(model_path, {"n_threads": 1, "n_gpu_layers": 0})]


# ----- chunked verification ---------------------------------------------------------------------


class ArgmaxTarget:
    """Rows whose argmax is the next token of `truth`; records each decode's row count."""

    def __init__(self, truth: list[int], vocab: int = 50) -> None:
        self.truth, self.vocab, self.decodes, self.n_past = truth, vocab, [], 0

    def decode(self, tokens):
        rows = np.zeros((len(tokens), self.vocab), dtype=np.float32)
        for i in range(len(tokens)):
            rows[i, self.truth[self.n_past + i + 1]] = 1.0
        self.n_past += len(tokens)
        self.decodes.append(len(tokens))
        return SimpleNamespace(logits=rows)


def _verify(truth, block, chunk):
    from engine.decoding.sampling import Warp
    from engine.decoding.speculative import _judge, verify_block

    target = ArgmaxTarget(truth)
    drafts = np.array(block[1:], dtype=np.int32)
    judge = _judge(Warp(), 0, 0, drafts, None)
    return (*verify_block(target, block, judge, chunk), target.decodes)


def test_chunked_verify_accepts_like_one_decode_and_stops_at_a_rejection():
    truth = list(range(1, 40))  # the target continues 1, 2, 3, ...
    all_right = [1, *range(2, 18)]  # anchor 1 and 16 correct drafts
    assert _verify(truth, all_right, None)[:2] == (16, 18)
    assert _verify(truth, all_right, 7) == (16, 18, 17, [7, 7, 3])
    wrong_at_3 = [1, 2, 3, 99, *range(5, 18)]
    assert _verify(truth, wrong_at_3, 7) == (2, 4, 7, [7])  # later chunks never decoded
    wrong_at_9 = [1, *range(2, 10), 99, *range(11, 18)]
    assert _verify(truth, wrong_at_9, 7)[:2] == _verify(truth, wrong_at_9, None)[:2] == (8, 10)
    assert _verify(truth, wrong_at_9, 7)[-1] == [7, 7]
    assert _verify(truth, [1], 7)[:2] == (0, 2)  # no drafts: plain decoding
