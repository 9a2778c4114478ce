"""What configures Kokoro: its node settings (`POLYTTS_*`, composed into the service's `Settings`) and the
parameters a request may set."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from engines.base import EngineParams, EngineSettings
from engines.kokoro.onnx_routes import RouteSetting
from models.assemble import default_folder


class KokoroParams(EngineParams):
    """What a Kokoro request may set."""

    # Kokoro scales its predicted durations by 1/speed: every speed of OpenAI's range is native to it.
    speed: float = Field(1.0, ge=0.25, le=4.0, strict=True, description="Kokoro: speaking rate, 0.25-4 (default 1.0).")
    normalize: bool = Field(
        True,
        description="Kokoro: read numbers, money, dates, times, units and abbreviations as words first (English; "
        "in the other languages numbers, money, dates and times; default true).",
    )


class KokoroSettings(EngineSettings):
    """Kokoro's node settings: backend, weights, threads and the voice packs kept in memory."""

    kokoro_backend: Literal["auto", "torch", "onnx", "mlx"] = "auto"
    """Kokoro backend: `auto` takes MLX on the MLX runtime, PyTorch when CUDA or MPS is available, ONNX Runtime
    otherwise."""

    kokoro_model: str = "hexgrad/Kokoro-82M"
    """Kokoro weights for the PyTorch backend: a hub id (fetched into the hub cache when online) or a local folder
    holding `config.json`, one `.pth` and `voices/*.pt`."""

    kokoro_onnx_dir: Path | None = None
    """Folder holding `model.onnx`, `voices.npz` and `vocab.json` for Kokoro on ONNX Runtime.
    Default: `<models_dir>/kokoro-82m-int8`, assembled by `python -m models.assemble`."""

    kokoro_onnx_route: RouteSetting = "auto"
    """How the ONNX backend runs Kokoro. `auto` (the default) takes `openvino-bf16` where /proc/cpuinfo shows
    avx512_bf16 or amx_bf16 and the `openvino` package is installed (./run.sh installs it then, about 180 MB),
    `int8` otherwise, and where that route cannot be installed or load (saying so). `int8`: the assembled int8 graph
    on ONNX Runtime (about 0.6 GB resident with a long step under way). `openvino-bf16`: that graph's weights
    dequantized (derived once from it by ./run.sh, else at the first load, and kept beside it, in `openvino/`, 330
    MB) on OpenVINO in bf16, its sine generator in f32: 0.72-0.75x int8's time on a processor with AVX512-BF16, 0.4x
    with AMX, for about 1.5 GB resident. `openvino-f32`: the same in f32 (not faster than int8: for checking the
    route's numbers). /health reports the route taken and the flags it was chosen by."""

    onnx_threads: int = Field(0, ge=0, le=256)
    """ONNX Runtime intra-op threads; 0 uses every core."""

    onnx_parallel_steps: int = Field(0, ge=0, le=16)
    """Steps of different requests ONNX Runtime may synthesize at once on a CPU node, beside each other with
    POLYTTS_ONNX_THREADS split between them (a step that runs alone keeps every thread); admission learns how much
    more audio per second that makes. It costs a second ONNX Runtime session, about 120 MB. 0: one per 4 threads, up
    to 4 (so one at a time on fewer than 8 cores: on two, two at once make about 12 % more audio per second, but a
    newcomer then waits about a second longer behind two slowed steps); 1: one step at a time. The PyTorch and MLX
    backends always run one step at a time, on the GPU thread."""

    mlx_kokoro_model: str = "mlx-community/Kokoro-82M-bf16"
    """MLX runtime: Kokoro weights (hub id or local folder)."""

    kokoro_max_packs_mem: int = Field(64, ge=1)
    """Kokoro voice packs kept in memory, the most recently used: blends once mixed, registered packs once read and
    checked, built-in ones (0.52 MB each: 64 hold about 33 MB). A pack pushed out is resolved again when next used;
    the stock packs themselves stay loaded with the engine whatever this is."""

    def onnx_path(self, models_dir: Path) -> Path:
        """The ONNX backend's model folder: POLYTTS_KOKORO_ONNX_DIR, else the assembled one under `models_dir`."""
        return self.kokoro_onnx_dir or default_folder(models_dir)
