"""The provenance block every raw result file carries (engine/bench/provenance.py): its keys on this
machine with the real default model and shipped drafter, CPU flags from sample /proc/cpuinfo
texts of the machines the results came from, git's dirty flag in a real repository, and the
kernel check's child writing it."""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from engine.bench.provenance import cpu_block, git_state, provenance, run_machine
from engine.llama.machine_probe import _cpu_info
from engine.paths import REPO

KEYS = {
    "date_utc",
    "command",
    "cwd",
    "cpu",
    "ram_bytes",
    "gpus",
    "os",
    "python",
    "llama_cpp",
    "onnxruntime_providers",
    "libraries",
    "git",
    "target",
    "drafters",
}

# one logical CPU of each machine RESULTS reports (trimmed to the lines the parser reads)
EPYC_AVX2 = (
    "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\nphysical id\t: 0\n"
    "core id\t\t: 0\nflags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 bmi2\n\n"
    "processor\t: 1\nmodel name\t: AMD EPYC\nphysical id\t: 0\ncore id\t\t: 1\n"
    "flags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 bmi2\n"
)
XEON_AMX = (
    "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\nphysical id\t: 0\n"
    "core id\t\t: 0\nflags\t\t: fpu avx avx2 fma f16c avx512f avx512bw avx512_vnni "
    "avx512_bf16 amx_bf16 amx_tile amx_int8 avx_vnni\n"
)
ARM = (
    "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes crc32 asimddp i8mm "
    "bf16\nCPU implementer\t: 0x41\n\nprocessor\t: 1\nFeatures\t: fp asimd asimddp i8mm bf16\n"
)


@pytest.mark.parametrize(
    ("text", "model", "has", "lacks"),
    [
        (EPYC_AVX2, "AMD EPYC", {"avx2", "fma"}, {"avx512f", "amx_tile", "neon"}),
        (
            XEON_AMX,
            "Intel(R) Xeon(R) Processor",
            {"avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"},
            {"neon"},
        ),
        (ARM, None, {"neon", "asimd", "dotprod", "i8mm", "bf16"}, {"avx2", "sme"}),
    ],
    ids=["avx2-only", "avx512-amx", "arm-neon"],
)
def test_cpu_flags_from_cpuinfo(text, model, has, lacks):
    cpu = cpu_block(_cpu_info(text))
    assert has <= set(cpu["flags"]) and not lacks & set(cpu["flags"])
    assert "fpu" not in cpu["flags"] and "bmi2" not in cpu["flags"]  # only flags that matter
    if model is not None:
        assert cpu["model"] == model
    assert cpu["logical_cores"] >= 1


