"""A step under way stopped once its request is cancelled (engines.step_stop): Kokoro on ONNX Runtime ends its
inference mid-run (`RunOptions.terminate`), as on OpenVINO (`InferRequest.cancel`), the job ends as cancelled, and the engine serves the next request at
once with the audio it always made."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engines.base import BuiltinVoice, EngineCaps, SynthesisOptions
from engines.kokoro.engine import KokoroEngine
from engines.kokoro.onnx_backend import OnnxBackend
from engines.step_stop import StepStop, StepStopped, on_stop, within
from lifecycle.request_context import RequestContext
from lifecycle.service import Service
from tests.support.apps import kokoro_service
from tests.support.kokoro_engines import loaded_onnx_kokoro
from text.languages import resolve_language
from web.fronts.shared.requests import TTSRequest

LONG = (
    "The harbour master walked the length of the long stone pier every morning before the boats went out, counting "
    "the moorings, checking the lamps, and writing in his little book which of the old ropes would need replacing "
    "before the winter storms arrived, because nobody else in the village had ever been willing to do it properly."
)
"""One step of many seconds on the CPU (the tests chunk it whole)."""
SHORT = "Short and quick."
ENGLISH = SynthesisOptions(language=resolve_language("en"))
HEART = BuiltinVoice("af_heart", "en-us", "kokoro")


def test_a_stop_runs_the_hooks_of_the_blocks_under_way_once_and_a_late_one_at_once() -> None:
    stop, calls = StepStop(), []
    with stop.hooked(lambda: calls.append("under way")):
        stop.set()
        stop.set()
    assert calls == ["under way"] and stop.is_set()
    with stop.hooked(lambda: calls.append("late")):
        assert calls == ["under way", "late"]
    after = StepStop()
    with after.hooked(lambda: calls.append("ended")):
        pass
    after.set()  # the block had ended: its hook is gone
    assert calls == ["under way", "late"]


def test_outside_a_step_nothing_stops() -> None:
    with on_stop(lambda: pytest.fail("no step, no stop")):
        pass


class Announced:
    """A runner (engines/kokoro/onnx_routes.py) whose `run` says when its `nth` inference starts."""

    def __init__(self, runner: Any, nth: int = 1) -> None:
        self.runner = runner
        self.running = threading.Event()
        self.nth = nth
        self.runs = 0

    def run(self, *args: Any) -> Any:
        self.runs += 1
        if self.runs >= self.nth:
            self.running.set()
        return self.runner.run(*args)


@pytest.fixture(scope="module", params=["int8", "openvino-f32"])
def engine(assembled_model: Path, request: pytest.FixtureRequest) -> Iterator[KokoroEngine]:
    """Each route's runner (openvino-bf16 stops as openvino-f32 does, with the same code)."""
    caps = EngineCaps(first_chunk_chars=400, max_chunk_chars=400)
    with loaded_onnx_kokoro(assembled_model, parallel_steps=1, caps=caps, onnx_route=request.param) as kokoro:
        yield kokoro


def speak(engine: KokoroEngine, text: str) -> np.ndarray:
    return np.concatenate(list(engine.stream(text, engine.prepare_voice(HEART), ENGLISH)))


