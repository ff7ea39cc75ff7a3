"""GGUF files found where other applications keep them: temporary folders laid out as LM
Studio's, Ollama's, the Hugging Face hub cache's and llama.cpp's, holding the real SmolLM2
file (linked, not copied, where the layout allows) and damaged copies of it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import gguf
import numpy as np
import pytest

from engine.models import discovery
from engine.models.discovery import Roots, default_roots, kernel_verdict, scan
from engine.models.local_model import quantization_name

NAME = "Smollm2 135M 8k Lc100K Mix1 Ep2"  # the file's general.name


@pytest.fixture(scope="module")
def smollm2() -> Path:
    from engine.models.resolve import resolve_target

    return resolve_target("smollm2-135m-instruct")[1]


def _link(src: Path, dest: Path) -> Path:
    """A hard link where the file system allows one, else a copy (a blob is a real file)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)
    return dest


def _symlink(src: Path, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.symlink_to(src)
    return dest


def _cut(src: Path, dest: Path, size: int) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with src.open("rb") as f:
        dest.write_bytes(f.read(size))
    return dest


def _tiny_gguf(path: Path, arch: str, name: str, kind: str = "model") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_type(kind)
    w.add_name(name)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_context_length(512)
    w.add_tensor("x", np.zeros((4, 4), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _assert_smollm2(row, path: Path, source: str, name: str = NAME) -> None:
    assert row.path == str(path) and row.source == source and row.name == name
    assert (row.architecture, row.quantization, row.context_length) == ("llama", "Q4_1", 8192)
    assert row.size_bytes == path.stat().st_size == 98362432 and row.error is None


def _by_path(rows) -> dict:
    return {Path(r.path).name: r for r in rows}


def test_lm_studio_models_and_a_truncated_copy(tmp_path, smollm2):
    models = tmp_path / ".lmstudio" / "models"
    good = _symlink(smollm2, models / "HuggingFaceTB" / "SmolLM2-135M-GGUF" / "smollm2.gguf")
    header_cut = _cut(smollm2, models / "someone" / "cut-GGUF" / "cut.gguf", 100_000)
    data_cut = _cut(smollm2, models / "someone" / "cut-GGUF" / "half.gguf", 5_000_000)
    # a vision projector beside a model is no model to chat with
    _tiny_gguf(models / "someone" / "cut-GGUF" / "mmproj-model-f16.gguf", "clip", "proj", "mmproj")
    rows = scan(default_roots(tmp_path, {}, "Darwin"))
    assert [Path(r.path).name for r in rows] == ["smollm2.gguf", "cut.gguf", "half.gguf"]
    _assert_smollm2(rows[0], good, "LM Studio")
    by = _by_path(rows)
    assert "cut.gguf is a damaged model file: its GGUF header is cut short" in by["cut.gguf"].error
    assert by["cut.gguf"].size_bytes == header_cut.stat().st_size == 100_000
    assert (
        "half.gguf is a damaged model file: it is cut short (5.0 MB of at least 98.4 MB)"
        in by["half.gguf"].error
    )
    assert by["half.gguf"].size_bytes == data_cut.stat().st_size
    assert not by["half.gguf"].usable and rows[0].usable


def test_the_older_lm_studio_folder(tmp_path, smollm2):
    good = _symlink(smollm2, tmp_path / ".cache/lm-studio/models/pub/repo/model.gguf")
    (row,) = scan(default_roots(tmp_path, {}, "Darwin"))
    _assert_smollm2(row, good, "LM Studio")


def _ollama_manifest(root: Path, repo: str, tag: str, digest: str) -> Path:
    manifest = root / "manifests" / repo / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    layers = [
        {"mediaType": "application/vnd.ollama.image.model", "digest": digest, "size": 98362432},
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "1" * 64},
    ]
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers}), encoding="utf-8")
    return manifest


