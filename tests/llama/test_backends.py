"""Backend choice on simulated machines, ORT session fallback, and the real probe here."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import onnxruntime as ort
import pytest

from engine.commands.doctor import add_parser, doctor_report, run_doctor
from engine.llama import backends as b
from engine.llama import machine_probe
from engine.llama.backends import CPU_EP, CUDA_EP, QNN_EP
from engine.llama.machine_probe import CpuInfo, GpuInfo, LlamaInfo, OrtInfo, Probe

GB = 10**9


def machine(
    os: str,
    arch: str,
    llama_backends: tuple[str, ...] = ("CPU",),
    providers: tuple[str, ...] = (CPU_EP,),
    gpus: tuple[GpuInfo, ...] = (),
    flags: tuple[str, ...] = (),
) -> Probe:
    gpu = any(name != "CPU" and name != "BLAS" for name in llama_backends)
    return Probe(
        os=os,
        os_version="test",
        cpu=CpuInfo(model="test cpu", arch=arch, logical_cores=8, physical_cores=8, flags=flags),
        llama=LlamaInfo(available=True, version="0.3.36", gpu_offload=gpu, backends=llama_backends),
        ort=OrtInfo(available=True, version="1.32.0", providers=providers),
        gpus=gpus,
        ram_bytes=16 * GB,
    )


# Snapdragon X Elite laptop: Windows on ARM, onnxruntime-qnn, llama.cpp CPU-only build.
SNAPDRAGON = machine("Windows", "arm64", providers=(QNN_EP, CPU_EP), flags=("neon", "dotprod"))
# Apple M4: Metal llama.cpp, CoreML in onnxruntime, unified memory.
APPLE_M4 = machine(
    "Darwin",
    "arm64",
    ("Metal", "BLAS", "CPU"),
    ("CoreMLExecutionProvider", CPU_EP),
    (GpuInfo("Apple M4", "Metal", 12 * GB, 12 * GB, integrated=True),),
)
# Jetson Orin: CUDA llama.cpp, the Jetson onnxruntime-gpu wheel (TensorRT + CUDA).
JETSON = machine(
    "Linux",
    "arm64",
    ("CUDA", "CPU"),
    ("TensorrtExecutionProvider", CUDA_EP, CPU_EP),
    (GpuInfo("Orin", "CUDA", 8 * GB, 6 * GB, integrated=True),),
)
# Desktop Windows PC with an RTX card: CUDA llama.cpp, onnxruntime-gpu (+DirectML present).
DESKTOP = machine(
    "Windows",
    "x86_64",
    ("CUDA", "CPU"),
    ("DmlExecutionProvider", CUDA_EP, CPU_EP),
    (GpuInfo("NVIDIA GeForce RTX 4070", "CUDA", 12 * GB, 11 * GB),),
    ("avx2",),
)
PLAIN_X86 = machine("Linux", "x86_64", flags=("avx", "avx2"))


@pytest.mark.parametrize(
    "probe,name,target,layers,providers",
    [
        (SNAPDRAGON, "QNN", "CPU", 0, (QNN_EP, CPU_EP)),
        (APPLE_M4, "Metal", "Metal", -1, ("CoreMLExecutionProvider", CPU_EP)),
        (JETSON, "CUDA", "CUDA", -1, (CUDA_EP, CPU_EP)),
        (DESKTOP, "CUDA", "CUDA", -1, (CUDA_EP, "DmlExecutionProvider", CPU_EP)),
        (PLAIN_X86, "CPU", "CPU", 0, (CPU_EP,)),
    ],
    ids=["snapdragon-x-elite", "apple-m4", "jetson", "desktop-nvidia", "plain-x86"],
)
def test_auto_choice(probe, name, target, layers, providers) -> None:
    choice = b.choose(probe, None)
    assert (choice.name, choice.target_backend, choice.n_gpu_layers) == (name, target, layers)
    assert choice.drafter_providers == providers
    assert choice.requested == "auto" and not choice.fell_back
    assert choice.reason
    json.dumps(choice.to_dict())  # serialisable for the GUI and doctor --json


def test_snapdragon_reason_explains_cpu_target_and_npu_drafter() -> None:
    choice = b.choose(SNAPDRAGON, "auto")
    assert "CPU-only build" in choice.reason and "QNN" in choice.reason
    assert choice.drafter_backend == "QNN"


@pytest.mark.parametrize(
    "probe,forced,name,target,layers,providers",
    [
        (APPLE_M4, "cpu", "CPU", "CPU", 0, (CPU_EP,)),
        (APPLE_M4, "Metal", "Metal", "Metal", -1, ("CoreMLExecutionProvider", CPU_EP)),
        (DESKTOP, "CUDA", "CUDA", "CUDA", -1, (CUDA_EP, CPU_EP)),
        (SNAPDRAGON, "qnn", "QNN", "CPU", 0, (QNN_EP, CPU_EP)),
        (JETSON, "cpu", "CPU", "CPU", 0, (CPU_EP,)),
    ],
)
def test_forced_backend_available(probe, forced, name, target, layers, providers) -> None:
    choice = b.choose(probe, forced)
    assert (choice.name, choice.target_backend, choice.n_gpu_layers) == (name, target, layers)
    assert choice.drafter_providers == providers
    assert choice.requested == forced.lower() and not choice.fell_back


@pytest.mark.parametrize(
    "probe,forced,name,missing",
    [
        (SNAPDRAGON, "cuda", "QNN", "no CUDA backend"),
        (PLAIN_X86, "qnn", "CPU", "no QNNExecutionProvider"),
        (PLAIN_X86, "metal", "CPU", "no Metal backend"),
        (JETSON, "metal", "CUDA", "no Metal backend"),
    ],
)
def test_forced_backend_unavailable_falls_back(probe, forced, name, missing) -> None:
    choice = b.choose(probe, forced)
    assert choice.fell_back and choice.name == name
    assert choice.reason.startswith(f"{b.DISPLAY[forced]} was requested but")
    assert missing in choice.reason and "falling back" in choice.reason
    assert choice.drafter_providers[-1] == CPU_EP


def test_forced_cuda_with_only_onnxruntime_cuda_keeps_target_on_cpu() -> None:
    probe = machine("Linux", "x86_64", providers=(CUDA_EP, CPU_EP))
    choice = b.choose(probe, "cuda")
    assert (choice.target_backend, choice.n_gpu_layers) == ("CPU", 0)
    assert choice.drafter_providers == (CUDA_EP, CPU_EP) and not choice.fell_back
    assert "llama.cpp has no CUDA backend" in choice.reason


def test_model_too_big_for_gpu_stays_on_cpu() -> None:
    choice = b.choose(DESKTOP, None, model_bytes=20 * GB)
    assert (choice.target_backend, choice.n_gpu_layers) == ("CPU", 0)
    assert "does not fit" in choice.reason
    assert b.choose(DESKTOP, None, model_bytes=2 * GB).n_gpu_layers == -1


def test_gpu_backend_needs_a_device() -> None:
    # CUDA and Vulkan compiled in, only a Vulkan device present (say, a Radeon card).
    radeon = machine(
        "Linux", "x86_64", ("CUDA", "Vulkan", "CPU"), gpus=(GpuInfo("Radeon", "Vulkan", 16 * GB),)
    )
    assert (b.choose(radeon).name, b.choose(radeon).n_gpu_layers) == ("Vulkan", -1)
    forced = b.choose(radeon, "cuda")
    assert forced.fell_back and forced.target_backend == "Vulkan"
    # A CUDA build on a machine without a GPU: llama_supports_gpu_offload() is false.
    no_gpu = machine("Linux", "x86_64", ("CUDA", "CPU"))
    no_gpu = replace(no_gpu, llama=replace(no_gpu.llama, gpu_offload=False))
    assert (b.choose(no_gpu).target_backend, b.choose(no_gpu).n_gpu_layers) == ("CPU", 0)


def test_unknown_backend_name_is_rejected() -> None:
    with pytest.raises(ValueError, match="Unknown backend 'tpu'"):
        b.choose(PLAIN_X86, "tpu")


def test_cpuinfo_parsing_x86_and_arm() -> None:
    x86 = (
        "processor: 0\nphysical id: 0\ncore id: 0\nmodel name: Some CPU\nflags: fpu avx avx2\n\n"
        "processor: 1\nphysical id: 0\ncore id: 0\nmodel name: Some CPU\nflags: fpu avx avx2\n\n"
        "processor: 2\nphysical id: 0\ncore id: 1\nmodel name: Some CPU\nflags: fpu avx avx2\n"
    )
    assert machine_probe._parse_cpuinfo(x86) == ("Some CPU", 2, {"fpu", "avx", "avx2"})
    arm = "processor: 0\nFeatures: fp asimd asimddp sve\n\nprocessor: 1\nFeatures: fp asimd\n"
    model, cores, flags = machine_probe._parse_cpuinfo(arm)
    assert cores is None and {"neon", "dotprod", "sve"} <= flags


# ---------------------------------------------------------------------------------------------
# create_session


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _field(number: int, value: bytes | str | int) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def tiny_model() -> bytes:
    """ONNX ModelProto for y = x + x (float[2]), encoded by hand so the test needs no `onnx`.
    Field numbers from onnx.proto: Model(ir_version=1, graph=7, opset_import=8),
    Graph(node=1, name=2, input=11, output=12), Node(input=1, output=2, op_type=4),
    ValueInfo(name=1, type=2), Type(tensor_type=1), Tensor(elem_type=1, shape=2),
    Shape(dim=1), Dim(dim_value=1)."""
    tensor = _field(1, _field(1, 1) + _field(2, _field(1, _field(1, 2))))  # float, [2]
    node = _field(1, "x") + _field(1, "x") + _field(2, "y") + _field(4, "Add")
    graph = (
        _field(1, node)
        + _field(2, "g")
        + _field(11, _field(1, "x") + _field(2, tensor))
        + _field(12, _field(1, "y") + _field(2, tensor))
    )
    return _field(1, 8) + _field(7, graph) + _field(8, _field(1, "") + _field(2, 13))


def _run(session) -> list[float]:
    return session.run(None, {"x": np.array([1.5, -2.0], dtype=np.float32)})[0].tolist()


@pytest.mark.filterwarnings("ignore:Specified provider")  # ORT's own note about the same thing
def test_create_session_skips_a_provider_this_build_lacks(tmp_path) -> None:
    path = tmp_path / "tiny.onnx"
    path.write_bytes(tiny_model())
    seen = []
    result = b.create_session(path, [CUDA_EP, CPU_EP], on_fallback=seen.append)
    assert result.provider == CPU_EP
    assert [(a.provider, a.ok) for a in result.attempts] == [(CUDA_EP, False), (CPU_EP, True)]
    assert seen == [result.attempts[0]] and "not available" in result.fallback_log[0]
    assert _run(result.session) == [3.0, -4.0]
    assert result.to_dict()["provider"] == CPU_EP


def test_create_session_falls_back_when_a_provider_raises(monkeypatch) -> None:
    real = ort.InferenceSession
    calls = []

    def fake(model, sess_options=None, providers=None, provider_options=None):
        calls.append((providers, provider_options))
        if providers[0] == QNN_EP:  # what a missing QnnHtp.dll looks like
            raise RuntimeError("QNN backend library QnnHtp.dll could not be loaded")
        return real(
            model, sess_options=sess_options, providers=providers, provider_options=provider_options
        )

    monkeypatch.setattr(ort, "InferenceSession", fake)
    result = b.create_session(tiny_model(), (QNN_EP,))  # CPU is appended automatically
    assert result.provider == CPU_EP
    assert calls[0] == ([QNN_EP, CPU_EP], [{"backend_type": "htp"}, {}])
    assert "QnnHtp.dll" in result.fallback_log[0]
    assert isinstance(result.session, real) and _run(result.session) == [3.0, -4.0]


def test_create_session_reports_when_nothing_works(monkeypatch) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("bad model")

    monkeypatch.setattr(ort, "InferenceSession", broken)
    with pytest.raises(RuntimeError, match="any provider.*CPUExecutionProvider: RuntimeError"):
        b.create_session(b"not a model", [CPU_EP])


# ---------------------------------------------------------------------------------------------
# The real machine (x86_64 Linux, no GPU, CPU-only llama.cpp) and doctor


def test_real_probe_on_this_machine_picks_cpu() -> None:
    p = b.probe()
    assert b.probe() is p  # probed once
    assert p.os == "Linux" and p.cpu.arch == "x86_64" and p.cpu.logical_cores >= 1
    assert p.llama.available and "CPU" in p.llama.backends and not p.llama.gpu_offload
    assert p.ort.available and CPU_EP in p.ort.providers
    choice = b.choose(p, None)
    assert (choice.name, choice.n_gpu_layers, choice.drafter_providers) == ("CPU", 0, (CPU_EP,))
    forced = b.choose(p, "cuda")
    assert forced.fell_back and forced.name == "CPU"
    json.dumps(p.to_dict())


def test_doctor_text_json_and_cli(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HYFLASH_CACHE_DIR", str(tmp_path))
    text = doctor_report(as_json=False)
    assert "Backend" in text and "CPU (auto)" in text and "Why" in text
    assert f"{tmp_path / 'models'} (0 downloaded" in text
    data = json.loads(doctor_report(as_json=True, backend="qnn"))
    assert data["choice"]["fell_back"] and data["probe"]["cpu"]["arch"] == "x86_64"
    assert data["model_cache"] == {"dir": str(tmp_path / "models"), "installed": []}
    # the kernel check for the default model: what it found and the verify mode it implies
    assert "Kernels" in text and "using extra buffer types" in text and "Verify" in text
    kernels = data["kernels"]
    assert kernels["model"] == "smollm2-135m-instruct" and kernels["verify_mode"] == "exact"
    assert any(r["outcome"] == "works" for r in kernels["verdict"]["results"])
    assert data["provenance"]["target"]["id"] == "smollm2-135m-instruct"
    assert data["provenance"]["cpu"]["flags"] == list(b.probe().cpu.flags)

    import argparse

    parser = argparse.ArgumentParser(prog="hyflash")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["doctor", "--json", "--backend", "CUDA"])
    assert args.func(args) == 0 and run_doctor is args.func
    out = json.loads(capsys.readouterr().out)
    assert out["choice"]["requested"] == "cuda"


class _FakeDevice:
    def __init__(self, ep_name: str) -> None:
        self.ep_name = ep_name


def test_plugin_qnn_package_is_registered_and_listed(monkeypatch) -> None:
    """onnxruntime-qnn 2.x (Windows ARM64) is a plugin EP: simulated here, since no Snapdragon
    NPU is reachable; the probe must register its library and list QNN when it has a device."""
    import sys
    import types

    registered = []
    plugin = types.SimpleNamespace(
        get_ep_name=lambda: QNN_EP, get_library_path=lambda: "C:/qnn/onnxruntime_providers_qnn.dll"
    )
    monkeypatch.setitem(sys.modules, "onnxruntime_qnn", plugin)
    monkeypatch.setattr(
        ort,
        "register_execution_provider_library",
        lambda name, path: registered.append((name, path)),
    )
    monkeypatch.setattr(ort, "get_ep_devices", lambda: [_FakeDevice(CPU_EP), _FakeDevice(QNN_EP)])
    info = machine_probe._ort_info()
    assert registered == [(QNN_EP, "C:/qnn/onnxruntime_providers_qnn.dll")]
    assert info.plugins == (QNN_EP,) and QNN_EP in info.providers


def test_broken_plugin_package_does_not_break_the_probe(monkeypatch) -> None:
    import sys
    import types

    def fail(name, path):
        raise RuntimeError("LoadLibrary failed")

    plugin = types.SimpleNamespace(get_ep_name=lambda: QNN_EP, get_library_path=lambda: "x.dll")
    monkeypatch.setitem(sys.modules, "onnxruntime_qnn", plugin)
    monkeypatch.setattr(ort, "register_execution_provider_library", fail)
    info = machine_probe._ort_info()
    assert info.available and QNN_EP not in info.providers and info.plugins == ()


def test_plugin_provider_session_falls_back_to_cpu(tmp_path, monkeypatch) -> None:
    """A registered plugin EP is selected by device; when that fails, CPU takes over."""
    path = tmp_path / "tiny.onnx"
    path.write_bytes(tiny_model())
    monkeypatch.setattr(ort, "get_ep_devices", lambda: [_FakeDevice(QNN_EP)])
    result = b.create_session(path, [QNN_EP])  # the fake device makes the real ORT refuse
    assert result.provider == CPU_EP and not result.attempts[0].ok
    assert _run(result.session) == [3.0, -4.0]


def test_hyflash_drafter_opens_its_sessions_with_the_backend_choice(engine, monkeypatch) -> None:
    """The run-time drafter goes through create_session with the provider list the backend
    choice made: here a simulated QNN plugin device that fails, so CPU takes over, verified."""
    from engine.drafters import hyflash as runtime
    from engine.drafters.make import make_drafter

    seen = []
    real = runtime.create_session

    def spy(path, providers, **kwargs):
        seen.append(list(providers))
        return real(path, providers, **kwargs)

    monkeypatch.setattr(runtime, "create_session", spy)
    monkeypatch.setattr(ort, "get_ep_devices", lambda: [_FakeDevice(QNN_EP)])
    choice = b.BackendChoice("QNN", "qnn", "CPU", 0, (QNN_EP, CPU_EP), "simulated Snapdragon")
    drafter = make_drafter("hyflash", engine.model_id, engine.target, choice)
    assert seen == [[QNN_EP, CPU_EP], [QNN_EP, CPU_EP]]  # propose and observe
    assert drafter.provider == CPU_EP
    assert any(line.startswith(QNN_EP) for line in drafter.provider_fallbacks)
    draft = drafter.propose(engine.target.bos_token, 3)
    assert len(draft.tokens) == 3
