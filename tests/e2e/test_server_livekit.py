"""LiveKit Agents' TTS plugins end to end, with nothing changed but their base URL and key, against one real server on
the Kokoro ONNX model: `elevenlabs.TTS` (its stream over `multi-stream-input`, several contexts on one socket, and
its chunked `/stream` request), `cartesia.TTS` (its streams over `tts/websocket`, and `/tts/bytes`) and `openai.TTS`
(`/v1/audio/speech`). The plugins run as an agent's session runs
them, without a LiveKit room: they need only an HTTP session."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from bench.common import PROBE
from tests.support.polling import wait_until
from tests.support.servers import ServerProcess, no_tracebacks
from tests.support.voice_agents import TimedWord, check_timings, heard, patient, speak_streamed, speech

if TYPE_CHECKING:
    from livekit.agents.tts import TTS

VOICE = "af_heart"
KEY = "sk-livekit"
SENTENCE = "The quick brown fox jumps over the lazy dog."
ANSWERS = (
    "The quick brown fox jumps over the lazy dog. It was a sunny day, and everyone was happy.",
    "Hello there, my friend. How are you today? I hope the weather is kind to you.",
)
"""Two agents' answers of several sentences, spoken at once: the pauses between sentences are where the timings are
held against the sound."""


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[ServerProcess]:
    """One node for every plugin, with a key each front takes as its client sends it."""
    server = ServerProcess(
        tmp_path_factory.mktemp("livekit"), POLYTTS_KOKORO_BACKEND="onnx", POLYTTS_API_KEYS=f'{{"{KEY}": "livekit"}}'
    ).start()
    yield server
    no_tracebacks(server)
    server.stop()


def elevenlabs_tts(node: ServerProcess, session: object, **options: object) -> TTS:
    from livekit.plugins import elevenlabs

    return elevenlabs.TTS(
        api_key=KEY,
        base_url=node.url + "/elevenlabs/v1",
        voice_id=VOICE,
        http_session=session,  # type: ignore[arg-type]
        **options,  # type: ignore[arg-type]
    )


def test_elevenlabs_stream_speaks_several_contexts_on_one_socket(node: ServerProcess) -> None:
    import aiohttp

    logged = len(node.log())

    async def run() -> list[tuple[np.ndarray, set[int], list[TimedWord], set[str]]]:
        async with aiohttp.ClientSession() as session:
            tts = elevenlabs_tts(node, session, encoding="pcm_24000")
            try:
                return list(await asyncio.gather(*(speak_streamed(tts, answer) for answer in ANSWERS)))
            finally:
                await tts.aclose()

    for answer, (samples, rates, words, _) in zip(ANSWERS, asyncio.run(run()), strict=True):
        assert rates == {24000} and 3.0 < samples.size / 24000 < 12.0 and speech(samples)
        assert [word for word, _, _ in words] == answer.split()
        assert check_timings(samples, 24000, words) >= 2, words  # on the context's clock: a pause per sentence
    log = node.log()[logged:]
    assert log.count("/multi-stream-input?") == 1, log  # one socket ...
    assert log.count("multi-stream-input outcome=ok") == 2, log  # ... two contexts, each its own live request


def test_elevenlabs_stream_says_a_word_as_its_pronunciation_dictionary_says(node: ServerProcess) -> None:
    """The plugin's `pronunciation_dictionary_locators`, sent in each context's first message, say the invented word
    as the dictionary's alias (far longer than the word itself)."""
    import aiohttp
    from livekit.plugins import elevenlabs

    created = PROBE.post(
        node.url + "/elevenlabs/v1/pronunciation-dictionaries/add-from-rules",
        json={
            "name": "brands",
            "rules": [{"type": "alias", "string_to_replace": "Zorblax", "alias": "a banana split with two cherries"}],
        },
        headers={"xi-api-key": KEY},
        timeout=60,
    )
    assert created.status_code == 200, created.text
    locator = elevenlabs.PronunciationDictionaryLocator(created.json()["id"], created.json()["version_id"])

    async def run(text: str, **options: object) -> np.ndarray:
        async with aiohttp.ClientSession() as session:
            tts = elevenlabs_tts(node, session, encoding="pcm_24000", **options)
            try:
                return (await speak_streamed(tts, text))[0]
            finally:
                await tts.aclose()

    plain = asyncio.run(run("Zorblax."))
    said = asyncio.run(run("Zorblax.", pronunciation_dictionary_locators=[locator]))
    meant = asyncio.run(run("a banana split with two cherries."))
    assert speech(said) and said.size > 1.4 * plain.size, (said.size, plain.size)
    assert abs(said.size - meant.size) < 0.25 * meant.size, (said.size, meant.size)  # the alias, said as written


def test_elevenlabs_stream_interrupted_stops_its_work_at_once(node: ServerProcess) -> None:
    """A barge-in as an agent's session makes it: the stream is closed while its answer is still being written and
    spoken, and its context is closed on the socket, which stays open for the next turn: the node stops its work."""
    import aiohttp
    from livekit.plugins import elevenlabs

    answer = " ".join(ANSWERS * 4)
    cancelled = node.log().count("multi-stream-input outcome=cancelled")

    def stopped() -> bool:
        return node.log().count("multi-stream-input outcome=cancelled") > cancelled

    async def run() -> None:
        async with aiohttp.ClientSession() as session:
            tts = elevenlabs.TTS(
                api_key=KEY, base_url=node.url + "/elevenlabs/v1", voice_id=VOICE, http_session=session
            )
            try:
                stream = tts.stream(conn_options=patient())
                for word in answer.split():
                    stream.push_text(word + " ")
                await anext(aiter(stream))  # the answer has begun to play
                await stream.aclose()  # the user speaks over it
                await asyncio.to_thread(wait_until, stopped, 30, "the interrupted context to stop", detail=node.log)
            finally:
                await tts.aclose()

    asyncio.run(run())


