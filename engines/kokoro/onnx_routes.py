"""How the Kokoro ONNX backend runs its graph: the route (`auto`, the default, chooses it from the processor's flags;
the setting may name one), and one runner per route.

- `int8`: the assembled int8 graph on ONNX Runtime. Everywhere; the only route without the `openvino` package.
- `openvino-bf16`: the same graph with its weights dequantized (models/float_graph.py, derived from the assembled int8
  one by ./run.sh, else on first use, and kept beside it: nothing downloaded) on OpenVINO's runtime with its inference
  precision set to bf16, which it runs in hardware on AVX512-BF16 or AMX, its sine generator kept in f32. `auto` takes
  it where the flags show either and `openvino` is installed (./run.sh installs it then).
- `openvino-f32`: that float graph on OpenVINO in f32: the route's numbers without bf16, for any x86 CPU (the tests
  run it wherever OpenVINO runs; it is not faster than `int8`).

A runner runs one inference and stops it from another thread when its step is stopped (`engines.step_stop`).
"""

from __future__ import annotations

import importlib.util
import logging
import queue
from collections.abc import Collection
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from engines.cpu_flags import BF16_FLAGS
from engines.step_stop import StepStopped, on_stop, stopped
from models.assemble import DERIVED_FOLDER, DURATIONS_OUTPUT

log = logging.getLogger("polytts.engines.kokoro")

OnnxRoute = Literal["int8", "openvino-bf16", "openvino-f32"]
RouteSetting = Literal["auto", "int8", "openvino-bf16", "openvino-f32"]

OPENVINO_PRECISION = {"openvino-bf16": "bf16", "openvino-f32": "f32"}


def openvino_installed() -> bool:
    return importlib.util.find_spec("openvino") is not None


def choose_route(requested: RouteSetting, flags: Collection[str], openvino: bool) -> OnnxRoute:
    """`auto`: OpenVINO in bf16 where the processor runs bf16 in hardware and OpenVINO is installed, else int8."""
    if requested != "auto":
        return requested
    return "openvino-bf16" if openvino and any(flag in flags for flag in BF16_FLAGS) else "int8"


class Runner(Protocol):
    def run(self, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """audio [samples] float32 and durations [tokens + 2] int64 for one padded token row; StepStopped when the
        step was stopped during the call."""
        ...


class OrtRunner:
    """One ONNX Runtime session; `run` is thread-safe (steps beside each other share it)."""

    def __init__(self, model: Path, threads: int, spinning: bool) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        if not spinning:  # beside others, a thread spinning for work would take a core from the inference next to it
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(str(model), sess_options=options, providers=["CPUExecutionProvider"])

    def run(self, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        import onnxruntime as ort

        options = ort.RunOptions()
        try:
            with on_stop(lambda: setattr(options, "terminate", True)):
                audio, durations = self._session.run(["audio", DURATIONS_OUTPUT], inputs, options)
        except Exception as exc:  # ONNX Runtime's own Fail: a stopped run is told apart by the stop, not the text
            if stopped():
                raise StepStopped("inference stopped: its request was cancelled") from exc
            raise
        return np.asarray(audio, dtype=np.float32).reshape(-1), np.asarray(durations, dtype=np.int64).reshape(-1)


class OpenVinoRunner:
    """One model compiled by OpenVINO for the CPU; an infer request per call in flight (kept for the next).

    A cancelled inference can leave the CPU plugin's shared graph in the shapes it was stopped in: the next
    inference of another length then fails inside the plugin, at once (0.2 s; once in 40 cancels in a loop on the
    2-core AMD machine, six times in a 16-case concurrency sweep there, once in CI on an AMX one: "Argument shapes
    are inconsistent", "Convert node ... has different elements number"), and so does the same row again. One
    inference of a short row of its tokens sets every node's shapes anew (0.2 s), and the row then runs; where it
    still fails, the model is compiled again (1.4 s) and the runner serves on from that one. A cancel costs nothing
    otherwise: the next inference takes its usual time."""

    def __init__(self, model: Any, precision: str, threads: int) -> None:
        """`model`: an `openvino.Model` (see `read_float_graph`). Compiled at each load (1.4 s on the 2-core machine;
        OpenVINO's cache of compiled models would make it 0.5 s for another 330 MB on disk)."""
        self._model = model
        self._config = {"INFERENCE_PRECISION_HINT": precision, "INFERENCE_NUM_THREADS": threads}
        self._compiled = self._compile()
        self._idle: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._cancelled = False

    def _compile(self) -> Any:
        import openvino as ov

        return ov.Core().compile_model(self._model, "CPU", self._config)

    def run(self, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        try:
            return self._run_after_cancel(inputs) if self._cancelled else self._infer(inputs)
        except StepStopped:
            self._cancelled = True
            raise

    def _run_after_cancel(self, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        try:
            return self._infer(inputs)
        except RuntimeError:
            pass
        log.warning("OpenVINO inference failed after a cancelled one: setting the graph's shapes with a short row")
        try:
            self._infer(short_row(inputs))
            return self._infer(inputs)
        except RuntimeError:
            log.warning("OpenVINO inference failed again after a cancelled one: compiling the model again")
            self._compiled, self._idle = self._compile(), queue.SimpleQueue()
            return self._infer(inputs)

    def _infer(self, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        try:
            request = self._idle.get_nowait()
        except queue.Empty:
            request = self._compiled.create_infer_request()
        try:
            request.start_async(inputs)
            # Hooked once started: a stop already set cancels it at once (a cancel before the start does nothing).
            with on_stop(request.cancel):
                request.wait()
            if stopped():
                raise StepStopped("inference stopped: its request was cancelled")
            audio = np.array(request.get_tensor("audio").data, dtype=np.float32).reshape(-1)
            durations = np.array(request.get_tensor(DURATIONS_OUTPUT).data, dtype=np.int64).reshape(-1)
        except RuntimeError as exc:  # OpenVINO's cancelled wait
            if stopped():
                raise StepStopped("inference stopped: its request was cancelled") from exc
            raise
        self._idle.put(request)
        self._cancelled = False
        return audio, durations

    @property
    def precision(self) -> str:
        return str(self._compiled.get_property("INFERENCE_PRECISION_HINT"))


def short_row(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`inputs` with its padded token row cut to its first two tokens (four in all, a 0.2 s inference)."""
    tokens = inputs["tokens"]
    return {**inputs, "tokens": np.concatenate([tokens[:, :3], tokens[:, -1:]], axis=1)}


def read_float_graph(int8_model: Path) -> Any:
    """The `openvino.Model` of the int8 graph's float copy, its sine generator kept in f32 (models/float_graph.py),
    derived once into `openvino/` beside the int8 graph and read from there."""
    import openvino as ov

    from models.float_graph import float_ir

    return ov.Core().read_model(float_ir(int8_model, int8_model.parent / DERIVED_FOLDER))
