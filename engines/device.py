"""The device models run on, as every engine and the service see it: which device (decided once, and the start-up
refusal when a demanded GPU is missing), what a device holds, giving cached device memory back, and whether the step
the current thread runs shares the machine with other steps.

torch decides whether CUDA exists once, at import: a process started while the driver was reloading would serve on
the CPU for days with every request "succeeding". So when the operator demands a GPU that torch cannot see, the
server refuses to start, which is the one failure a supervisor makes visible.

An engine that runs several steps at once (on the GPU thread's lanes) and splits its threads between overlapping
steps (Kokoro on ONNX Runtime) reads `step_runs_beside` to choose how many threads a step gets; the scheduler says
so around each step (`running_step`).

This module imports nothing of the service: engines, the GPU layer and the server all build on it.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import logging
import os
import platform
import sys
import threading
from collections.abc import Iterator

log = logging.getLogger("polytts.runtime")


class RuntimeRefused(Exception):
    """The demanded runtime is not available; the message says what to do."""


def mlx_installed() -> bool:
    return importlib.util.find_spec("mlx") is not None and importlib.util.find_spec("mlx_audio") is not None


def apple_silicon() -> bool:
    return platform.system() == "Darwin" and platform.machine() == "arm64"


def uses_mlx(runtime: str) -> bool:
    """Whether the engines run on MLX: asked for, or `auto` on Apple Silicon with mlx-audio installed."""
    return runtime == "mlx" or (runtime == "auto" and apple_silicon() and mlx_installed())


def torch_installed() -> bool:
    return importlib.util.find_spec("torch") is not None


GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia", "/dev/nvmap", "/dev/kfd", "/dev/dxg")
"""What a Linux host with a GPU torch can drive has: NVIDIA's driver (Jetson's `nvmap`), AMD's ROCm (`kfd`) or WSL's
GPU (`dxg`)."""


def gpu_may_exist() -> bool:
    """False only where no GPU can be: a Linux host without any of `GPU_DEVICE_NODES`. macOS (MPS) and other systems
    cannot be told without asking torch."""
    return sys.platform != "linux" or any(os.path.exists(node) for node in GPU_DEVICE_NODES)


def torch_accelerator() -> str | None:
    """ "cuda" or "mps" when torch is installed and sees that device, else None. Imports torch only where it is
    installed and a GPU may exist: a CPU host learns it has none without the second that importing torch costs."""
    if not torch_installed() or not gpu_may_exist():
        return None
    import torch

    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return None


def torch_device(runtime: str) -> str:
    """The torch device for a runtime setting: the demanded one, the accelerator torch sees (auto), or cpu."""
    if runtime in ("cuda", "mps", "cpu"):
        return runtime if runtime != "cpu" and torch_accelerator() == runtime else "cpu"
    return torch_accelerator() or "cpu"


def torch_device_memory(device: str) -> dict[str, int]:
    """What torch holds on a GPU device, for /health (nothing for the CPU). Imports torch: call only once loaded."""
    if device == "cuda":
        import torch

        return {"cuda_allocated": torch.cuda.memory_allocated(), "cuda_reserved": torch.cuda.memory_reserved()}
    if device == "mps":
        import torch

        return {"mps_allocated": torch.mps.current_allocated_memory()}
    return {}


def free_cuda() -> None:
    """Return cached device memory to the driver; uses torch/MLX only if something else already imported them."""
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
                torch.cuda.ipc_collect()
        except Exception:
            log.warning("releasing the CUDA cache failed", exc_info=True)
    mx = sys.modules.get("mlx.core")
    if mx is not None:
        try:
            # mx.clear_cache is current MLX; older releases only have mx.metal.clear_cache.
            clear = getattr(mx, "clear_cache", None) or mx.metal.clear_cache
            clear()
        except Exception:
            log.warning("releasing the MLX cache failed", exc_info=True)


def process_memory() -> dict[str, int]:
    """This process's resident memory now (Linux) and at its peak, in bytes."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    memory = {"peak_rss_bytes": peak if platform.system() == "Darwin" else peak * 1024}
    try:
        with open("/proc/self/statm") as statm:
            memory["rss_bytes"] = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # no /proc (macOS): the peak is what there is
        pass
    return memory


def check_runtime(runtime: str, allow_cpu: bool) -> None:
    """Refuse to start when `runtime` demands a GPU that torch cannot see, unless the operator allows the CPU,
    or MLX when mlx-audio is not installed."""
    if runtime == "mlx" and not mlx_installed():
        raise RuntimeRefused('POLYTTS_RUNTIME=mlx but mlx-audio is not installed: pip install "mlx-audio==0.6.2"')
    if runtime not in ("cuda", "mps"):
        return
    found = torch_accelerator()
    if found == runtime:
        log.info("runtime %s: torch sees the device", runtime)
        return
    if not torch_installed():
        why = "torch is not installed"
    elif gpu_may_exist():
        why = f"torch sees {found or 'no GPU'}"
    else:
        why = f"this host has no GPU device ({', '.join(GPU_DEVICE_NODES)} are all absent)"
    if allow_cpu:
        log.warning("POLYTTS_RUNTIME=%s but %s; running on the CPU because POLYTTS_ALLOW_CPU is set", runtime, why)
        return
    raise RuntimeRefused(
        f"POLYTTS_RUNTIME={runtime} but {why}; refusing to start rather than serve slowly on the CPU "
        "(check the driver, or set POLYTTS_ALLOW_CPU=1 to run on the CPU anyway)"
    )


_step = threading.local()


def step_runs_beside() -> bool:
    """Whether the step running on this thread runs beside others (False outside a step, and for a step alone)."""
    return bool(getattr(_step, "beside", False))


@contextlib.contextmanager
def running_step(beside: bool) -> Iterator[None]:
    """Around one step on this thread: whether it runs beside others."""
    before = getattr(_step, "beside", False)
    _step.beside = beside
    try:
        yield
    finally:
        _step.beside = before