def test_ollama_manifests_name_their_blobs(tmp_path, smollm2):
    root = tmp_path / "ollama-models"
    hexdigest = "ab" * 32
    blob = _link(smollm2, root / "blobs" / f"sha256-{hexdigest}")
    _ollama_manifest(root, "registry.ollama.ai/library/smollm2", "135m", f"sha256:{hexdigest}")
    _ollama_manifest(root, "registry.ollama.ai/someone/gone", "latest", "sha256:" + "cd" * 32)
    broken = root / "manifests" / "hf.co" / "org" / "repo" / "Q4"
    broken.parent.mkdir(parents=True)
    broken.write_text("{not json", encoding="utf-8")
    rows = scan(default_roots(tmp_path, {"OLLAMA_MODELS": str(root)}, "Linux"))
    by_name = {r.name: r for r in rows}
    assert list(by_name) == ["hf.co/org/repo:Q4", "smollm2:135m", "someone/gone:latest"]
    _assert_smollm2(by_name["smollm2:135m"], blob, "Ollama", "smollm2:135m")
    assert "manifest of hf.co/org/repo:Q4 cannot be read" in by_name["hf.co/org/repo:Q4"].error
    assert "is not there any more" in by_name["someone/gone:latest"].error


def test_hugging_face_snapshots_link_into_blobs(tmp_path, smollm2):
    hub = tmp_path / "hf-home" / "hub"
    repo = hub / "models--HuggingFaceTB--SmolLM2-135M-Instruct-GGUF"
    blob = _link(smollm2, repo / "blobs" / ("e" * 64))
    # two revisions of the repository hold the same file: one model
    first = _symlink(Path("../../blobs") / blob.name, repo / "snapshots" / "rev1" / "smol.gguf")
    _symlink(Path("../../../blobs") / blob.name, repo / "snapshots" / "rev2" / "q4" / "smol.gguf")
    _symlink(Path("../../blobs") / ("f" * 64), repo / "snapshots" / "rev1" / "partial.gguf")
    rows = scan(default_roots(tmp_path, {"HF_HOME": str(tmp_path / "hf-home")}, "Linux"))
    assert [Path(r.path).name for r in rows] == ["partial.gguf", "smol.gguf"]
    _assert_smollm2(rows[1], first, "Hugging Face")
    assert "is not there any more" in rows[0].error  # a link whose blob never arrived


def test_llama_cpp_cache(tmp_path, smollm2):
    cache = tmp_path / "llama-cache"
    good = _symlink(smollm2, cache / "HuggingFaceTB_SmolLM2-135M-Instruct-GGUF_smol.gguf")
    (cache / "manifest=HuggingFaceTB_SmolLM2.json").write_text("{}", encoding="utf-8")
    (row,) = scan(default_roots(tmp_path, {"LLAMA_CACHE": str(cache)}, "Linux"))
    _assert_smollm2(row, good, "llama.cpp")


def test_folders_files_and_what_is_no_model(tmp_path, smollm2):
    folder = tmp_path / "my models"
    deepest = folder.joinpath(*["d"] * discovery.MAX_DEPTH)
    nested = _symlink(smollm2, deepest / "deep.gguf")
    _symlink(smollm2, deepest / "d" / "too-deep.gguf")
    _symlink(smollm2, folder / ".hidden" / "skipped.gguf")
    text = folder / "notes.gguf"
    text.write_text("these are not weights", encoding="utf-8")
    (folder / "empty.gguf").write_bytes(b"")
    added = _tiny_gguf(tmp_path / "elsewhere" / "tiny.gguf", "llama", "Tiny")
    rows = scan(Roots(), folders=[folder], files=[added, tmp_path / "moved.gguf"])
    by = _by_path(rows)
    assert list(by) == ["empty.gguf", "notes.gguf", "deep.gguf", "tiny.gguf", "moved.gguf"]
    _assert_smollm2(by["deep.gguf"], nested, "folder")
    assert by["notes.gguf"].error.startswith("Not a GGUF model file (bad header)")
    assert by["empty.gguf"].error.startswith("Not a GGUF model file (bad header)")
    tiny = by["tiny.gguf"]
    assert (tiny.source, tiny.name, tiny.architecture, tiny.quantization) == (
        "added",
        "Tiny",
        "llama",
        "Q8_0",
    )
    assert tiny.context_length == 512 and tiny.usable
    assert by["moved.gguf"].error == "moved.gguf is not there any more (moved or deleted?)"


