"""Serving logic around the real Kokoro engine: caching only clean syntheses, failures mid-stream."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from errors import Busy, InvalidInput, NotFound, PayloadTooLarge
from lexicons.lexicon import Lexeme, Lexicon
from lifecycle.request_context import RequestContext
from lifecycle.service import Service
from pcm_cache import PcmCache
from settings import SettingsError, load_settings
from tests.support.apps import kokoro_service
from web.fronts.shared.requests import TTSRequest

CONTEXT = RequestContext("test", principal="test")


@pytest.fixture
def service(tmp_path: Path, assembled_model: Path) -> Iterator[Service]:
    with kokoro_service(tmp_path, assembled_model, max_inflight=1) as built:
        yield built


async def synthesize(service: Service, text: str) -> bytes:
    speech = await service.synthesis.speak(TTSRequest(text=text, language="en"), CONTEXT)
    return b"".join([pcm async for pcm in speech.pcm()])


@pytest.mark.slow
async def test_a_clean_synthesis_is_cached_in_both_layers(service: Service, caplog: pytest.LogCaptureFixture) -> None:
    pcm = await synthesize(service, "Cache me.")
    plan = await service.synthesis.planner.plan(TTSRequest(text="Cache me.", language="en"))
    assert plan.cache_key is not None
    assert service.synthesis.memory_cache.get(plan.cache_key) == pcm
    assert service.synthesis.pcm_cache.get(plan.cache_key) == pcm
    assert service.synthesis.pcm_cache.stats()["entries"] == 1
    line = next(r.getMessage() for r in caplog.records if r.name == "polytts.synthesis")
    assert "outcome=ok" in line and "ttfa=" in line and "rtf=" in line and "chars=9" in line


@pytest.mark.parametrize("variable", ["POLYTTS_MEMORY_CACHE_BYTES", "POLYTTS_WAV_CACHE_BYTES"])
def test_the_memory_cache_is_bounded_by_its_variable_or_its_old_name(
    variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, "4096")
    assert load_settings().memory_cache_bytes == 4096
    assert load_settings(memory_cache_bytes=0).memory_cache_bytes == 0  # code sets it by the field's name
    monkeypatch.setenv("POLYTTS_MEMORY_CACHE_BYTES", "8192")  # both set: the current name wins
    assert load_settings().memory_cache_bytes == 8192
    monkeypatch.setenv("POLYTTS_MEMORY_CACHE_BYTES", "-1")
    with pytest.raises(SettingsError, match=r"POLYTTS_MEMORY_CACHE_BYTES: Input should be greater"):
        load_settings()


@pytest.mark.slow
async def test_a_failure_mid_stream_ends_it_and_caches_nothing(
    service: Service, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    engine = service.pool.engines["kokoro"]
    real_stream = engine.stream

    def breaks_after_one_piece(text: str, voice: object, options: object) -> Iterator[np.ndarray]:
        yield next(iter(real_stream(text, voice, options)))  # type: ignore[arg-type]
        raise RuntimeError("device lost")

    monkeypatch.setattr(engine, "stream", breaks_after_one_piece)
    text = "First sentence arrives. The second one never does."
    plan = await service.synthesis.planner.plan(TTSRequest(text=text, language="en"))
    received = []
    with pytest.raises(RuntimeError, match="device lost"):
        speech = await service.synthesis.speak(TTSRequest(text=text, language="en"), CONTEXT)
        async for pcm in speech.pcm():
            received.append(pcm)
    assert len(received) == 1
    assert await service.synthesis.cached_pcm(plan) is None
    assert (
        service.synthesis.pcm_cache.stats()["entries"] == 0 and service.synthesis.memory_cache.stats()["entries"] == 0
    )
    assert "synthesis failed mid-stream" in caplog.text and "outcome=failed" in caplog.text
    monkeypatch.undo()
    assert await synthesize(service, "Still serving.")  # the GPU thread survived


@pytest.mark.slow
async def test_an_abandoned_stream_caches_nothing_and_frees_the_slot(service: Service) -> None:
    text = " ".join(f"Sentence {i} of many." for i in range(20))
    request = TTSRequest(text=text, language="en")
    stream = (await service.synthesis.speak(request, CONTEXT)).pcm()
    assert await anext(stream)
    with pytest.raises(Busy):  # max_inflight=1
        await service.synthesis.speak(request, CONTEXT)
    await stream.aclose()  # what a client disconnect does
    while service.scheduler.stats()["running"]:  # the step under way finishes; no further one starts
        await asyncio.sleep(0.05)
    assert await service.synthesis.cached_pcm(await service.synthesis.planner.plan(request)) is None
    assert await synthesize(service, "Next.")


async def test_plan_errors(service: Service) -> None:
    plan = service.synthesis.planner.plan
    with pytest.raises(PayloadTooLarge):
        await plan(TTSRequest(text="x" * 5001))
    with pytest.raises(NotFound):
        await plan(TTSRequest(text="hi", voice_id="af_unknown"))
    with pytest.raises(InvalidInput):
        await plan(TTSRequest(text="hi", language="xx"))


async def test_cache_key_covers_voice_text_and_parameters(service: Service) -> None:
    plan = service.synthesis.planner.plan
    keys = {
        (await plan(TTSRequest(text="Same text."))).cache_key,
        (await plan(TTSRequest(text="Same text.", speed=1.25))).cache_key,
        (await plan(TTSRequest(text="Same text.", normalize=False))).cache_key,
        (await plan(TTSRequest(text="Same text.", voice_id="am_adam"))).cache_key,
        (await plan(TTSRequest(text="Same text.", language="en-gb"))).cache_key,
        (await plan(TTSRequest(text="Other text."))).cache_key,
        (await plan(TTSRequest(text="Same text, said twice over."))).cache_key,
        (await plan(TTSRequest(text="Same text, said twice over.", max_chars_per_gen=20))).cache_key,
    }
    assert len(keys) == 8
    with pytest.raises(InvalidInput, match="at least 20"):  # a cap of a few characters would multiply the work
        await plan(TTSRequest(text="Same text.", max_chars_per_gen=5))
    assert (await plan(TTSRequest(text="Same   text."))).cache_key == (
        await plan(TTSRequest(text="Same text."))
    ).cache_key


class StalledDisk(PcmCache):
    """The file layer under the PCM cache, stalled: the first write blocks until the test lets it go."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, 1 << 20)
        self.writing = threading.Event()
        self.release = threading.Event()

    def put(self, key: str, pcm: bytes) -> None:
        if not self.writing.is_set():
            self.writing.set()
            assert self.release.wait(60), "the test never released the stalled write"
        super().put(key, pcm)


