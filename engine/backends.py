"""Per-machine backend choice: what this computer can run, and where target and drafter go.

`probe()` looks once (cached) at the OS, CPU, llama.cpp's compiled backends and onnxruntime's
execution providers. `choose()` is a pure function of a probe (so tests can feed it simulated
Snapdragon / Apple / NVIDIA machines) that returns where the llama.cpp target runs
(n_gpu_layers) and the drafter's ORT provider list in fallback order. `create_session()`
walks that list and falls back when a provider cannot create a session.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import logging
import os
import platform
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

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

# llama.cpp GPU backends by preference (ggml registry names, after _REG_NAMES).
_GPU_BACKENDS = ("CUDA", "Metal", "ROCm", "MUSA", "Vulkan", "SYCL", "OpenCL")
_REG_NAMES = {"MTL": "Metal"}  # ggml registers Metal as "MTL"
# x86 / ARM CPU features worth showing (they decide which llama.cpp kernels are fast).
_CPU_FLAGS = frozenset(
    "avx avx2 fma f16c avx512f avx512bw avx512_vnni avx512_bf16 avx_vnni amx_tile amx_int8 "
    "amx_bf16 neon asimd asimddp dotprod i8mm sve sve2 bf16 sme".split()
)


# ---------------------------------------------------------------------------------------------
# Probe results


@dataclass(frozen=True)
class CpuInfo:
    model: str
    arch: str  # normalised: "x86_64" | "arm64" | other platform.machine() values
    logical_cores: int
    physical_cores: int | None  # None where the OS does not tell us cheaply
    flags: tuple[str, ...] = ()  # subset of _CPU_FLAGS, lower case

    def has(self, flag: str) -> bool:
        return flag.lower() in self.flags


@dataclass(frozen=True)
class GpuInfo:
    name: str
    backend: str  # "CUDA", "Metal", "Vulkan", ... or "nvidia-smi" when only the driver saw it
    memory_total_bytes: int | None = None
    memory_free_bytes: int | None = None
    integrated: bool = False  # shares system memory (Apple, Jetson, iGPUs)


@dataclass(frozen=True)
class LlamaInfo:
    available: bool
    version: str | None = None
    gpu_offload: bool = False  # llama_supports_gpu_offload()
    backends: tuple[str, ...] = ()  # ggml registry names, e.g. ("CUDA", "CPU")
    system_info: str = ""  # llama_print_system_info(): compiled CPU features
    error: str | None = None

    def has_backend(self, name: str) -> bool:
        return any(b.lower() == name.lower() for b in self.backends)


@dataclass(frozen=True)
class OrtInfo:
    available: bool
    version: str | None = None
    providers: tuple[str, ...] = ()  # get_available_providers() + registered plugin EPs
    error: str | None = None
    plugins: tuple[str, ...] = ()  # of those, plugin EPs (sessions select them by device)


@dataclass(frozen=True)
class Probe:
    os: str  # platform.system(): "Linux" | "Windows" | "Darwin"
    os_version: str
    cpu: CpuInfo
    llama: LlamaInfo
    ort: OrtInfo
    gpus: tuple[GpuInfo, ...] = ()
    ram_bytes: int | None = None
    device_model: str = ""  # e.g. "NVIDIA Jetson Orin Nano" from the device tree; "" if unknown
    python: str = field(default_factory=platform.python_version)

    def to_dict(self) -> dict:
        return asdict(self)


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


# ---------------------------------------------------------------------------------------------
# Probing (each part is best-effort: a broken library must not stop the app from starting)


def _arch() -> str:
    m = platform.machine().lower()
    if m in ("amd64", "x86_64", "x64"):
        return "x86_64"
    if m in ("arm64", "aarch64", "armv8", "armv8l"):
        return "arm64"
    return m or "unknown"


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _sysctl(name: str) -> str:
    try:
        out = subprocess.run(
            ["sysctl", "-n", name], capture_output=True, text=True, timeout=3, check=False
        )
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _parse_cpuinfo(text: str) -> tuple[str, int | None, set[str]]:
    """(model, physical cores, flags) from Linux /proc/cpuinfo (x86 or ARM layout)."""
    model = ""
    cores: set[tuple[str, str]] = set()
    flags: set[str] = set()
    phys_id = core_id = None
    for line in text.splitlines() + [""]:
        if not line.strip():  # end of one processor block
            if core_id is not None:
                cores.add((phys_id or "0", core_id))
            phys_id = core_id = None
            continue
        key, _, value = line.partition(":")
        key, value = key.strip().lower(), value.strip()
        if key in ("model name", "hardware", "cpu model") and not model:
            model = value
        elif key in ("flags", "features"):
            flags.update(value.lower().split())
        elif key == "physical id":
            phys_id = value
        elif key == "core id":
            core_id = value
    if "asimd" in flags:  # the kernel calls NEON "asimd" on aarch64
        flags.add("neon")
    if "asimddp" in flags:
        flags.add("dotprod")
    return model, (len(cores) or None), flags


def _cpu_info(linux_cpuinfo: str | None = None) -> CpuInfo:
    """This machine's CPU; with `linux_cpuinfo`, that /proc/cpuinfo text is read instead of
    this machine's (how tests see an AVX-512 or an ARM machine)."""
    arch = _arch()
    system = "Linux" if linux_cpuinfo is not None else platform.system()
    logical = os.cpu_count() or 1
    model, physical, flags = "", None, set()
    if system == "Linux":
        model, physical, flags = _parse_cpuinfo(
            _read("/proc/cpuinfo") if linux_cpuinfo is None else linux_cpuinfo
        )
    elif system == "Darwin":
        model = _sysctl("machdep.cpu.brand_string")
        physical = int(_sysctl("hw.physicalcpu") or 0) or None
        if arch == "arm64":
            flags.add("neon")  # every Apple Silicon core has NEON
            for feat, flag in (
                ("FEAT_DotProd", "dotprod"),
                ("FEAT_I8MM", "i8mm"),
                ("FEAT_BF16", "bf16"),
                ("FEAT_SME", "sme"),
            ):
                if _sysctl(f"hw.optional.arm.{feat}") == "1":
                    flags.add(flag)
        else:
            flags.update(_sysctl("machdep.cpu.features").lower().split())
            flags.update(_sysctl("machdep.cpu.leaf7_features").lower().split())
    elif system == "Windows":
        model = platform.processor()
        if arch == "arm64":
            flags.add("neon")  # mandatory on ARMv8-A / Windows on ARM
        else:
            flags.update(_windows_x86_flags())
    if not model:
        model = platform.processor() or arch
    return CpuInfo(
        model=model,
        arch=arch,
        logical_cores=logical,
        physical_cores=physical,
        flags=tuple(sorted(f for f in flags if f in _CPU_FLAGS)),
    )


