"""The OpenAI speech API surface: checked against what the official `openai` client sends and how it reads answers.

The client runs for real; only its transport is an in-process function that answers with this module's builders, so
these tests pin the shapes without a server (the /v1 routes' own tests drive a real server with the same client).
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
import pytest
from fastapi import FastAPI
from openai._streaming import SSEDecoder
from pydantic import ValidationError

from audio.encoding import AUDIO_FORMATS
from engines.base import BuiltinVoice
from errors import Busy, ClientDisconnected, InvalidInput, NotFound, ServiceError, Unauthorized, Unavailable
from voicebank.voice_entry import VoiceEntry
from web.fronts import FRONTS
from web.fronts.openai.protocol import (
    SPEECH_MODELS,
    SSE_MEDIA_TYPE,
    SpeechRequest,
    VoiceObject,
    error_body,
    models_list,
    resolve_model,
    resolve_voice,
    service_error_body,
    speech_events,
    speech_usage,
    validation_error_body,
    voices_list,
)
from web.fronts.openai.voices import DEFAULT_VOICES, voice_table
from web.http_errors import install_error_handlers

ENGINES = ("kokoro", "voxcpm", "qwen")

# Kokoro v1.0's stock voice packs (hexgrad/Kokoro-82M `voices/`): the names the OpenAI voices may map onto.
KOKORO_V1_VOICES = frozenset(
    "af_alloy af_aoede af_bella af_heart af_jessica af_kore af_nicole af_nova af_river af_sarah af_sky am_adam am_echo "
    "am_eric am_fenrir am_liam am_michael am_onyx am_puck am_santa bf_alice bf_emma bf_isabella bf_lily bm_daniel "
    "bm_fable bm_george bm_lewis ef_dora em_alex em_santa ff_siwis hf_alpha hf_beta hm_omega hm_psi if_sara im_nicola "
    "jf_alpha jf_gongitsune jf_nezumi jf_tebukuro jm_kumo pf_dora pm_alex pm_santa zf_xiaobei zf_xiaoni zf_xiaoxiao "
    "zf_xiaoyi zm_yunjian zm_yunxi zm_yunxia zm_yunyang".split()
)


def client_answering(answer: Callable[[httpx2.Request], httpx2.Response]) -> openai.OpenAI:
    """The official client, its HTTP answered in-process by `answer`; no retries, so each call is one request."""
    transport = httpx2.MockTransport(answer)
    return openai.OpenAI(
        api_key="sk-test",
        base_url="http://polytts.test/v1",
        max_retries=0,
        http_client=httpx2.Client(transport=transport),
    )


def sent_speech_bodies(**calls: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The JSON bodies the client sends for `audio.speech.create(**kwargs)`, per call name."""
    seen: list[dict[str, Any]] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        assert request.method == "POST" and request.url.path == "/v1/audio/speech"
        assert request.headers["authorization"] == "Bearer sk-test"
        seen.append(json.loads(request.content))
        return httpx2.Response(200, content=b"ID3", headers={"content-type": "audio/mpeg"})

    client = client_answering(answer)
    for kwargs in calls.values():
        client.audio.speech.create(**kwargs)
    return dict(zip(calls, seen))


def test_what_the_official_client_sends_is_a_valid_request() -> None:
    bodies = sent_speech_bodies(
        minimal={"model": "tts-1", "input": "Hello there.", "voice": "alloy"},
        full={
            "model": "gpt-4o-mini-tts",
            "input": "Hello there.",
            "voice": {"id": "3f2a9c0d1e2b4a5c"},
            "response_format": "opus",
            "speed": 1.5,
            "instructions": "Speak warmly.",
            "stream_format": "sse",
        },
    )
    minimal = SpeechRequest.model_validate(bodies["minimal"])
    assert (minimal.model, minimal.input, minimal.voice) == ("tts-1", "Hello there.", "alloy")
    assert (minimal.response_format, minimal.speed, minimal.stream_format, minimal.instructions) == (
        "mp3",
        1.0,
        "audio",
        None,
    )
    full = SpeechRequest.model_validate(bodies["full"])
    assert full.voice == VoiceObject(id="3f2a9c0d1e2b4a5c")
    assert (full.response_format, full.speed, full.instructions, full.stream_format) == (
        "opus",
        1.5,
        "Speak warmly.",
        "sse",
    )


