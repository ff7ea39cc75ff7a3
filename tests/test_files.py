"""Whole-or-nothing file writes, JSON records and the remembered file digest
(engine/atomic_files.py, engine/file_hash.py)."""

from __future__ import annotations

import hashlib
import os

import pytest

from engine import file_hash
from engine.atomic_files import read_json, write_atomically, write_json
from engine.file_hash import file_sha256


def test_write_json_replaces_the_file_and_leaves_no_temporary(tmp_path) -> None:
    path = tmp_path / "record.json"
    write_json(path, {"a": 1})
    write_json(path, {"a": 2, "b": [1, 2]}, indent=2)
    assert read_json(path) == {"a": 2, "b": [1, 2]}
    assert path.read_text(encoding="utf-8").startswith('{\n  "a": 2')
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]


def test_a_failed_write_keeps_the_old_file_and_removes_its_temporary(tmp_path) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"old")

    def half_then_fail(tmp):
        tmp.write_bytes(b"ne")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomically(path, half_then_fail, suffix=".part")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["model.gguf"]


def test_the_temporary_file_is_named_per_process(tmp_path) -> None:
    seen = []
    write_atomically(tmp_path / "x.pt", lambda tmp: (seen.append(tmp.name), tmp.write_text("")))
    assert seen == [f"x.pt.{os.getpid()}.tmp"]


@pytest.mark.parametrize("text", [None, "{not json", "[1, 2]", '"a string"'])
def test_read_json_is_none_for_missing_damaged_or_non_object_files(tmp_path, text) -> None:
    path = tmp_path / "r.json"
    if text is not None:
        path.write_text(text, encoding="utf-8")
    assert read_json(path) is None


def test_a_digest_is_remembered_across_processes_for_the_unchanged_file_only(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("HYFLASH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(file_hash, "_SHA_CACHE", {})
    path = tmp_path / "m.gguf"
    path.write_bytes(b"weights")
    assert file_sha256(path) == hashlib.sha256(b"weights").hexdigest()
    record = tmp_path / "cache" / "file-hashes.json"
    (key,) = read_json(record)
    write_json(record, {key: "f" * 64})  # what an earlier process would have found
    monkeypatch.setattr(file_hash, "_SHA_CACHE", {})  # a new process
    assert file_sha256(path) == "f" * 64  # served from the record, not read again
    path.write_bytes(b"other weights")  # new size: hashed again
    assert file_sha256(path) == hashlib.sha256(b"other weights").hexdigest()
    record.write_text("{ damaged", encoding="utf-8")
    monkeypatch.setattr(file_hash, "_SHA_CACHE", {})
    assert file_sha256(path) == hashlib.sha256(b"other weights").hexdigest()


def test_a_file_and_its_rename_reach_the_disk_before_write_atomically_returns(
    tmp_path, monkeypatch
) -> None:
    """What a power cut would test: the content is flushed before the rename, the folder
    (which holds the rename) after it."""
    synced = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.path.realpath(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    path = tmp_path / "state.json"
    write_json(path, {"stages": {}})
    assert synced[0].startswith(str(tmp_path / "state.json.")) and synced[0].endswith(".tmp")
    assert synced[-1] == str(tmp_path) and read_json(path) == {"stages": {}}
