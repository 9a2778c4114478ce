"""ElevenLabs' pronunciation dictionaries in this process, driven by the official `elevenlabs` client: created from a
PLS file and from rules, rules added and removed (each a new version), got, listed and downloaded; their locators
honoured on the speech route and on both WebSockets, an unknown one refused in ElevenLabs' shape."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from elevenlabs import ElevenLabs, PronunciationDictionaryVersionLocator
from elevenlabs.core import ApiError
from elevenlabs.pronunciation_dictionaries import (
    BodyAddAPronunciationDictionaryV1PronunciationDictionariesAddFromRulesPostRulesItem_Alias as AliasRule,
)
from elevenlabs.pronunciation_dictionaries import (
    BodyAddAPronunciationDictionaryV1PronunciationDictionariesAddFromRulesPostRulesItem_Phoneme as PhonemeRule,
)
from fastapi.testclient import TestClient

from bench import asr
from tests.support.apps import InProcessApp

KEY = {"xi-api-key": "sk-el"}
SAY = "/elevenlabs/v1/text-to-speech/af_heart"
PLS = """<?xml version="1.0" encoding="UTF-8"?>
<lexicon version="1.0" xmlns="http://www.w3.org/2005/01/pronunciation-lexicon" alphabet="ipa" xml:lang="en-US">
  <lexeme><grapheme>Zorblax</grapheme><alias>a banana split with whipped cream and two cherries on the top</alias></lexeme>