@pytest.mark.parametrize(("encoding", "rate"), [(None, 22050), ("pcm_16000", 16000)])
def test_elevenlabs_chunked_synthesize_at_the_rate_of_its_encoding(
    node: ServerProcess, encoding: str | None, rate: int
) -> None:
    """`synthesize` posts to `/stream` in the plugin's encoding (by default MP3 at 22.05 kHz, which it decodes
    itself); it refuses an answer whose content type is not audio."""
    import aiohttp
    from livekit.plugins import elevenlabs

    async def run() -> tuple[np.ndarray, set[int], list[TimedWord], set[str]]:
        async with aiohttp.ClientSession() as session:
            tts = elevenlabs.TTS(
                api_key=KEY,
                base_url=node.url + "/elevenlabs/v1",
                voice_id=VOICE,
                http_session=session,
                **({"encoding": encoding} if encoding else {}),  # type: ignore[arg-type]
            )
            try:
                return await heard(tts.synthesize(SENTENCE, conn_options=patient()))
            finally:
                await tts.aclose()

    samples, rates, _, _ = asyncio.run(run())
    assert rates == {rate} and 2.0 < samples.size / rate < 5.0 and speech(samples)


@pytest.mark.parametrize("response_format", ["mp3", "pcm"])
def test_openai_tts_speaks_at_24000_with_the_nodes_request_id(node: ServerProcess, response_format: str) -> None:
    """The plugin assumes 24 kHz for every format, asks `gpt-4o-mini-tts` for an event stream (`stream_format`
    sse) and takes the request id from the answer's X-Request-Id."""
    from livekit.plugins import openai

    async def run() -> tuple[np.ndarray, set[int], list[TimedWord], set[str]]:
        tts = openai.TTS(base_url=node.url + "/v1", api_key=KEY, voice="alloy", response_format=response_format)
        try:
            return await heard(tts.synthesize(SENTENCE, conn_options=patient()))
        finally:
            await tts.aclose()

    samples, rates, _, request_ids = asyncio.run(run())
    assert rates == {24000} and 2.0 < samples.size / 24000 < 5.0 and speech(samples)
    (request_id,) = request_ids
    assert request_id and f"id={request_id}" in node.log()


def cartesia_tts(node: ServerProcess, session: object, **options: object) -> TTS:
    from livekit.plugins import cartesia

    return cartesia.TTS(api_key=KEY, base_url=node.url + "/cartesia", voice=VOICE, http_session=session, **options)  # type: ignore[arg-type]


def test_cartesia_streams_speak_at_once_with_their_word_timestamps(node: ServerProcess) -> None:
    """Two agents' answers at once, each a stream of the plugin (its own context, on the plugin's pooled sockets):
    sentences sent as they complete, word timestamps on the context's clock."""
    import aiohttp

    logged = len(node.log())

    async def run() -> list[tuple[np.ndarray, set[int], list[TimedWord], set[str]]]:
        async with aiohttp.ClientSession() as session:
            tts = cartesia_tts(node, session)
            try:
                return list(await asyncio.gather(*(speak_streamed(tts, answer) for answer in ANSWERS)))
            finally:
                await tts.aclose()

    for answer, (samples, rates, words, _) in zip(ANSWERS, asyncio.run(run()), strict=True):
        assert rates == {24000} and 3.0 < samples.size / 24000 < 12.0 and speech(samples)
        assert [word for word, _, _ in words] == answer.split()
        assert check_timings(samples, 24000, words) >= 2, words
    assert node.log()[logged:].count("cartesia/tts/websocket outcome=ok") == 2


def test_cartesia_stream_interrupted_stops_its_work_at_once(node: ServerProcess) -> None:
    """A barge-in: the plugin sends Cartesia no `cancel`, it retires the stream's pooled socket and closes it when
    the next turn takes a connection; the node then stops the interrupted context's work."""
    import aiohttp

    answer = " ".join(ANSWERS * 4)
    cancelled = node.log().count("cartesia/tts/websocket outcome=cancelled")

    def stopped() -> bool:
        return node.log().count("cartesia/tts/websocket outcome=cancelled") > cancelled

    async def run() -> None:
        async with aiohttp.ClientSession() as session:
            tts = cartesia_tts(node, session)
            try:
                stream = tts.stream(conn_options=patient())
                for word in answer.split():
                    stream.push_text(word + " ")
                await anext(aiter(stream))  # the answer has begun to play
                await stream.aclose()  # the user speaks over it: the plugin retires that socket ...
                samples, *_ = await speak_streamed(tts, SENTENCE)  # ... and closes it at the next turn
                await asyncio.to_thread(wait_until, stopped, 30, "the interrupted context to stop", detail=node.log)
            finally:
                await tts.aclose()
            assert speech(samples)

    asyncio.run(run())


@pytest.mark.parametrize("rate", [24000, 16000])
def test_cartesia_chunked_synthesize_at_its_rate(node: ServerProcess, rate: int) -> None:
    """`synthesize` posts to `/tts/bytes` for raw s16le at the plugin's `sample_rate`."""
    import aiohttp

    async def run() -> tuple[np.ndarray, set[int], list[TimedWord], set[str]]:
        async with aiohttp.ClientSession() as session:
            tts = cartesia_tts(node, session, sample_rate=rate)
            try:
                return await heard(tts.synthesize(SENTENCE, conn_options=patient()))
            finally:
                await tts.aclose()

    samples, rates, _, _ = asyncio.run(run())
    assert rates == {rate} and 2.0 < samples.size / rate < 5.0 and speech(samples)