def _windows_x86_flags() -> set[str]:
    # IsProcessorFeaturePresent: PF_AVX_INSTRUCTIONS_AVAILABLE=39, PF_AVX2=40, PF_AVX512F=41.
    try:
        kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined]
        present = {39: "avx", 40: "avx2", 41: "avx512f"}
        return {name for pf, name in present.items() if kernel32.IsProcessorFeaturePresent(pf)}
    except (AttributeError, OSError):
        return set()


def _ram_bytes() -> int | None:
    try:
        if hasattr(os, "sysconf") and "SC_PHYS_PAGES" in os.sysconf_names:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        if platform.system() == "Darwin":
            return int(_sysctl("hw.memsize") or 0) or None
        if platform.system() == "Windows":

            class _MemStatus(ctypes.Structure):
                _fields_ = [("dwLength", ctypes.c_ulong), ("dwMemoryLoad", ctypes.c_ulong)] + [
                    (n, ctypes.c_ulonglong)
                    for n in ("total", "avail", "pf_total", "pf_avail", "v_total", "v_avail", "ext")
                ]

            st = _MemStatus()
            st.dwLength = ctypes.sizeof(st)
            if ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(st)):  # type: ignore
                return int(st.total)
    except (OSError, ValueError, AttributeError):
        pass
    return None


def _device_model() -> str:
    # Jetson and other ARM boards name themselves in the device tree.
    return _read("/proc/device-tree/model").strip("\x00 \n")