@pytest.mark.slow
async def test_a_stalled_cache_disk_does_not_delay_another_stream(service: Service, tmp_path: Path) -> None:
    disk = service.synthesis.pcm_cache = StalledDisk(tmp_path / "stalled")
    first = asyncio.create_task(synthesize(service, "My cache write stalls."))
    while not disk.writing.is_set():  # the first request's audio is done; its cache write is now stuck
        await asyncio.sleep(0.01)
    # On the event loop, the stuck write would stall every other request: this one could never finish.
    assert await asyncio.wait_for(synthesize(service, "Another request streams meanwhile."), 120)
    assert not first.done()
    disk.release.set()
    assert await first
    assert disk.stats()["entries"] == 2


@pytest.mark.parametrize(
    ("voice", "language", "expected"),
    [
        ("af_heart", None, "en-us"),
        ("bm_george", None, "en-gb"),
        ("ef_dora", None, "es"),
        ("ff_siwis", None, "fr-fr"),
        ("hf_alpha", None, "hi"),
        ("if_sara", None, "it"),
        ("pf_dora", None, "pt-br"),
        ("jf_alpha", None, "ja"),
        ("zf_xiaobei", None, "zh"),
        ("bf_emma(1)+af_heart(3)", None, "en-gb"),
        ("ef_dora", "en", "en-us"),
        (None, None, "en-us"),
    ],
)
async def test_the_language_follows_the_voice_unless_named(
    service: Service, voice: str | None, language: str | None, expected: str
) -> None:
    plan = await service.synthesis.planner.plan(TTSRequest(text="Hi.", voice_id=voice, language=language))
    assert plan.options.language.code == expected


MONEY = "$999,999,999,999.99 "


async def test_the_spoken_limit_counts_the_text_as_the_engine_says_it(service: Service) -> None:
    plan = service.synthesis.planner.plan
    with pytest.raises(PayloadTooLarge) as refused:
        await plan(TTSRequest(text=MONEY * 250))  # 5,000 characters, within POLYTTS_MAX_TEXT_CHARS as written
    assert refused.value.code == "spoken_too_long"
    assert "4999 characters as written and 38749 as spoken" in refused.value.message
    assert "limit is 10000 spoken characters (POLYTTS_MAX_SPOKEN_CHARS)" in refused.value.message
    within = await plan(TTSRequest(text=MONEY * 60))
    assert len(within.text) == 9_299 and within.text.startswith("nine hundred ninety-nine billion")


async def test_every_chunk_is_capped_in_spoken_characters(service: Service) -> None:
    plan = await service.synthesis.planner.plan(TTSRequest(text="Prices: " + MONEY * 30 + "That is all."))
    first, cap = service.settings.first_chunk_chars, service.settings.chunk_chars
    assert len(plan.chunks[0].text) <= 2 * first and all(len(chunk.text) <= cap for chunk in plan.chunks)
    assert len(plan.chunks) >= len(plan.text) // cap
    # each chunk speaks its part of the text as written: the words word timings name
    as_written = " ".join(chunk.text if chunk.written is None else chunk.written for chunk in plan.chunks)
    assert as_written.split() == ("Prices: " + MONEY * 30 + "That is all.").split()