</lexicon>
"""


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[InProcessApp]:
    with InProcessApp(tmp_path_factory.mktemp("dictionaries"), POLYTTS_API_KEYS='{"sk-el": "eleven"}') as running:
        yield running


@pytest.fixture
def client(app: InProcessApp) -> TestClient:
    return app.client


@pytest.fixture
def sdk(client: TestClient) -> ElevenLabs:
    # The TestClient is an httpx client of Starlette's own vendoring: the SDK drives it as it would httpx's.
    transport: Any = client
    return ElevenLabs(base_url=str(client.base_url) + "/elevenlabs", api_key="sk-el", httpx_client=transport)


def test_dictionaries_are_created_edited_got_listed_and_downloaded(sdk: ElevenLabs) -> None:
    from_file = sdk.pronunciation_dictionaries.create_from_file(name="brands", file=io.BytesIO(PLS.encode()))
    assert from_file.version_rules_num == 1 and len(from_file.version_id) == 16
    from_rules = sdk.pronunciation_dictionaries.create_from_rules(
        name="codes",
        rules=[
            AliasRule(string_to_replace="Qxv", alias="cue ex vee"),
            PhonemeRule(string_to_replace="Kokoro", phoneme="kˈoʊkəɹoʊ", alphabet="ipa"),
        ],
    )
    added = sdk.pronunciation_dictionaries.rules.add(
        from_rules.id, rules=[AliasRule(string_to_replace="GIF", alias="jif")]
    )
    assert added.version_rules_num == 3 and added.version_id != from_rules.version_id
    removed = sdk.pronunciation_dictionaries.rules.remove(from_rules.id, rule_strings=["Qxv"])
    got = sdk.pronunciation_dictionaries.get(from_rules.id)
    assert got.latest_version_id == removed.version_id and got.latest_version_rules_num == 2
    assert sorted(rule.string_to_replace for rule in got.rules) == ["GIF", "Kokoro"]
    listed = sdk.pronunciation_dictionaries.list()
    assert {d.id for d in listed.pronunciation_dictionaries} >= {from_file.id, from_rules.id}
    downloaded = b"".join(sdk.pronunciation_dictionaries.download(from_file.id, from_file.version_id))
    assert b"<alias>a banana split with whipped cream and two cherries on the top</alias>" in downloaded
    with pytest.raises(ApiError) as refused:
        sdk.pronunciation_dictionaries.get("0" * 20)
    assert refused.value.status_code == 404 and refused.value.body["detail"]["status"] == "dictionary_not_found"
    with pytest.raises(ApiError) as inside:
        sdk.pronunciation_dictionaries.create_from_rules(
            name="x", rules=[AliasRule(string_to_replace="ab", alias="c", word_boundaries=False)]
        )
    assert inside.value.status_code == 422 and "whole words" in inside.value.body["detail"]["message"]


def audio(messages: list[dict[str, Any]]) -> bytes:
    return b"".join(base64.b64decode(m["audio"]) for m in messages if m.get("audio"))


def socket_audio(client: TestClient, path: str, first: dict[str, Any], context: dict[str, str], text: str) -> bytes:
    with client.websocket_connect(f"{SAY}/{path}?output_format=pcm_24000", headers=KEY) as ws:
        ws.send_json({**first, **context})
        ws.send_json({"text": text, **context})
        if context:  # flushed first: closing an unflushed context is a barge-in
            ws.send_json({**context, "flush": True})
            ws.send_json({**context, "close_context": True})
        else:
            ws.send_json({"text": ""})
        messages: list[dict[str, Any]] = []
        while not (message := ws.receive_json()).get("isFinal"):
            assert "error" not in message, message
            messages.append(message)
    return audio(messages)


@pytest.mark.slow
def test_locators_are_honoured_on_http_and_both_websockets(sdk: ElevenLabs, client: TestClient) -> None:
    created = sdk.pronunciation_dictionaries.create_from_file(name="brands", file=io.BytesIO(PLS.encode()))
    locator = PronunciationDictionaryVersionLocator(pronunciation_dictionary_id=created.id, version_id=None)
    said = b"".join(
        sdk.text_to_speech.convert(
            "af_heart", text="Zorblax.", output_format="pcm_24000", pronunciation_dictionary_locators=[locator]
        )
    )
    plain = client.post(f"{SAY}?output_format=pcm_24000", json={"text": "Zorblax."}, headers=KEY).content
    meant = client.post(
        f"{SAY}?output_format=pcm_24000",
        json={"text": "a banana split with whipped cream and two cherries on the top."},
        headers=KEY,
    ).content
    assert said == meant and said != plain
    first = {"text": " ", "pronunciation_dictionary_locators": [{"pronunciation_dictionary_id": created.id}]}
    for path, context in (("stream-input", {}), ("multi-stream-input", {"context_id": "a"})):
        heard = len(socket_audio(client, path, first, context, "Zorblax. "))
        plain_here = len(socket_audio(client, path, {"text": " "}, context, "Zorblax. "))
        assert heard > 2 * plain_here and abs(heard - len(meant)) < 0.3 * len(meant), path  # the alias is said
    unknown = {"pronunciation_dictionary_locators": [{"pronunciation_dictionary_id": "0" * 20}], "text": "Hi."}
    refused = client.post(SAY, json=unknown, headers=KEY)
    assert refused.status_code == 404 and refused.json()["detail"]["status"] == "dictionary_not_found"


def test_locators_on_a_later_message_of_a_context_are_refused_not_dropped(client: TestClient) -> None:
    later = {"pronunciation_dictionary_locators": [{"pronunciation_dictionary_id": "0" * 20}]}
    with client.websocket_connect(f"{SAY}/multi-stream-input?output_format=pcm_24000", headers=KEY) as ws:
        ws.send_json({"text": " ", "context_id": "a"})
        ws.send_json({"text": "Hello there. ", "context_id": "a", **later})
        refused = ws.receive_json()
        assert refused["error"] == "invalid_message" and refused["contextId"] == "a", refused
        assert "first message" in refused["message"]
        ws.send_json({"context_id": "a", "close_context": True})
        assert ws.receive_json() == {"isFinal": True, "contextId": "a"}  # nothing of the refused text was said


@pytest.mark.slow
def test_a_bare_break_tag_is_that_much_silence(client: TestClient) -> None:
    url = f"{SAY}?output_format=pcm_24000"
    broken = client.post(url, json={"text": 'One. <break time="1.5s" /> Two.'}, headers=KEY)
    plain = client.post(url, json={"text": "One. Two."}, headers=KEY)
    assert broken.status_code == 200, broken.text
    extra = (len(broken.content) - len(plain.content)) / 2 / 24_000
    assert 1.0 < extra < 1.6, extra


@pytest.mark.slow
def test_ssml_parsing_on_both_websockets_reads_split_break_and_phoneme_tags(client: TestClient) -> None:
    """`enable_ssml_parsing=true`: the vendor's bare tags, split across messages, are read; a break is that much
    silence in the audio."""
    pieces = ['Say <phoneme alphabet="ipa" ph="təˈmɑːtoʊ">tomato</phon', "eme>. <bre", 'ak time="1.2s"/> Two. ']
    for path, context in (("stream-input", {}), ("multi-stream-input", {"context_id": "a"})):
        url = f"{SAY}/{path}?output_format=pcm_24000&enable_ssml_parsing=true&sync_alignment=true"
        with client.websocket_connect(url, headers=KEY) as ws:
            ws.send_json({"text": " ", **context})
            for piece in pieces:
                ws.send_json({"text": piece, **context})
            ws.send_json({**context, "flush": True})
            if context:
                ws.send_json({**context, "close_context": True})
            else:
                ws.send_json({"text": ""})
            messages: list[dict[str, Any]] = []
            while not (message := ws.receive_json()).get("isFinal"):
                assert "error" not in message, message
                messages.append(message)
        samples = np.frombuffer(audio(messages), dtype="<i2").astype(np.float32) / 32768
        quiet = asr.silences(samples, 24_000, 0.5)
        assert len(quiet) == 1 and abs((quiet[0][1] - quiet[0][0]) - 1.2) < 0.1, (path, quiet)
        spoken = "".join("".join(m["alignment"]["chars"]) for m in messages if m.get("alignment"))
        assert "<" not in spoken and "tomato" in spoken, spoken


def test_ssml_parsing_on_both_websockets_refuses_a_voice_that_is_no_stock_voice_naming_it(client: TestClient) -> None:
    """`<voice name>` with `enable_ssml_parsing=true` names a stock voice; any other name is the socket's error
    message (ElevenLabs' `message` and `error`), the name in it, before anything of its span is spoken."""
    for path, context in (("stream-input", {}), ("multi-stream-input", {"context_id": "a"})):
        url = f"{SAY}/{path}?output_format=pcm_24000&enable_ssml_parsing=true"
        with client.websocket_connect(url, headers=KEY) as ws:
            ws.send_json({"text": " ", **context})
            ws.send_json({"text": '<voice name="nobo', **context})
            ws.send_json({"text": 'dy_here">Bye now.</voice> ', **context})
            ws.send_json({**context, "flush": True})
            messages: list[dict[str, Any]] = []
            while not (message := ws.receive_json()).get("isFinal"):
                messages.append(message)
        errors = [message for message in messages if "error" in message]
        assert [message["error"] for message in errors] == ["invalid_ssml"], (path, messages)
        assert "nobody_here" in errors[0]["message"] and not any(m.get("audio") for m in messages), messages