def test_the_block_on_this_machine_has_every_key(tmp_path, monkeypatch):
    monkeypatch.setenv("HYFLASH_CACHE_DIR", str(tmp_path))  # the sha256 index starts empty
    argv = ["hyflash", "bench", "--prompt", "two words", "--out", "docs/bench/x"]
    block = provenance(
        argv,
        target="smollm2-135m-instruct",
        drafter=["ngram", "hyflash", "hybrid:hyflash@int8"],
        extra={"threads": 2},
    )
    assert KEYS <= set(block) and block["threads"] == 2
    assert block["command"] == "hyflash bench --prompt 'two words' --out docs/bench/x"
    assert block["date_utc"].endswith("+00:00")
    assert block["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert block["os"]["system"] == "Linux" and "physical_cores" in block["cpu"]
    assert block["llama_cpp"]["system_info"].startswith("CPU :")  # llama.cpp's build line
    libs = block["libraries"]
    assert libs["llama_cpp"]["version"] and libs["llama_cpp"]["loaded"]
    assert libs["numpy"]["version"] and "torch" in libs and "transformers" in libs
    assert libs["torch"]["loaded"] == ("torch" in sys.modules)  # looked up, not imported
    target = block["target"]
    path = Path(target["path"])
    assert target["id"] == "smollm2-135m-instruct" and target["file"] == path.name
    assert target["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    ngram, shipped, hybrid = block["drafters"]
    assert ngram == {"spec": "ngram", "name": "ngram", "folder": None, "card_sha256": None}
    card = Path(shipped["folder"]) / "card.json"
    assert shipped["name"] == "hyflash-smollm2-135m"
    assert shipped["card_sha256"] == hashlib.sha256(card.read_bytes()).hexdigest()
    assert hybrid["card_sha256"] == shipped["card_sha256"]
    assert block["git"] is None or len(block["git"]["commit"]) == 40
    json.dumps(block)  # it goes into JSON files


def test_a_path_target_is_named_by_its_catalog_id_and_the_command_defaults_to_sys_argv(
    tmp_path, monkeypatch
):
    from engine.models.resolve import resolve_target

    monkeypatch.setenv("HYFLASH_CACHE_DIR", str(tmp_path))
    _, path = resolve_target("smollm2-135m-instruct")
    block = provenance(target=path, drafter="hyflash")
    assert block["target"]["id"] == "smollm2-135m-instruct"
    assert block["drafters"][0]["name"] == "hyflash-smollm2-135m"  # found from the file too
    assert block["command"] == shlex.join(sys.argv)
    # a missing file and a folder with no card are recorded as such, not raised
    missing = provenance(target=tmp_path / "gone.gguf", drafter=tmp_path)
    assert "not found" in missing["target"]["error"] and "sha256" not in missing["target"]
    assert missing["drafters"][0]["card_sha256"] is None


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
    )


def test_git_commit_and_dirty_flag_in_a_real_repository(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    assert git_state(repo) is None  # not a checkout
    _git(repo, "init", "-q")
    (repo / "a.txt").write_text("one\n")
    _git(repo, "add", "a.txt")
    _git(repo, "commit", "-q", "-m", "first")
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    assert git_state(repo) == {"commit": head, "dirty": False}
    (repo / "new-results.json").write_text("{}")  # untracked output: still clean
    assert git_state(repo) == {"commit": head, "dirty": False}
    (repo / "a.txt").write_text("two\n")
    assert git_state(repo) == {"commit": head, "dirty": True}


def test_run_machine_reads_the_block_and_the_older_machine_fields():
    old = {"machine": {"cpu": "AMD EPYC", "threads": 2, "python": "3.11.7", "git": "3f2f22d"}}
    assert run_machine(old) == {"cpu": "AMD EPYC", "threads": 2, "git": "3f2f22d"}
    new = {
        "provenance": {
            "cpu": {"model": "Intel(R) Xeon(R) Processor"},
            "threads": 4,
            "git": {"commit": "ab" * 20, "dirty": True},
        }
    }
    assert run_machine(new) == {
        "cpu": "Intel(R) Xeon(R) Processor",
        "threads": 4,
        "git": "abababa+dirty",
    }


def test_the_kernel_check_child_writes_the_block(tmp_path, monkeypatch):
    from engine.models.resolve import resolve_target

    monkeypatch.setenv("HYFLASH_CACHE_DIR", str(tmp_path))
    _, path = resolve_target("smollm2-135m-instruct")
    out = tmp_path / "check.jsonl"
    args = [str(path), "--out", str(out), "--extra-bufts", "off", "--threads", "1"]
    subprocess.run(
        [sys.executable, "-m", "engine.bench.kernel_probe", *args, "--max-rows", "2"],
        check=True,
        timeout=300,
        cwd=REPO,
    )
    done = [json.loads(line) for line in out.read_text().splitlines()][-1]
    assert done["step"] == "done" and KEYS <= set(done["provenance"])
    assert done["provenance"]["target"]["file"] == path.name
    assert done["provenance"]["threads"] == 1 and done["provenance"]["extra_bufts"] == "off"
    assert "kernel_probe" in done["provenance"]["command"]
    assert done["provenance"]["command"].endswith("--max-rows 2")
