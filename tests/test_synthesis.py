"""Serving logic around the real Kokoro engine: caching only clean syntheses, failures mid-stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import numpy as np
import pytest

from errors import Busy, InvalidInput, NotFound, PayloadTooLarge
from protocol import TTSRequest
from server import Service, build_service
from settings import load_settings
from synthesis import Timings


@pytest.fixture
async def service(tmp_path: Path, assembled_model: Path) -> AsyncIterator[Service]:
    settings = load_settings(
        voices_dir=tmp_path / "voices",
        cache_dir=tmp_path / "cache",
        kokoro_onnx_dir=assembled_model,
        kokoro_backend="onnx",
        max_inflight=1,
    )
    built = build_service(settings)
    built.gpu.start()
    built.states["kokoro"].status = "ready"
    yield built
    built.gpu.stop()


async def synthesize(service: Service, text: str) -> bytes:
    plan = service.synthesis.plan(TTSRequest(text=text, language="en"))
    job = service.synthesis.submit(plan, "test")
    return b"".join([pcm async for pcm in service.synthesis.pcm_stream(plan, job, Timings("test", plan))])


async def test_a_clean_synthesis_is_cached_in_both_layers(service: Service, caplog: pytest.LogCaptureFixture) -> None:
    pcm = await synthesize(service, "Cache me.")
    plan = service.synthesis.plan(TTSRequest(text="Cache me.", language="en"))
    assert service.synthesis.cached_pcm(plan) == pcm
    assert service.synthesis.cached_wav(plan)[44:] == pcm
    assert service.synthesis.pcm_cache.stats()["entries"] == 1
    line = next(r.getMessage() for r in caplog.records if r.name == "polytts.synthesis")
    assert "outcome=ok" in line and "ttfa=" in line and "rtf=" in line and "chars=9" in line


async def test_a_failure_mid_stream_ends_it_and_caches_nothing(
    service: Service, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    engine = service.engines["kokoro"]
    real_stream = engine.stream

    def breaks_after_one_piece(text: str, voice: object, options: object) -> Iterator[np.ndarray]:
        yield next(iter(real_stream(text, voice, options)))  # type: ignore[arg-type]
        raise RuntimeError("device lost")

    monkeypatch.setattr(engine, "stream", breaks_after_one_piece)
    text = "First sentence arrives. The second one never does."
    plan = service.synthesis.plan(TTSRequest(text=text, language="en"))
    received = []
    with pytest.raises(RuntimeError, match="device lost"):
        async for pcm in service.synthesis.pcm_stream(plan, service.synthesis.submit(plan, "test"), Timings("test", plan)):
            received.append(pcm)
    assert len(received) == 1
    assert service.synthesis.cached_pcm(plan) is None
    assert service.synthesis.pcm_cache.stats()["entries"] == 0 and service.synthesis.wav_cache.stats()["entries"] == 0
    assert "synthesis failed mid-stream" in caplog.text and "outcome=failed" in caplog.text
    monkeypatch.undo()
    assert await synthesize(service, "Still serving.")  # the GPU thread survived


async def test_an_abandoned_stream_caches_nothing_and_frees_the_slot(service: Service) -> None:
    text = " ".join(f"Sentence {i} of many." for i in range(20))
    plan = service.synthesis.plan(TTSRequest(text=text, language="en"))
    stream = service.synthesis.pcm_stream(plan, service.synthesis.submit(plan, "test"), Timings("test", plan))
    assert await anext(stream)
    with pytest.raises(Busy):  # max_inflight=1
        service.synthesis.submit(plan, "test")
    await stream.aclose()  # what a client disconnect does
    while service.scheduler.stats()["running"]:  # the step under way finishes; no further one starts
        await asyncio.sleep(0.05)
    assert service.synthesis.cached_pcm(plan) is None
    assert await synthesize(service, "Next.")


def test_plan_errors(service: Service) -> None:
    plan = service.synthesis.plan
    with pytest.raises(PayloadTooLarge):
        plan(TTSRequest(text="x" * 5001))
    with pytest.raises(NotFound):
        plan(TTSRequest(text="hi", voice_id="af_unknown"))
    with pytest.raises(InvalidInput):
        plan(TTSRequest(text="hi", language="xx"))


def test_cache_key_covers_voice_text_and_parameters(service: Service) -> None:
    plan = service.synthesis.plan
    keys = {
        plan(TTSRequest(text="Same text.")).cache_key,
        plan(TTSRequest(text="Same text.", speed=1.25)).cache_key,
        plan(TTSRequest(text="Same text.", voice_id="jm_kumo")).cache_key,
        plan(TTSRequest(text="Same text.", language="en-gb")).cache_key,
        plan(TTSRequest(text="Other text.")).cache_key,
        plan(TTSRequest(text="Same text.", max_chars_per_gen=5)).cache_key,
    }
    assert len(keys) == 6
    assert plan(TTSRequest(text="Same   text.")).cache_key == plan(TTSRequest(text="Same text.")).cache_key