@pytest.mark.parametrize("fmt", AUDIO_FORMATS)
def test_every_response_format_is_accepted(fmt: str) -> None:
    assert SpeechRequest.model_validate({"model": "tts-1", "input": "x", "voice": "alloy", "response_format": fmt})


def test_null_optional_fields_take_their_defaults() -> None:
    body = {
        "model": "tts-1",
        "input": "x",
        "voice": "nova",
        "speed": None,
        "response_format": None,
        "instructions": None,
        "stream_format": None,
    }
    request = SpeechRequest.model_validate(body)
    assert (request.speed, request.response_format, request.stream_format, request.instructions) == (
        1.0,
        "mp3",
        "audio",
        None,
    )


def openai_error_of(body: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(ValidationError) as caught:
        SpeechRequest.model_validate(body)
    return validation_error_body(caught.value.errors())["error"]


BASE = {"model": "tts-1", "input": "Hello.", "voice": "alloy"}


@pytest.mark.parametrize(
    ("change", "param", "says"),
    [
        ({"speed": 0.2}, "speed", "greater than or equal to 0.25"),
        ({"speed": 4.01}, "speed", "less than or equal to 4"),
        ({"speed": True}, "speed", "valid number"),
        ({"speed": "1.5"}, "speed", "valid number"),
        ({"response_format": "ogg"}, "response_format", "'mp3'"),
        ({"stream_format": "chunks"}, "stream_format", "'sse'"),
        ({"voice": 7}, "voice", 'voice name or an object {"id"'),
        ({"voice": ""}, "voice", 'voice name or an object {"id"'),
        ({"voice": {"id": " "}}, "voice", 'voice name or an object {"id"'),
        ({"voice": {"name": "alloy"}}, "voice", 'voice name or an object {"id"'),
        ({"input": ""}, "input", "at least 1 character"),
        ({"instructions": "x" * 4097}, "instructions", "at most 4096"),
        ({"lang_code": "a"}, "lang_code", "Extra inputs are not permitted"),
    ],
)
def test_a_bad_field_is_an_openai_error_naming_it(change: dict[str, Any], param: str, says: str) -> None:
    error = openai_error_of({**BASE, **change})
    assert error["param"] == param and error["type"] == "invalid_request_error" and error["code"] == "invalid_input"
    assert error["message"].startswith(f"{param}: ") and says in error["message"]


def test_an_integer_speed_is_a_number() -> None:
    assert SpeechRequest.model_validate({**BASE, "speed": 2}).speed == 2.0


def test_missing_fields_are_all_named_and_the_first_is_the_param() -> None:
    error = openai_error_of({"voice": "alloy"})
    assert error["param"] == "model"
    assert "model: Field required" in error["message"] and "input: Field required" in error["message"]


def test_fastapi_shaped_locations_and_a_body_that_is_not_json() -> None:
    errors = [{"loc": ("body", "speed"), "msg": "Input should be a valid number", "type": "float_parsing"}]
    assert validation_error_body(errors)["error"]["param"] == "speed"
    not_json = [{"loc": ("body", 17), "msg": "JSON decode error", "type": "json_invalid"}]
    assert validation_error_body(not_json)["error"] == {
        "message": "JSON decode error",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_input",
    }


def test_models_map_onto_engines() -> None:
    for model in SPEECH_MODELS:
        assert resolve_model(model, "kokoro", ENGINES) == "kokoro"
    assert resolve_model("voxcpm", "kokoro", ENGINES) == "voxcpm"
    with pytest.raises(NotFound) as caught:
        resolve_model("tts-2", "kokoro", ENGINES)
    assert caught.value.code == "model_not_found"
    for accepted in (*SPEECH_MODELS, *ENGINES):
        assert accepted in caught.value.message
    assert service_error_body(caught.value)["error"] == {
        "message": caught.value.message,
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }


def test_every_openai_voice_maps_onto_a_stock_kokoro_voice() -> None:
    openai_voices = {"alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse"}
    assert openai_voices | {"marin", "cedar"} == set(DEFAULT_VOICES)
    assert set(DEFAULT_VOICES.values()) <= KOKORO_V1_VOICES


def test_the_voice_table_takes_overrides_and_new_names() -> None:
    table = voice_table({"alloy": "af_heart", "narrator": "3f2a9c0d1e2b4a5c"})
    assert table["alloy"] == "af_heart" and table["narrator"] == "3f2a9c0d1e2b4a5c" and table["echo"] == "am_echo"
    assert voice_table() == DEFAULT_VOICES and voice_table() is not DEFAULT_VOICES
    for bad in ({"alloy": ""}, {" ": "af_heart"}):
        with pytest.raises(ValueError, match="non-empty"):
            voice_table(bad)


def test_voices_resolve_through_the_table_as_a_name_or_an_object_alike() -> None:
    table = voice_table({"alloy": "af_heart"})
    for name, voice in [
        ("alloy", "af_heart"),
        ("af_bella(2)+af_sky(1)", "af_bella(2)+af_sky(1)"),
        ("3f2a9c0d1e2b4a5c", "3f2a9c0d1e2b4a5c"),
    ]:
        assert resolve_voice(name, table) == voice
        assert resolve_voice(VoiceObject(id=name), table) == voice, name


STATUS_EXCEPTIONS = [
    (InvalidInput("bad text", code="empty_text", detail={"param": "input"}), 422, openai.UnprocessableEntityError),
    (Unauthorized("no valid API key"), 401, openai.AuthenticationError),
    (NotFound("no voice 'x'", code="voice_not_found", detail={"param": "voice"}), 404, openai.NotFoundError),
    (Busy("queue is full", retry_after=3), 429, openai.RateLimitError),
    (Unavailable("engine is loading", code="warming"), 503, openai.InternalServerError),
]


@pytest.mark.parametrize(("error", "status", "raised"), STATUS_EXCEPTIONS)
def test_the_official_client_raises_its_own_exception_with_our_code(
    error: ServiceError, status: int, raised: type[openai.APIStatusError]
) -> None:
    assert error.status == status

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(status, json=service_error_body(error), headers=error.headers())

    with pytest.raises(raised) as caught:
        client_answering(answer).audio.speech.create(model="tts-1", input="Hi", voice="x")
    assert caught.value.status_code == status
    assert caught.value.code == error.code and caught.value.message.endswith(error.message)
    assert caught.value.param == (error.detail or {}).get("param")
    assert caught.value.type == (
        "requests" if status == 429 else "server_error" if status >= 500 else "invalid_request_error"
    )


def test_a_400_is_the_clients_bad_request_error() -> None:
    body = error_body(400, "invalid_input", "body is not JSON")

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(400, json=body)

    with pytest.raises(openai.BadRequestError) as caught:
        client_answering(answer).audio.speech.create(model="tts-1", input="Hi", voice="x")
    assert caught.value.body == body["error"]


async def test_an_unexpected_error_on_a_v1_route_answers_in_openais_shape() -> None:
    app = FastAPI()
    install_error_handlers(app, retry_after=2.0, fronts=FRONTS)

    async def broken() -> None:
        raise RuntimeError("a bug")

    for path in ("/v1/audio/speech", "/tts"):
        app.add_api_route(path, broken, methods=["POST"])
    transport = httpx.ASGITransport(app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://polytts.test") as client:
        openai_answer, native_answer = [await client.post(path) for path in ("/v1/audio/speech", "/tts")]
    assert openai_answer.status_code == native_answer.status_code == 500
    assert openai_answer.json() == error_body(500, "internal_error", "internal server error")
    assert openai_answer.json()["error"]["type"] == "server_error"
    assert native_answer.json() == {"code": "internal_error", "message": "internal server error"}


def test_the_models_list_is_what_the_client_parses() -> None:
    listing = models_list(ENGINES, "kokoro", created=1_700_000_000)

    def answer(request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/v1/models"
        return httpx2.Response(200, json=listing)

    models = list(client_answering(answer).models.list())
    assert [m.id for m in models] == [*SPEECH_MODELS, "kokoro", "qwen", "voxcpm"]
    assert {m.object for m in models} == {"model"} and {m.owned_by for m in models} == {"polytts"}
    assert models[0].created == 1_700_000_000
    assert {e["id"]: e["engine"] for e in listing["data"]}["tts-1-hd"] == "kokoro"


def test_the_voices_list_names_every_usable_voice(tmp_path: Path) -> None:
    builtins = [BuiltinVoice("af_heart", "en-us", "kokoro"), BuiltinVoice("jf_alpha", "ja", "kokoro")]
    registered = VoiceEntry(
        voice_id="3f2a9c0d1e2b4a5c",
        engine="voxcpm",
        ref_text="hello",
        x_vector_only_mode=False,
        seed_text=None,
        has_seed_audio=False,
        created_at=1_700_000_000.7,
        duration_s=3.0,
        sample_rate=16_000,
        folder=tmp_path,
        language="en",
    )
    listing = voices_list(builtins, [registered], voice_table({"narrator": "3f2a9c0d1e2b4a5c", "coral": "af_heart"}))
    by_id = {entry["id"]: entry for entry in listing["data"]}
    assert listing["object"] == "list" and listing["voices"] == listing["data"]
    assert by_id["jf_alpha"] == {
        "id": "jf_alpha",
        "name": "jf_alpha",
        "object": "audio.voice",
        "kind": "builtin",
        "engine": "kokoro",
        "language": "ja",
    }
    assert by_id["3f2a9c0d1e2b4a5c"]["kind"] == "registered"
    assert (by_id["3f2a9c0d1e2b4a5c"]["engine"], by_id["3f2a9c0d1e2b4a5c"]["created_at"]) == ("voxcpm", 1_700_000_000)
    assert (by_id["coral"]["maps_to"], by_id["coral"]["engine"], by_id["coral"]["language"]) == (
        "af_heart",
        "kokoro",
        "en-us",
    )
    assert (by_id["narrator"]["engine"], by_id["narrator"]["language"]) == ("voxcpm", "en")
    assert (by_id["alloy"]["maps_to"], by_id["alloy"]["engine"]) == ("af_alloy", None)  # not a pack on this node
    assert {e["kind"] for e in listing["data"]} == {"builtin", "registered", "openai"}
    assert len(listing["data"]) == 2 + 1 + len(DEFAULT_VOICES) + 1


async def chunks_of(*parts: bytes | ServiceError) -> AsyncIterator[bytes]:
    for part in parts:
        if isinstance(part, ServiceError):
            raise part
        yield part


async def collected(events: AsyncIterator[bytes]) -> bytes:
    return b"".join([event async for event in events])


def parsed(stream: bytes) -> list[dict[str, Any]]:
    """The events as the `openai` package's own SSE decoder reads them, fed in awkward pieces."""
    pieces = [stream[i : i + 7] for i in range(0, len(stream), 7)]
    events = list(SSEDecoder().iter_bytes(iter(pieces)))
    assert all(event.event is None for event in events)  # OpenAI's speech events carry their type in the data
    return [event.json() for event in events]


async def test_sse_deltas_carry_the_encoded_audio_then_done_carries_usage() -> None:
    usage = speech_usage("Hello there.", 1.234)
    assert usage == {"input_tokens": 12, "output_tokens": 62, "total_tokens": 74}
    stream = await collected(speech_events(chunks_of(b"ID3\x00", b"", b"\xff\xfb\x90"), lambda: usage))
    assert stream.startswith(b'data: {"type":"speech.audio.delta","audio":"SUQzAA=="}\n\n')
    events = parsed(stream)
    assert [event["type"] for event in events] == ["speech.audio.delta", "speech.audio.delta", "speech.audio.done"]
    assert b"".join(base64.b64decode(event["audio"]) for event in events[:-1]) == b"ID3\x00\xff\xfb\x90"
    assert events[-1] == {"type": "speech.audio.done", "usage": usage}
    assert SSE_MEDIA_TYPE == "text/event-stream"


async def test_a_failure_mid_stream_ends_it_with_an_error_event_the_client_raises() -> None:
    failure = Unavailable("engine kokoro failed mid-synthesis", code="engine_failed")
    stream = await collected(speech_events(chunks_of(b"abc", failure), lambda: speech_usage("x", 0)))
    events = parsed(stream)
    assert events[0]["type"] == "speech.audio.delta"
    assert events[-1] == {
        "error": {"message": failure.message, "type": "server_error", "param": None, "code": "engine_failed"}
    }
    # The `openai` package's SSE reader turns that event into an APIError carrying our code.
    response = httpx2.Response(
        200,
        content=stream,
        headers={"content-type": SSE_MEDIA_TYPE},
        request=httpx2.Request("POST", "http://polytts.test/v1/audio/speech"),
    )
    client = client_answering(lambda request: response)
    with pytest.raises(openai.APIError) as caught:
        list(openai.Stream(cast_to=object, response=response, client=client))
    assert caught.value.code == "engine_failed" and caught.value.message == failure.message


async def test_a_client_that_left_is_not_sent_an_error_event() -> None:
    with pytest.raises(ClientDisconnected):
        await collected(speech_events(chunks_of(b"abc", ClientDisconnected("gone")), lambda: speech_usage("x", 0)))