def _ggml_devices() -> tuple[list[str], list[GpuInfo]]:
    """Backend names and GPU devices from ggml's registry inside llama-cpp-python's libggml."""
    from llama_cpp import _ggml  # loads the same libggml that libllama uses

    lib = _ggml.libggml
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    lib.ggml_backend_reg_count.restype = sz
    lib.ggml_backend_reg_get.argtypes, lib.ggml_backend_reg_get.restype = [sz], vp
    lib.ggml_backend_reg_name.argtypes, lib.ggml_backend_reg_name.restype = [vp], ctypes.c_char_p
    lib.ggml_backend_dev_count.restype = sz
    lib.ggml_backend_dev_get.argtypes, lib.ggml_backend_dev_get.restype = [sz], vp
    for fn in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
        getattr(lib, fn).argtypes, getattr(lib, fn).restype = [vp], ctypes.c_char_p
    lib.ggml_backend_dev_type.argtypes, lib.ggml_backend_dev_type.restype = [vp], ctypes.c_int
    lib.ggml_backend_dev_memory.argtypes = [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)]
    lib.ggml_backend_dev_memory.restype = None
    lib.ggml_backend_dev_backend_reg.argtypes = [vp]
    lib.ggml_backend_dev_backend_reg.restype = vp

    def reg_name(reg: int) -> str:
        name = lib.ggml_backend_reg_name(reg).decode(errors="replace")
        return _REG_NAMES.get(name, name)

    names = [reg_name(lib.ggml_backend_reg_get(i)) for i in range(lib.ggml_backend_reg_count())]
    gpus = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        kind = lib.ggml_backend_dev_type(dev)  # 0 CPU, 1 GPU, 2 IGPU, 3 ACCEL, 4 META
        if kind not in (1, 2):
            continue
        free, total = sz(0), sz(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        reg = lib.ggml_backend_dev_backend_reg(dev)
        desc = lib.ggml_backend_dev_description(dev) or lib.ggml_backend_dev_name(dev) or b"?"
        gpus.append(
            GpuInfo(
                name=desc.decode(errors="replace"),
                backend=reg_name(reg) if reg else "?",
                memory_total_bytes=total.value or None,
                memory_free_bytes=free.value or None,
                integrated=kind == 2,
            )
        )
    return names, gpus


def _llama_info() -> tuple[LlamaInfo, list[GpuInfo]]:
    try:
        import llama_cpp
    except Exception as exc:  # noqa: BLE001 - a broken build must still let doctor report it
        return LlamaInfo(available=False, error=f"{type(exc).__name__}: {exc}"), []
    gpu_offload = bool(llama_cpp.llama_supports_gpu_offload())
    try:
        system_info = llama_cpp.llama_print_system_info().decode(errors="replace").strip()
    except Exception:  # noqa: BLE001
        system_info = ""
    error, gpus = None, []
    try:
        backends, gpus = _ggml_devices()
    except Exception as exc:  # noqa: BLE001 - older builds: fall back to the shipped libraries
        error = f"ggml registry not readable ({exc}); guessed backends from library files"
        backends = _backends_from_libs(Path(llama_cpp.__file__).parent / "lib")
    return (
        LlamaInfo(
            available=True,
            version=getattr(llama_cpp, "__version__", None),
            gpu_offload=gpu_offload,
            backends=tuple(backends),
            system_info=system_info,
            error=error,
        ),
        gpus,
    )


def _backends_from_libs(lib_dir: Path) -> list[str]:
    found = ["CPU"]
    names = {"cuda": "CUDA", "metal": "Metal", "vulkan": "Vulkan", "hip": "ROCm", "sycl": "SYCL"}
    for path in lib_dir.glob("*ggml-*"):
        for key, name in names.items():
            if f"ggml-{key}" in path.name.lower() and name not in found:
                found.insert(0, name)
    return found


# Execution providers shipped as separate plugin packages (onnxruntime-qnn 2.x on Windows ARM64):
# onnxruntime does not list them until their library is registered, and sessions then select
# them by device (SessionOptions.add_provider_for_devices), not by name.
PLUGIN_EP_MODULES = ("onnxruntime_qnn",)


def register_plugin_eps(ort: Any) -> tuple[str, ...]:
    """Register installed plugin EPs; return those that found a device on this machine."""
    found = []
    for module_name in PLUGIN_EP_MODULES:
        try:
            module = importlib.import_module(module_name)
            name = module.get_ep_name()
            ort.register_execution_provider_library(name, module.get_library_path())
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not break the probe
            log.info("plugin execution provider %s unavailable: %s", module_name, exc)
            continue
        if any(d.ep_name == name for d in ort.get_ep_devices()):
            found.append(name)
    return tuple(found)


def _ort_info() -> OrtInfo:
    try:
        import onnxruntime as ort

        plugins = register_plugin_eps(ort)
        return OrtInfo(
            available=True,
            version=ort.__version__,
            providers=tuple(dict.fromkeys([*plugins, *ort.get_available_providers()])),
            plugins=plugins,
        )
    except Exception as exc:  # noqa: BLE001
        return OrtInfo(available=False, error=f"{type(exc).__name__}: {exc}")


def _nvidia_smi() -> list[GpuInfo]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,memory.total,memory.free", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3:
            continue
        mib = [int(p) * 2**20 if p.isdigit() else None for p in parts[1:]]
        gpus.append(GpuInfo(parts[0], "nvidia-smi", mib[0], mib[1]))
    return gpus


def run_probe() -> Probe:
    """Look at this machine now (uncached; `probe()` caches it)."""
    llama, gpus = _llama_info()
    if not gpus:  # llama.cpp built without GPU support still lets us say what GPU is there
        gpus = _nvidia_smi()
    return Probe(
        os=platform.system(),
        os_version=platform.release(),
        cpu=_cpu_info(),
        llama=llama,
        ort=_ort_info(),
        gpus=tuple(gpus),
        ram_bytes=_ram_bytes(),
        device_model=_device_model(),
    )


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
