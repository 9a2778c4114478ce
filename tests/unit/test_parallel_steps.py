"""Steps at once on a CPU node: the Kokoro ONNX backend running two inferences together on the real int8 model."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from engines.base import BuiltinVoice, EngineContext, SynthesisOptions
from engines.device import running_step
from engines.kokoro.config import KokoroSettings
from engines.kokoro.engine import SPEC as KOKORO
from engines.kokoro.engine import KokoroEngine
from engines.kokoro.onnx_backend import AUTO_LANES, OnnxBackend
from tests.support.kokoro_engines import loaded_onnx_kokoro
from tests.support.polling import wait_until
from text.languages import resolve_language

ENGLISH = SynthesisOptions(language=resolve_language("en"))
LONG = "A long sentence keeps the first inference busy for a good while, so that the short one starts after it."
"""About five times the short one's audio: the short one, started after it, ends first only if the two overlap."""
SHORT = "Short and quick."


@pytest.fixture(scope="module")
def engine(assembled_model: Path) -> Iterator[KokoroEngine]:
    with loaded_onnx_kokoro(assembled_model, threads=2, parallel_steps=2) as kokoro:
        yield kokoro


def speak(engine: KokoroEngine, text: str) -> np.ndarray:
    handle = engine.prepare_voice(BuiltinVoice("af_heart", "en-us", "kokoro"))
    return np.concatenate(list(engine.stream(text, handle, ENGLISH)))


@pytest.mark.slow
def test_a_short_inference_started_beside_a_long_one_ends_first_with_the_audio_it_makes_alone(
    engine: KokoroEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = engine.backend
    assert isinstance(backend, OnnxBackend) and engine.steps_at_once == 2
    assert engine.describe()["steps_at_once"] == 2
    alone = speak(engine, SHORT)
    ended: dict[str, float] = {}
    inferring = threading.Event()
    infer = backend.infer_timed

    def announced(tokens: list[int], style: np.ndarray, speed: float) -> tuple[np.ndarray, np.ndarray]:
        inferring.set()
        return infer(tokens, style, speed)

    monkeypatch.setattr(backend, "infer_timed", announced)

    def long_one() -> None:
        speak(engine, LONG)
        ended["long"] = time.perf_counter()

    worker = threading.Thread(target=long_one)
    worker.start()
    wait_until(inferring.is_set, 30, "the long inference to start")
    monkeypatch.setattr(backend, "infer_timed", infer)
    with running_step(beside=True):  # as the scheduler runs a step beside another: the second session
        beside = speak(engine, SHORT)
    ended["short"] = time.perf_counter()
    worker.join(120)
    assert "long" in ended and ended["short"] < ended["long"]  # it did not wait for the long one: they overlapped
    assert beside.shape == alone.shape and np.allclose(beside, alone, atol=1e-3)


def test_steps_at_once_come_from_the_setting_or_the_core_count(tmp_path: Path) -> None:
    assert OnnxBackend(tmp_path, threads=2, parallel=0).lanes == 1  # two cores: one step at a time pays best
    assert OnnxBackend(tmp_path, threads=8, parallel=0).lanes == 2  # four threads each
    assert OnnxBackend(tmp_path, threads=64, parallel=0).lanes == AUTO_LANES
    assert OnnxBackend(tmp_path, threads=2, parallel=2).lanes == 2  # asked for: one thread each
    assert OnnxBackend(tmp_path, threads=1, parallel=2).lanes == 1  # nothing to split
    assert OnnxBackend(tmp_path, threads=8, parallel=1).lanes == 1
    context = EngineContext("cpu", tmp_path, 8, 0, 0.5, 60, 120)
    built = KOKORO.build(KokoroSettings(kokoro_backend="onnx", onnx_threads=4, onnx_parallel_steps=3), context)
    assert isinstance(built, KokoroEngine) and built.steps_at_once == 3
    torch_node = KOKORO.build(KokoroSettings(kokoro_backend="torch", onnx_parallel_steps=3), context)
    assert isinstance(torch_node, KokoroEngine) and torch_node.steps_at_once == 1  # one step at a time on a GPU
