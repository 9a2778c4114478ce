"""Deepgram's speak API surface: checked against what the official `deepgram-sdk` sends and how it reads answers.

The client runs for real; only its transport is an in-process function that reads the request with this module's
models, so these tests pin the shapes without a server (the routes' own tests drive a server with the same client).
"""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import httpx
import pytest
from deepgram import DeepgramClient
from deepgram.core.api_error import ApiError
from deepgram.environment import DeepgramClientEnvironment
from deepgram.speak.v1.audio.types import (
    AudioGenerateRequestContainer,
    AudioGenerateRequestEncoding,
    AudioGenerateRequestModel,
)
from deepgram.speak.v1.types import (
    SpeakV1Clear,
    SpeakV1Cleared,
    SpeakV1Close,
    SpeakV1Flush,
    SpeakV1Flushed,
    SpeakV1Metadata,
    SpeakV1Text,
    SpeakV1Warning,
)
from deepgram.types.speak_v1encoding import SpeakV1Encoding
from deepgram.types.speak_v1sample_rate import SpeakV1SampleRate

from errors import NotFound
from web.fronts.deepgram.protocol import (
    AURA_VOICES,
    ENCODINGS,
    SOCKET_ENCODINGS,
    SocketMessage,
    SpeakBody,
    SpeakQuery,
    error_body,
    metadata,
    model_voice,
    warning,
)

STOCK_VOICES = frozenset(json.loads((Path(__file__).parents[2] / "data/kokoro-voices/sha256.json").read_text()))
WITHOUT_STOCK_VOICES = ("de", "nl")
"""Languages of Deepgram's voices that no stock Kokoro voice speaks."""


def literals(union: Any) -> tuple[str, ...]:
    """The literal values of one of the SDK's `Union[Literal[...], Any]` types."""
    return next(typing.get_args(arg) for arg in typing.get_args(union) if typing.get_origin(arg) is typing.Literal)


def test_every_sdk_model_names_a_stock_voice_or_is_refused() -> None:
    for model in literals(AudioGenerateRequestModel):
        if model.rsplit("-", 1)[1] in WITHOUT_STOCK_VOICES:
            with pytest.raises(NotFound) as refused:
                model_voice(model)
            assert refused.value.code == "model_not_found"
        else:
            assert model_voice(model) in STOCK_VOICES, model
    assert {voice for voices in AURA_VOICES.values() for voice in voices.values()} <= STOCK_VOICES
    assert model_voice(None) == "af_heart"  # aura-2-thalia-en, every client's default or near it
    assert model_voice("af_bella(2)+af_sky(1)") == "af_bella(2)+af_sky(1)"  # a voice of the node, as it is


def test_the_sdk_encodings_containers_and_socket_rates_are_answered() -> None:
    assert set(literals(AudioGenerateRequestEncoding)) == set(ENCODINGS)
    assert set(literals(SpeakV1Encoding)) == set(SOCKET_ENCODINGS)
    for rate in literals(SpeakV1SampleRate):
        assert SpeakQuery(encoding="linear16", sample_rate=int(rate)).output(socket=True).sample_rate == int(rate)
    containers = {container for spec in ENCODINGS.values() for container in spec.containers}
    assert containers == set(literals(AudioGenerateRequestContainer))


def sdk_request(answer: httpx.Response, **options: Any) -> tuple[httpx.Request, bytes | ApiError]:
    """What the SDK's REST speak sends with `options`, and what it makes of `answer`."""
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return answer

    environment = DeepgramClientEnvironment(base="http://node/deepgram", production="", agent="", agent_rest="")
    client = DeepgramClient(
        api_key="sk-dg", environment=environment, httpx_client=httpx.Client(transport=httpx.MockTransport(handler))
    )
    try:
        got: bytes | ApiError = b"".join(client.speak.v1.audio.generate(text="Hello.", **options))
    except ApiError as exc:
        got = exc
    return sent[0], got


def test_the_sdk_request_reads_as_the_route_reads_it() -> None:
    request, audio = sdk_request(
        httpx.Response(200, content=b"\x01\x02"), model="aura-2-thalia-en", encoding="linear16", sample_rate=16000
    )
    assert audio == b"\x01\x02"
    assert request.url.path == "/deepgram/v1/speak" and request.headers["authorization"] == "Token sk-dg"
    query = SpeakQuery.model_validate(dict(request.url.params))
    assert query.output(socket=False).sample_rate == 16000 and query.output(socket=False).fmt == "wav"
    assert SpeakBody.model_validate_json(request.content).text == "Hello."


def test_the_sdk_reads_the_error_body() -> None:
    body = error_body(NotFound("boom", code="model_not_found"))
    _, refused = sdk_request(httpx.Response(404, json=body), model="aura-2-nobody-en")
    assert isinstance(refused, ApiError) and refused.status_code == 404
    assert refused.body == {"err_code": "model_not_found", "err_msg": "boom", "request_id": ""}


def test_socket_messages_both_ways() -> None:
    for sent in (SpeakV1Text(text="Hi there."), SpeakV1Flush(type="Flush"), SpeakV1Clear(type="Clear")):
        assert SocketMessage.model_validate(sent.model_dump()).type == sent.type
    assert SocketMessage.model_validate(SpeakV1Close(type="Close").model_dump()).type == "Close"
    assert SpeakV1Metadata.model_validate(metadata("aura-2-thalia-en")).model_name == "aura-2-thalia-en"
    said = SpeakV1Warning.model_validate(warning("empty_text", "ignored"))
    assert (said.code, said.description) == ("empty_text", "ignored")
    assert SpeakV1Flushed.model_validate({"type": "Flushed", "sequence_id": 0}).sequence_id == 0
    assert SpeakV1Cleared.model_validate({"type": "Cleared", "sequence_id": 1}).sequence_id == 1
