"""Damaged drafters never stop the engine: a card with bad values is passed over with one line
naming it, and a drafter whose ids fall outside the target's vocabulary is refused at load, so
the engine falls back to n-gram lookup and answers exactly as plain decoding does."""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np

from engine.drafters.installed import find_drafter, installed_drafters
from engine.events import Finished, GenerationSettings
from engine.paths import resources_dir

SHIPPED = resources_dir() / "drafters" / "hyflash-smollm2-135m"


def _install(root, name: str, edit) -> None:
    folder = root / "drafters" / name
    folder.mkdir(parents=True)
    card = json.loads((SHIPPED / "card.json").read_text(encoding="utf-8"))
    edit(card)
    (folder / "card.json").write_text(json.dumps(card), encoding="utf-8")


def test_cards_with_bad_values_are_passed_over_with_one_line_each(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("HYFLASH_DATA_DIR", str(tmp_path))
    _install(tmp_path, "good", lambda c: None)
    _install(tmp_path, "size-in-words", lambda c: c["target"].update(file_size="2.5 GB"))
    _install(tmp_path, "target-not-an-object", lambda c: c.update(target="a model"))
    _install(tmp_path, "tau-in-words", lambda c: c.update(validation={"tau": "high"}))
    with caplog.at_level(logging.WARNING, logger="engine.drafters.installed"):
        assert [d.name for d in installed_drafters()] == [
            json.loads((SHIPPED / "card.json").read_text())["name"]
        ]
        installed_drafters()  # a second look says nothing new
    skipped = [r.getMessage() for r in caplog.records]
    assert len(skipped) == 3
    for name in ("size-in-words", "target-not-an-object", "tau-in-words"):
        assert sum(str(tmp_path / "drafters" / name) in line for line in skipped) == 1
    pinned = json.loads((SHIPPED / "card.json").read_text())["target"]["gguf_sha256"]
    assert find_drafter(sha256=pinned) == tmp_path / "drafters" / "good"


def _answer(engine, prompt: str) -> list[int]:
    settings = GenerationSettings(max_tokens=40, block_size=4)
    (fin,) = [e for e in engine.generate(prompt, settings=settings) if isinstance(e, Finished)]
    return list(fin.token_ids)


def test_a_drafter_with_ids_outside_the_vocabulary_falls_back_to_ngram(engine, tmp_path):
    tampered = tmp_path / "tampered"
    shutil.copytree(SHIPPED, tampered)
    ids = np.load(tampered / "draft_vocab.npy")
    ids[-1] = engine.target.n_vocab + 7
    np.save(tampered / "draft_vocab.npy", ids)
    try:
        engine.set_drafter("none")
        plain = _answer(engine, "Name three rivers of Europe.")
        note = engine.set_drafter(str(tampered), "ngram")
        assert "draft_vocab.npy names token ids outside the target's vocabulary" in note
        assert engine.drafter.name == "ngram"
        assert _answer(engine, "Name three rivers of Europe.") == plain
    finally:
        engine.set_drafter("ngram")


def test_a_damaged_card_falls_back_with_the_file_named(engine, tmp_path):
    damaged = tmp_path / "damaged"
    shutil.copytree(SHIPPED, damaged)
    card = json.loads((damaged / "card.json").read_text())
    card["config"]["d_model"] = "wide"
    (damaged / "card.json").write_text(json.dumps(card))
    try:
        note = engine.set_drafter(str(damaged), "ngram")
        assert f"{damaged / 'card.json'} is damaged" in note and engine.drafter.name == "ngram"
    finally:
        engine.set_drafter("ngram")
