"""Drafter specs (engine.drafters.spec) and the one fallback policy (Engine.set_drafter with a
fallback: the model is loaded once, only the drafter is swapped), used by the CLI, the server
and the app's worker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine.drafters.spec import (
    DrafterSpec,
    drafter_folder,
    hyflash_status,
    parse_drafter_spec,
)
from engine.events import DrafterMismatchError
from engine.paths import REPO

GOOD = {
    "none": DrafterSpec("none"),
    "ngram": DrafterSpec("ngram"),
    "hyflash": DrafterSpec("hyflash"),
    "hyflash@int8": DrafterSpec("hyflash", "int8"),
    " hyflash@int4 ": DrafterSpec("hyflash", "int4"),
    "hybrid:hyflash": DrafterSpec("hyflash", None, hybrid=True),
    "hybrid:hyflash@int8": DrafterSpec("hyflash", "int8", hybrid=True),
    "hybrid:ngram": DrafterSpec("ngram", None, hybrid=True),
    "/some/drafter": DrafterSpec("/some/drafter"),
    "/some/drafter@fp32": DrafterSpec("/some/drafter", "fp32"),
    "/home/a@b/drafter": DrafterSpec("/home/a@b/drafter"),  # an @ inside the path
    "hybrid:/x@y/d@int8": DrafterSpec("/x@y/d", "int8", hybrid=True),
}

BAD = {
    "hyflash@": "name the weights",
    "@int8": "names no drafter",
    "hybrid:": "names no drafter",
    "": "names no drafter",
    "ngram@int8": "the ngram drafter has no weights",
    "hybrid:none@fp32": "the none drafter has no weights",
    "hybrid:hybrid:hyflash": "not another hybrid",
}


@pytest.mark.parametrize("spec", list(GOOD), ids=list(GOOD))
def test_specs_parse(spec):
    assert parse_drafter_spec(spec) == GOOD[spec]


@pytest.mark.parametrize("spec", list(BAD), ids=list(BAD))
def test_bad_specs_are_refused_in_one_line(spec):
    with pytest.raises(DrafterMismatchError) as caught:
        parse_drafter_spec(spec)
    assert BAD[spec] in str(caught.value) and "\n" not in str(caught.value)


def test_learned_means_files():
    assert not parse_drafter_spec("ngram").learned and not parse_drafter_spec("none").learned
    assert parse_drafter_spec("hyflash").learned and parse_drafter_spec("/d").learned


def test_folder_of_a_path_that_is_not_there(tmp_path):
    with pytest.raises(DrafterMismatchError, match="Unknown drafter '/no/such/drafter'"):
        drafter_folder(parse_drafter_spec("/no/such/drafter@int8"), "m", None)
    assert drafter_folder(parse_drafter_spec(f"{tmp_path}@int8"), "m", None) == tmp_path


def test_hyflash_status_of_a_model_with_no_drafter(tmp_path, monkeypatch):
    monkeypatch.setenv("HYFLASH_DATA_DIR", str(tmp_path))  # no drafters installed here
    ok, why = hyflash_status("no-such-model")
    assert not ok and "No HyFlash drafter exists for the model 'no-such-model'" in why


def test_the_light_modules_load_no_llama_cpp():
    """The loop, the settings table, the spec parser and what the app reads from the engine
    import without llama.cpp (a Target protocol, EngineInfo in engine.events)."""
    code = (
        "import sys, engine.decoding.speculative, engine.options, engine.drafters.spec, "
        "engine.commands.engine_args, engine.commands.serve, app.settings, app.capabilities, "
        "app.engine_link, app.model_manager; print('llama_cpp' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# ----- the fallback policy, on the real model ------------------------------------------------


def test_a_drafter_that_does_not_fit_falls_back_without_a_reload(engine):
    target = engine.target
    try:
        engine.set_drafter("none")
        note = engine.set_drafter("/no/such/drafter", "ngram")
        assert "Unknown drafter '/no/such/drafter'" in note
        assert note.endswith("Using the ngram drafter instead.")
        assert engine.drafter.name == "ngram" and engine.target is target
        assert engine.set_drafter("none", "ngram") is None and engine.drafter.name == "none"
        with pytest.raises(DrafterMismatchError):  # no fallback: the old drafter stays
            engine.set_drafter("ngram@int8")
        assert engine.drafter.name == "none"
    finally:
        engine.set_drafter("ngram")


def test_cli_loads_and_times_the_model_once_when_it_falls_back(
    model_path, tmp_path, monkeypatch, capsys
):
    """A GGUF given by path, with no HyFlash drafter installed for it: the CLI's default
    drafter falls back to the n-gram one on the one engine it loaded."""
    from engine import engine as engine_module
    from engine.commands.cli import build_parser
    from engine.commands.engine_args import load_engine

    monkeypatch.setenv("HYFLASH_DATA_DIR", str(tmp_path))
    loads: list[Path] = []

    class CountedTarget(engine_module.LlamaTarget):
        def __init__(self, path, **kwargs) -> None:
            loads.append(Path(path))
            super().__init__(path, **kwargs)

    monkeypatch.setattr(engine_module, "LlamaTarget", CountedTarget)
    args = build_parser().parse_args(
        ["generate", "--model", str(model_path), "--prompt", "Hi", "--threads", "1"]
    )
    engine = load_engine(args)
    try:
        assert engine.drafter.name == "ngram" and loads == [Path(model_path).resolve()]
        note = capsys.readouterr().err.strip()
        assert note.startswith("note: No HyFlash drafter exists for the model")
        assert note.endswith("Using the ngram drafter instead.")
    finally:
        engine.close()