@pytest.mark.slow
def test_an_inference_stopped_from_another_thread_ends_at_once_and_the_session_serves_on(
    engine: KokoroEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = engine.backend
    assert isinstance(backend, OnnxBackend)
    before = speak(engine, SHORT)
    announced = Announced(backend._alone)
    monkeypatch.setattr(backend, "_alone", announced)
    stop, ended = StepStop(), list[str]()

    def long_step() -> None:
        with within(stop):
            try:
                speak(engine, LONG)
                ended.append("finished")
            except StepStopped:
                ended.append("stopped")

    worker = threading.Thread(target=long_step)
    worker.start()
    assert announced.running.wait(60), "the long inference did not start"
    stop.set()  # from this thread, as the event loop cancels a request
    worker.join(60)
    assert ended == ["stopped"]
    monkeypatch.undo()
    after = speak(engine, SHORT)
    assert after.shape == before.shape and np.array_equal(after, before)
    with within(StepStop()):  # a step never stopped runs to its end
        assert np.array_equal(speak(engine, SHORT), before)


@pytest.mark.slow
def test_a_stop_that_came_before_the_inference_started_ends_it_at_once(engine: KokoroEngine) -> None:
    """The stop can land between the step's start and the runtime's: OpenVINO's cancel of a request not yet started
    did nothing, and the whole inference ran before the step said it was stopped (seen as a 19 s test under load)."""
    began = time.perf_counter()
    speak(engine, SHORT)
    short_s = time.perf_counter() - began
    stop = StepStop()
    stop.set()
    began = time.perf_counter()
    with within(stop), pytest.raises(StepStopped):
        speak(engine, LONG)
    assert time.perf_counter() - began < short_s  # stopped at once, not after the long inference (many times this)


@pytest.fixture
def uncached(tmp_path: Path, assembled_model: Path) -> Iterator[Service]:
    """The service on the real engine, one step at a time, each text one step, no caches: every request runs."""
    with kokoro_service(
        tmp_path,
        assembled_model,
        onnx_parallel_steps=1,
        first_chunk_chars=400,
        chunk_chars=400,
        memory_cache_bytes=0,
        pcm_cache_bytes=0,
    ) as built:
        yield built


async def synthesize(service: Service, text: str) -> bytes:
    speech = await service.synthesis.speak(TTSRequest(text=text, language="en"), RequestContext("test", "test"))
    return b"".join([pcm async for pcm in speech.pcm()])


@pytest.mark.slow
async def test_a_request_cancelled_mid_step_frees_the_engine_and_the_next_is_served_as_before(
    uncached: Service, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    before = await synthesize(uncached, SHORT)
    engine = uncached.pool.engines["kokoro"]
    assert isinstance(engine, KokoroEngine) and isinstance(engine.backend, OnnxBackend)
    backend = engine.backend
    announced = Announced(backend._alone)
    monkeypatch.setattr(backend, "_alone", announced)
    abandoned = asyncio.create_task(synthesize(uncached, LONG))
    assert await asyncio.to_thread(announced.running.wait, 60), "the long step did not start"
    abandoned.cancel()  # what a client that goes away does to its request
    with pytest.raises(asyncio.CancelledError):
        await abandoned
    monkeypatch.undo()
    assert await synthesize(uncached, SHORT) == before  # the same audio as ever, from the same session
    lines = [r.getMessage() for r in caplog.records]
    assert any("stopped" in line and "into its step: client disconnected" in line for line in lines), lines
    outcomes = [line for line in lines if " outcome=" in line]
    assert len(outcomes) == 3 and " outcome=cancelled " in outcomes[1] and " audio=0.00s " in outcomes[1], outcomes
    assert not any(r.levelname in ("WARNING", "ERROR") for r in caplog.records), lines


@pytest.mark.slow
async def test_a_background_step_stops_for_an_arrival_and_is_said_again_with_the_same_audio(
    uncached: Service, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A job's step (the background class) under way when an interactive request arrives is stopped mid-inference:
    the arrival is served at once, then the background request says that step again from its start, and its audio
    is the audio of a run nobody interrupted."""
    background = RequestContext("jobs", "narrator", background=True)
    text = LONG.split(", counting")[0] + "."  # one step of a few seconds: long enough for the arrival to land in it

    async def narrate() -> bytes:
        speech = await uncached.synthesis.speak(TTSRequest(text=text, language="en"), background)
        return b"".join([pcm async for pcm in speech.pcm()])

    alone = await narrate()
    engine = uncached.pool.engines["kokoro"]
    assert isinstance(engine, KokoroEngine) and isinstance(engine.backend, OnnxBackend)
    announced = Announced(engine.backend._alone)
    monkeypatch.setattr(engine.backend, "_alone", announced)
    caplog.set_level("DEBUG", logger="polytts.scheduler")
    narrating = asyncio.create_task(narrate())
    assert await asyncio.to_thread(announced.running.wait, 60), "the background step did not start"
    announced.running.clear()
    short = await synthesize(uncached, SHORT)  # arrives while the long background step runs
    assert await narrating == alone  # said again from its start: the same audio
    monkeypatch.undo()
    assert short == await synthesize(uncached, SHORT)
    lines = [r.getMessage() for r in caplog.records]
    assert any("into its step for an arrival" in line for line in lines), lines
    steps = [line for line in lines if " step " in line and " took " in line]
    assert "(key test, file)" in steps[1] and "(key narrator, background)" in steps[2], steps  # the arrival first
    assert not any(r.levelname in ("WARNING", "ERROR") for r in caplog.records), lines


@pytest.fixture
def chunked(tmp_path: Path, assembled_model: Path) -> Iterator[Service]:
    """The service on the real engine as a node runs it (60 characters first, then 120), one step at a time, no
    caches; streams admitted by count (whether one thread keeps two streams in real time is admission's business,
    tests/unit/test_fairness.py)."""
    with kokoro_service(
        tmp_path,
        assembled_model,
        onnx_parallel_steps=1,
        memory_cache_bytes=0,
        pcm_cache_bytes=0,
        stream_admission=False,
    ) as built:
        yield built


@pytest.mark.slow
async def test_a_stream_gives_its_step_under_way_to_a_newcomer_and_says_it_after(
    chunked: Service, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A stream's second step, under way while its listener holds its first (about 4 s of audio), is stopped when a
    newcomer arrives: the newcomer's first step runs at once, then the stream says its step again from its start,
    and its listener hears the whole text."""

    async def stream(text: str, key: str) -> bytes:
        ctx = RequestContext("test", key, streaming=True)
        speech = await chunked.synthesis.speak(TTSRequest(text=text, language="en"), ctx)
        return b"".join([pcm async for pcm in speech.pcm()])

    text = LONG.split(", and writing")[0] + "."  # two steps: 60 characters, then the rest
    alone = await stream(text, "reader")
    short_alone = await stream(SHORT, "newcomer")
    engine = chunked.pool.engines["kokoro"]
    assert isinstance(engine, KokoroEngine) and isinstance(engine.backend, OnnxBackend)
    announced = Announced(engine.backend._alone, nth=2)
    monkeypatch.setattr(engine.backend, "_alone", announced)
    caplog.set_level("DEBUG", logger="polytts.scheduler")
    playing = asyncio.create_task(stream(text, "reader"))
    assert await asyncio.to_thread(announced.running.wait, 60), "the stream's second step did not start"
    assert await stream(SHORT, "newcomer") == short_alone
    heard = await playing
    monkeypatch.undo()
    lines = [r.getMessage() for r in caplog.records]
    assert any("(key reader, stream) stopped" in line and "for an arrival" in line for line in lines), lines
    steps = [line for line in lines if " step " in line and " took " in line]
    assert "(key reader, stream) step 1 " in steps[0] and "(key newcomer, stream) step 1 " in steps[2], steps
    assert "(key reader, stream) step 2 " in steps[3], steps  # said again, after the newcomer's
    # The whole text, its step said again perhaps cut at another place: the same length within a few word gaps.
    assert abs(len(heard) - len(alone)) < 0.05 * len(alone)
    assert not any(r.levelname in ("WARNING", "ERROR") for r in caplog.records), lines
