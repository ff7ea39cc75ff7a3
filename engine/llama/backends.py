"""Per-machine backend choice: what this computer can run, and where target and drafter go.

`probe()` looks once (cached; machine_probe.py does the looking) at the OS, CPU, llama.cpp's
compiled backends and onnxruntime's execution providers. `choose()` is a pure function of a
probe (so tests can feed it simulated Snapdragon / Apple / NVIDIA machines) that returns where
the llama.cpp target runs (n_gpu_layers) and the drafter's ORT provider list in fallback order.
`create_session()` walks that list and falls back when a provider cannot create a session.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from engine.llama.machine_probe import OrtInfo, Probe, run_probe
from engine.units import format_size

log = logging.getLogger(__name__)

# Names the user may pick (settings, `--backend`); shown names are the capitalised forms.
BACKEND_NAMES = ("auto", "cpu", "cuda", "metal", "qnn", "vulkan")
DISPLAY = {"cpu": "CPU", "cuda": "CUDA", "metal": "Metal", "qnn": "QNN", "vulkan": "Vulkan"}

CPU_EP = "CPUExecutionProvider"
CUDA_EP = "CUDAExecutionProvider"
QNN_EP = "QNNExecutionProvider"
COREML_EP = "CoreMLExecutionProvider"
DML_EP = "DmlExecutionProvider"

# Default per-provider options for create_session. QNN: the HTP (NPU) backend, not QNN's CPU one.
DEFAULT_PROVIDER_OPTIONS: dict[str, dict[str, str]] = {
    QNN_EP: {"backend_type": "htp"},
    COREML_EP: {"MLComputeUnits": "ALL"},
}

# llama.cpp GPU backends by preference (ggml registry names, after machine_probe._REG_NAMES).
_GPU_BACKENDS = ("CUDA", "Metal", "ROCm", "MUSA", "Vulkan", "SYCL", "OpenCL")


@dataclass(frozen=True)
class BackendChoice:
    name: str  # shown to users: the accelerator doing the work ("CPU", "CUDA", "Metal", "QNN", ...)
    requested: str  # "auto" or the forced backend (lower case)
    target_backend: str  # where llama.cpp runs the target: "CPU", "CUDA", "Metal", "Vulkan"
    n_gpu_layers: int  # 0 = CPU only, -1 = every layer offloaded
    drafter_providers: tuple[str, ...]  # ORT providers in fallback order, ends with CPU
    reason: str
    fell_back: bool = False  # a forced backend was unavailable

    @property
    def drafter_backend(self) -> str:
        return provider_display(self.drafter_providers[0])

    def to_dict(self) -> dict:
        d = asdict(self)
        d["drafter_backend"] = self.drafter_backend
        return d


def provider_display(provider: str) -> str:
    short = provider.removesuffix("ExecutionProvider")
    return {"Dml": "DirectML", "CPU": "CPU"}.get(short, short)


@functools.cache
def probe() -> Probe:
    return run_probe()


# ---------------------------------------------------------------------------------------------
# The choice (pure)


def _usable_gpu_backends(p: Probe) -> list[str]:
    """llama.cpp GPU backends that have a device, in preference order. A CUDA build on a
    machine without an NVIDIA GPU still registers "CUDA", so devices decide when known."""
    llama = p.llama
    if not (llama.available and llama.gpu_offload):
        return []
    compiled = [n for n in _GPU_BACKENDS if llama.has_backend(n)]
    with_device = {g.backend.lower() for g in p.gpus}
    if not with_device & {n.lower() for n in _GPU_BACKENDS}:
        return compiled  # devices unknown (registry unreadable): trust the build
    return [n for n in compiled if n.lower() in with_device]


def _gpu_backend(p: Probe) -> str | None:
    usable = _usable_gpu_backends(p)
    return usable[0] if usable else None


def _gpu_memory(p: Probe, backend: str) -> int | None:
    for gpu in p.gpus:
        if gpu.backend.lower() == backend.lower() and gpu.memory_total_bytes:
            return gpu.memory_total_bytes
    return None


def _drafter_providers(ort: OrtInfo, preferred: Sequence[str]) -> tuple[str, ...]:
    """The preferred providers ORT actually has, in order, always ending with CPU."""
    have = set(ort.providers)
    chosen = [p for p in preferred if p in have and p != CPU_EP]
    return (*dict.fromkeys(chosen), CPU_EP)


def _auto_drafter_order(p: Probe, target: str) -> list[str]:
    # Same device as the target first (no copies between devices), then the NPU, then the
    # OS's native accelerator API.
    order = []
    if target == "CUDA":
        order.append(CUDA_EP)
    order += [QNN_EP]
    if p.os == "Darwin":
        order.append(COREML_EP)
    if p.os == "Windows":
        order.append(DML_EP)
    order.append(CUDA_EP)
    return order


def _auto(p: Probe, model_bytes: int | None) -> tuple[str, int, str]:
    """(target backend, n_gpu_layers, reason) for automatic selection."""
    gpu = _gpu_backend(p)
    if gpu is None:
        if not p.llama.available:
            return "CPU", 0, "llama.cpp could not be loaded; CPU is the only option"
        if p.llama.gpu_offload:
            return "CPU", 0, "llama.cpp reports GPU offload but no GPU device was found"
        return "CPU", 0, "this llama.cpp build has no GPU backend (CPU-only build)"
    mem = _gpu_memory(p, gpu)
    if model_bytes and mem and model_bytes * 1.2 > mem:
        return (
            "CPU",
            0,
            f"the model ({format_size(model_bytes)}) does not fit the {gpu} device's "
            f"{format_size(mem)}",
        )
    return gpu, -1, f"llama.cpp was built with {gpu} and a {gpu} device is present"


def choose(
    probe: Probe, forced: str | None = None, *, model_bytes: int | None = None
) -> BackendChoice:
    """Where target and drafter run on `probe`'s machine. `forced` is one of BACKEND_NAMES
    (None or "auto" = pick); an unavailable forced backend falls back to the automatic choice
    with the reason saying so. `model_bytes` lets auto keep a model off a too-small GPU."""
    want = (forced or "auto").strip().lower()
    if want not in BACKEND_NAMES:
        raise ValueError(f"Unknown backend '{forced}'. Choose one of: {', '.join(BACKEND_NAMES)}")

    auto_target, auto_layers, auto_reason = _auto(probe, model_bytes)
    if want == "cpu":
        return BackendChoice("CPU", want, "CPU", 0, (CPU_EP,), "CPU was chosen in settings")

    if want != "auto":
        forced_choice = _forced(probe, want)
        if forced_choice is not None:
            return forced_choice
        why_not = _unavailable_reason(probe, want)
        auto_reason = f"{DISPLAY[want]} was requested but {why_not}; falling back: {auto_reason}"

    providers = _drafter_providers(probe.ort, _auto_drafter_order(probe, auto_target))
    drafter = provider_display(providers[0])
    if drafter != "CPU":
        auto_reason += f"; the drafter runs on {drafter} (CPU as fallback)"
    elif not probe.ort.available:
        auto_reason += "; onnxruntime is missing, so the learned drafter is unavailable"
    name = auto_target if auto_target != "CPU" else drafter
    return BackendChoice(
        name=name,
        requested=want,
        target_backend=auto_target,
        n_gpu_layers=auto_layers,
        drafter_providers=providers,
        reason=auto_reason,
        fell_back=want != "auto",
    )


# Which ORT provider pairs with each forced backend.
_FORCED_EP = {"cuda": (CUDA_EP,), "metal": (COREML_EP,), "qnn": (QNN_EP,), "vulkan": (DML_EP,)}


def _forced(p: Probe, want: str) -> BackendChoice | None:
    llama_ok = DISPLAY[want] in _usable_gpu_backends(p)
    providers = _drafter_providers(p.ort, _FORCED_EP[want])
    ort_ok = providers[0] != CPU_EP
    if not (llama_ok or ort_ok):
        return None
    target = DISPLAY[want] if llama_ok else "CPU"
    parts = [
        f"the target runs on {target}"
        + ("" if llama_ok else f" (llama.cpp has no {DISPLAY[want]} backend)"),
        f"the drafter on {provider_display(providers[0])}"
        + (" with CPU fallback" if ort_ok else f" (onnxruntime has no {_FORCED_EP[want][0]})"),
    ]
    return BackendChoice(
        name=DISPLAY[want],
        requested=want,
        target_backend=target,
        n_gpu_layers=-1 if llama_ok else 0,
        drafter_providers=providers,
        reason=f"{DISPLAY[want]} was chosen in settings: " + "; ".join(parts),
    )


def _unavailable_reason(p: Probe, want: str) -> str:
    if want == "qnn":
        return f"onnxruntime has no {QNN_EP} (install onnxruntime-qnn on a Snapdragon Windows PC)"
    lib = "this llama.cpp build" if p.llama.available else "llama.cpp (not loadable)"
    return f"{lib} has no {DISPLAY[want]} backend and onnxruntime has no {_FORCED_EP[want][0]}"


# ---------------------------------------------------------------------------------------------
# ORT sessions with provider fallback


@dataclass(frozen=True)
class ProviderAttempt:
    provider: str
    ok: bool
    error: str | None = None


@dataclass
class SessionResult:
    session: Any  # onnxruntime.InferenceSession
    provider: str  # the provider that took the session
    attempts: list[ProviderAttempt]

    @property
    def fallback_log(self) -> list[str]:
        return [f"{a.provider}: {a.error}" for a in self.attempts if not a.ok]

    def to_dict(self) -> dict:
        return {"provider": self.provider, "attempts": [asdict(a) for a in self.attempts]}


def create_session(
    model_path: str | os.PathLike[str] | bytes,
    providers: Sequence[str],
    *,
    provider_options: dict[str, dict[str, str]] | None = None,
    session_options: Any = None,
    on_fallback: Callable[[ProviderAttempt], None] | None = None,
) -> SessionResult:
    """An InferenceSession on the first provider in `providers` that works.

    ORT only warns (and silently runs on CPU) when asked for a provider it lacks, so a provider
    counts as working only if the session really lists it. CPU is always tried last."""
    import onnxruntime as ort

    options = {**DEFAULT_PROVIDER_OPTIONS, **(provider_options or {})}
    order = list(dict.fromkeys([*providers, CPU_EP]))
    model = model_path if isinstance(model_path, bytes) else os.fspath(model_path)
    attempts: list[ProviderAttempt] = []
    last_error: Exception | None = None
    plugin_devices = {}
    if hasattr(ort, "get_ep_devices"):
        for device in ort.get_ep_devices():
            plugin_devices.setdefault(device.ep_name, []).append(device)
    for provider in order:
        # A non-CPU provider gets CPU behind it so ops it lacks still run (ORT assigns per node).
        chain = [provider] if provider == CPU_EP else [provider, CPU_EP]
        chain_opts = [options.get(p, {}) for p in chain]
        try:
            if provider in plugin_devices and provider not in ort.get_available_providers():
                # a registered plugin EP: selected through its devices, not by name
                plugin_options = session_options or ort.SessionOptions()
                plugin_options.add_provider_for_devices(
                    plugin_devices[provider], options.get(provider, {})
                )
                session = ort.InferenceSession(model, sess_options=plugin_options)
            else:
                session = ort.InferenceSession(
                    model,
                    sess_options=session_options,
                    providers=chain,
                    provider_options=chain_opts,
                )
        except Exception as exc:  # noqa: BLE001 - ORT raises several types; all mean "next one"
            last_error = exc
            attempt = ProviderAttempt(provider, False, f"{type(exc).__name__}: {exc}".strip())
        else:
            if provider in session.get_providers():
                attempts.append(ProviderAttempt(provider, True))
                return SessionResult(session, provider, attempts)
            attempt = ProviderAttempt(provider, False, "not available in this onnxruntime build")
        attempts.append(attempt)
        log.warning("onnxruntime provider %s failed, falling back: %s", provider, attempt.error)
        if on_fallback is not None:
            on_fallback(attempt)
    raise RuntimeError(
        "onnxruntime could not create a session on any provider: "
        + "; ".join(f"{a.provider}: {a.error}" for a in attempts)
    ) from last_error


def describe(p: Probe) -> list[tuple[str, str]]:
    """Human (label, value) rows for a probe; used by doctor and the GUI's about box."""
    cpu = p.cpu
    cores = f"{cpu.logical_cores} logical"
    if cpu.physical_cores:
        cores = f"{cpu.physical_cores} physical / " + cores
    rows = [
        ("OS", f"{p.os} {p.os_version} ({cpu.arch}), Python {p.python}"),
        ("CPU", f"{cpu.model}, {cores}"),
        ("CPU features", ", ".join(cpu.flags) or "none detected"),
        ("RAM", format_size(p.ram_bytes) if p.ram_bytes else "unknown"),
    ]
    if p.device_model:
        rows.append(("Device", p.device_model))
    if p.llama.available:
        rows.append(
            (
                "llama.cpp",
                f"llama-cpp-python {p.llama.version}, "
                f"backends: {', '.join(p.llama.backends) or '?'}, "
                f"GPU offload: {'yes' if p.llama.gpu_offload else 'no'}",
            )
        )
    else:
        rows.append(("llama.cpp", f"not available ({p.llama.error})"))
    if p.llama.error and p.llama.available:
        rows.append(("llama.cpp note", p.llama.error))
    if p.ort.available:
        rows.append(("onnxruntime", f"{p.ort.version}, providers: {', '.join(p.ort.providers)}"))
    else:
        rows.append(("onnxruntime", f"not available ({p.ort.error})"))
    if not p.gpus:
        rows.append(("GPU", "none found"))
    for gpu in p.gpus:
        mem = (
            format_size(gpu.memory_total_bytes)
            + (f" ({format_size(gpu.memory_free_bytes)} free)" if gpu.memory_free_bytes else "")
            if gpu.memory_total_bytes
            else "memory unknown"
        )
        rows.append(("GPU", f"{gpu.name} [{gpu.backend}], {mem}"))
    return rows