async def test_lexicons_count_in_the_spoken_limit_and_no_chunk_cuts_a_multi_word_grapheme(service: Service) -> None:
    long_alias = "a banana split, with whipped cream, chopped nuts and two cherries on the top of it all"
    lexicon = Lexicon(
        "brands",
        None,
        (Lexeme(("Zorblax",), alias=long_alias), Lexeme(("New York City",), alias="the big, bright, apple")),
    )
    service.lexicons.put(lexicon)
    plan = service.synthesis.planner.plan
    with pytest.raises(PayloadTooLarge) as refused:  # 1,000 characters written, some 10,900 as the lexicon says them
        await plan(TTSRequest(text="Zorblax! " * 125, lexicons=[lexicon.lexicon_id]))
    assert refused.value.code == "spoken_too_long"
    text = " ".join(f"Sentence {n} goes on for a while, and then New York City is named." for n in range(12))
    planned = await plan(TTSRequest(text=text, lexicons=[lexicon.lexicon_id]))
    assert len(planned.chunks) > 3 and "the big, bright, apple" in planned.text
    as_written = [chunk.text if chunk.written is None else chunk.written for chunk in planned.chunks]
    assert " ".join(as_written).split() == text.split()
    for written in as_written:  # the grapheme whole in one chunk's text as written (the alias may pause at its comma)
        assert written.count("New York") == written.count("City") == written.count("New York City")


async def test_a_script_the_language_cannot_read_is_skipped_not_spelled(service: Service) -> None:
    plan = service.synthesis.planner.plan
    mixed = await plan(TTSRequest(text="Peace is שלום in Hebrew.", voice_id="af_heart"))
    assert mixed.text == "Peace is in Hebrew."
    assert mixed.cache_key == (await plan(TTSRequest(text="Peace is in Hebrew.", voice_id="af_heart"))).cache_key
    for text, script in (("שלום עולם ומלואו", "Hebrew"), ("你好，世界。", "Han"), ("Привет, мир!", "Cyrillic")):
        with pytest.raises(InvalidInput) as refused:
            await plan(TTSRequest(text=text, voice_id="af_heart"))
        assert refused.value.code == "unreadable_text" and script in refused.value.message, text
    chinese = await plan(TTSRequest(text="你好，世界。", voice_id="zf_xiaobei"))  # a Chinese voice reads it
    assert chinese.text == "你好，世界。"


async def test_emoji_are_left_out_of_whole_and_live_text_alike(service: Service) -> None:
    planner = service.synthesis.planner
    whole = await planner.plan(TTSRequest(text="Great news 🎉🎉! All done ✅.", voice_id="af_heart"))
    assert whole.text == "Great news ! All done ."
    plan = await planner.plan_voice(TTSRequest(text="", voice_id="af_heart"))
    live = planner.live_text(plan, lambda: None)
    live.add("Great news 🎉🎉! " + "😀" * 300 + ". All done ✅.")
    live.close()
    said = []
    while (taken := live.take()) is not None:
        said.append(taken[0].text)
    assert " ".join(said) == "Great news ! All done ."  # the phrase of emoji alone is not spoken at all


async def test_a_live_request_may_cut_its_phrases_shorter_than_the_engine(service: Service) -> None:
    """A client's own phrase caps (an ElevenLabs chunk schedule): an unpunctuated run is cut within the first cap's
    hard limit, where the engine's caps still wait for more of it."""
    synthesis = service.synthesis
    plan = await synthesis.planner.plan_voice(TTSRequest(text="", voice_id="af_heart"))
    run_on = "we keep talking on and on without a single mark to cut at "
    own, engines = (
        synthesis.planner.live_text(plan, lambda: None, (25, 50)),
        synthesis.planner.live_text(plan, lambda: None),
    )
    for text in (own, engines):
        text.add(run_on)
    taken = own.take()
    assert taken is not None and len(taken[0].text) <= 25 and run_on.startswith(taken[0].text)
    assert not engines.ready()  # 58 characters may still be one first phrase of the engine's
    wide = synthesis.planner.live_text(plan, lambda: None, (1000, 1000))  # never above the engine's caps
    wide.add(run_on * 4)
    taken = wide.take()
    assert taken is not None and len(taken[0].text) <= service.settings.chunk_chars


async def test_a_live_request_counts_and_cuts_its_phrases_as_spoken(service: Service) -> None:
    synthesis = service.synthesis
    plan = await synthesis.planner.plan_voice(TTSRequest(text="", voice_id="af_heart"))
    text = synthesis.planner.live_text(plan, lambda: None)
    text.add("It costs " + MONEY * 3 + "in all. שלום. Thanks.")
    text.close()
    chunks = []
    while (taken := text.take()) is not None:
        chunks.append(taken[0])
    assert all(len(chunk.text) <= service.settings.chunk_chars for chunk in chunks) and len(chunks) > 3
    assert chunks[0].text.startswith("It costs nine hundred") and str(chunks[0].written).startswith("It costs $999")
    assert chunks[-1].text == "Thanks." and "שלום" not in " ".join(chunk.text for chunk in chunks)
    too_much = synthesis.planner.live_text(plan, lambda: None)
    with pytest.raises(PayloadTooLarge) as refused:
        for _ in range(100):
            too_much.add(MONEY + ". ")
    assert refused.value.code == "spoken_too_long" and too_much.chars < service.settings.max_text_chars
