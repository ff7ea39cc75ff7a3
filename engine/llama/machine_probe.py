"""What this computer can run: the OS, CPU and RAM, llama.cpp's compiled backends and GPU
devices, onnxruntime's execution providers. `run_probe()` looks now; backends.probe() caches it
and backends.choose() decides from it. Each part is best-effort: a broken library must not stop
the app from starting."""

from __future__ import annotations

import ctypes
import importlib
import logging
import os
import platform
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_REG_NAMES = {"MTL": "Metal"}  # ggml registers Metal as "MTL"
# x86 / ARM CPU features worth showing (they decide which llama.cpp kernels are fast).
_CPU_FLAGS = frozenset(
    "avx avx2 fma f16c avx512f avx512bw avx512_vnni avx512_bf16 avx_vnni amx_tile amx_int8 "
    "amx_bf16 neon asimd asimddp dotprod i8mm sve sve2 bf16 sme".split()
)


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


def usable_cores() -> int:
    """The cores this process may run on: a container or `taskset` can allow fewer than the
    machine has, and llama.cpp threads beyond them only take turns spinning."""
    if hasattr(os, "sched_getaffinity"):  # Linux; elsewhere the machine's count
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 2


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