def test_a_file_found_twice_is_listed_once_and_a_changed_file_is_read_again(tmp_path, smollm2):
    models = tmp_path / ".lmstudio" / "models"
    linked = _symlink(smollm2, models / "pub" / "repo" / "smol.gguf")
    cut = _cut(smollm2, models / "pub" / "repo" / "later.gguf", 100_000)
    roots = default_roots(tmp_path, {}, "Darwin")
    rows = scan(roots, folders=[models], files=[linked])
    assert [(Path(r.path).name, r.source) for r in rows] == [
        ("later.gguf", "LM Studio"),
        ("smol.gguf", "LM Studio"),
    ]
    assert rows[0].error is not None
    shutil.copyfile(_tiny_gguf(tmp_path / "t.gguf", "qwen2", "Whole again"), cut)  # re-downloaded
    again = scan(roots)[0]
    assert again.error is None and again.name == "Whole again"


def test_split_models_are_listed_by_their_first_part(tmp_path):
    folder = tmp_path / "split"
    parts = [_tiny_gguf(folder / f"big-0000{i}-of-00003.gguf", "llama", "Big") for i in (1, 2, 3)]
    (row,) = scan(Roots(), folders=[folder])
    assert row.path == str(parts[0]) and row.name == "Big"
    assert row.size_bytes == sum(p.stat().st_size for p in parts)


def test_default_roots_per_system_and_environment(tmp_path):
    home = tmp_path
    linux = default_roots(home, {}, "Linux")
    assert linux.lm_studio == (home / ".lmstudio/models", home / ".cache/lm-studio/models")
    assert linux.ollama == (home / ".ollama/models", Path("/usr/share/ollama/.ollama/models"))
    assert linux.hugging_face == (home / ".cache/huggingface/hub",)
    assert linux.llama_cpp == (home / ".cache/llama.cpp",)
    assert default_roots(home, {}, "Darwin").llama_cpp == (home / "Library/Caches/llama.cpp",)
    windows = default_roots(home, {"LOCALAPPDATA": str(tmp_path / "Local")}, "Windows")
    assert windows.llama_cpp == (tmp_path / "Local" / "llama.cpp",)
    assert windows.ollama == (home / ".ollama/models",)
    env = {
        "OLLAMA_MODELS": "/o",
        "HF_HOME": "/h",
        "HF_HUB_CACHE": "/hub",
        "LLAMA_CACHE": "/l",
    }
    named = default_roots(home, env, "Linux")
    assert (named.ollama, named.hugging_face, named.llama_cpp) == (
        (Path("/o"),),
        (Path("/hub"),),
        (Path("/l"),),
    )
    assert default_roots(home, {"HF_HOME": "/h"}, "Linux").hugging_face == (Path("/h/hub"),)


def test_quantization_names_follow_llama_cpp_file_types():
    names = {t: quantization_name(t) for t in (0, 1, 2, 3, 7, 15, 18, 32, 1024 | 15, 999)}
    assert names == {
        0: "F32",
        1: "F16",
        2: "Q4_0",
        3: "Q4_1",
        7: "Q8_0",
        15: "Q4_K_M",
        18: "Q6_K",
        32: "BF16",
        1024 | 15: "Q4_K_M",
        999: "type 999",
    }
    assert quantization_name(None) == ""


def test_a_kernel_verdict_is_read_from_the_cache_never_made(tmp_path, monkeypatch, smollm2):
    from engine.file_hash import file_sha256, known_sha256
    from engine.llama.backends import choose, probe
    from engine.llama.kernels import KernelConfig, KernelVerdict, verdict_key, verdicts_dir

    monkeypatch.setenv("HYFLASH_CACHE_DIR", str(tmp_path / "cache"))
    layers = choose(probe(), "auto", model_bytes=smollm2.stat().st_size).n_gpu_layers
    key = verdict_key(smollm2, n_threads=1, n_gpu_layers=layers)  # hashes the file once
    verdicts_dir().mkdir(parents=True)
    checked = KernelVerdict(KernelConfig(True), 16)
    (verdicts_dir() / f"{key}.json").write_text(json.dumps(checked.to_dict()), encoding="utf-8")
    assert kernel_verdict(smollm2, n_threads=1).exact_upto == 16
    assert kernel_verdict(smollm2, n_threads=3) is None  # checked with one thread only
    # a file whose digest this machine does not know was never checked: not hashed to find out
    other = _cut(smollm2, tmp_path / "other.gguf", 5_000_000)
    assert kernel_verdict(other, n_threads=1) is None and known_sha256(other) is None
    file_sha256(other)
    assert known_sha256(other) is not None and kernel_verdict(other, n_threads=1) is None
