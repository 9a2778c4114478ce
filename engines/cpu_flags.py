"""The processor flags that decide which kernels a CPU runs fast (int8, bf16, AMX), as /proc/cpuinfo names them:
what an engine picks its route by and what every benchmark's result records.

This module imports nothing of the service."""

from __future__ import annotations

import contextlib
from pathlib import Path

SPEED_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")

BF16_FLAGS = ("avx512_bf16", "amx_bf16")
"""Either one runs bf16 matrix products in hardware (AVX512-BF16's dot products, AMX's tiles)."""


def cpu_flags() -> list[str]:
    """Which of `SPEED_FLAGS` this processor has (/proc/cpuinfo; none where it cannot be read)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                present = set(line.split(":", 1)[1].split())
                return [flag for flag in SPEED_FLAGS if flag in present]
    return []
