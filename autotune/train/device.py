"""What the device is and what it can run, found without creating a CUDA context.

The driver must not hold GPU memory of its own: every trial's NVML reading would include
it. So the driver asks NVML (and ``torch.cuda.is_available``, which creates no context)
and leaves CUDA initialisation to the trial processes.
"""
from __future__ import annotations

import importlib.metadata
import os
from dataclasses import asdict, dataclass
from typing import Any

from autotune.system.linux import cpu_model_name

GIB = 1024**3


@dataclass(frozen=True)
class DeviceInfo:
    kind: str  # "cuda" or "cpu"
    index: int  # CUDA device index (0 on CPU)
    name: str
    memory_gib: float  # total device memory (physical RAM on CPU)
    precisions: tuple[Any, ...]  # precisions this device runs natively
    unsupported: dict[str, Any]  # precision -> why it is not offered here
    driver: str | None = None

    @property
    def torch_device(self) -> str:
        return f"cuda:{self.index}" if self.kind == "cuda" else "cpu"

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["precisions"] = list(self.precisions)
        return d


def nvml_handle(index: int) -> Any:
    """An NVML handle for CUDA device ``index``, or None when NVML is not usable here."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # no driver, no library, no device: NVML is simply absent
        return None


def nvml_used_bytes(handle: Any) -> int | None:
    if handle is None:
        return None
    import pynvml

    return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)


def cpu_memory_gib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB


def _cpu_info() -> DeviceInfo:
    import torch

    precisions = ["fp32"]
    unsupported = {}
    # On a CPU without native bf16/fp16 (avx512_bf16, AMX, avx512_fp16) autocast emulates
    # the format: measured 10-15x slower than fp32 on an AVX2 machine. Not worth a trial.
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():
        precisions.append("bf16")
    else:
        unsupported["bf16"] = "this CPU has no native bf16 (avx512_bf16/AMX); autocast would emulate it"
    if torch.ops.mkldnn._is_mkldnn_fp16_supported():
        precisions.append("fp16")
    else:
        unsupported["fp16"] = "this CPU has no native fp16 (avx512_fp16/AMX-FP16); autocast would emulate it"
    name = cpu_model_name() or "cpu"
    return DeviceInfo("cpu", 0, f"{name} ({os.cpu_count()} cores)", cpu_memory_gib(),
                      tuple(precisions), unsupported)


def _cuda_info(index: int) -> DeviceInfo:
    import torch

    handle = nvml_handle(index)
    if handle is not None:
        import pynvml

        name = pynvml.nvmlDeviceGetName(handle)
        name = name.decode() if isinstance(name, bytes) else name
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total / GIB
        major, _ = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else driver
    else:  # NVML missing: ask torch (this creates a context in the driver, acceptable here)
        props = torch.cuda.get_device_properties(index)
        name, memory, major, driver = props.name, props.total_memory / GIB, props.major, None
    precisions = ["fp32", "fp16"]
    unsupported = {}
    if major >= 8:  # bf16 tensor cores arrived with Ampere (compute capability 8.0)
        precisions.insert(1, "bf16")
    else:
        unsupported["bf16"] = f"compute capability {major}.x has no bf16 support (needs 8.0+)"
    return DeviceInfo("cuda", index, name, memory, tuple(precisions), unsupported, driver)


def resolve_device(spec: str) -> DeviceInfo:
    """Turn the ``device`` key (auto, cpu, cuda, cuda:N) into a DeviceInfo.

    Raises ValueError with the fix when the request cannot be met.
    """
    import torch

    if spec == "auto":
        spec = "cuda" if torch.cuda.is_available() else "cpu"
    if spec == "cpu":
        return _cpu_info()
    if spec == "cuda" or spec.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise ValueError(f"device={spec}: no CUDA device is visible here; use device=cpu or device=auto")
        index = 0
        if ":" in spec:
            try:
                index = int(spec.split(":", 1)[1])
            except ValueError:
                raise ValueError(f"device={spec}: the index must be an integer; use device=cuda:0") from None
        count = torch.cuda.device_count()
        if not 0 <= index < count:
            raise ValueError(
                f"device={spec}: only {count} CUDA device(s) visible; use device=cuda:0 .. cuda:{count - 1}"
            )
        return _cuda_info(index)
    raise ValueError(f"device={spec}: unknown device; use one of auto, cpu, cuda, cuda:N")


def environment(device: DeviceInfo) -> dict[str, Any]:
    """The hardware and software a run measured on, for the report (no CUDA context made)."""
    import platform

    import torch

    env = {"device_memory_gib": round(device.memory_gib, 1), "python": platform.python_version(),
           "torch_version": torch.__version__, "cuda_version": torch.version.cuda}
    if device.kind == "cuda":
        env["driver"] = device.driver
    try:  # the installed version, read without importing transformers (about a second)
        env["transformers_version"] = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        pass
    return env
