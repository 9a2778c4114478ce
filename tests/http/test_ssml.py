"""SSML and lexicons heard, in this process: `<break>` silences measured in the audio, `<sub>` words named as written
in the timings, SSML on the OpenAI route, what cannot be honoured refused before the first byte, and Whisper hearing a
lexicon's alias and a code spelled letter by letter."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from bench import asr
from tests.support.clips import decode_wav


def timed(client: TestClient, text: str) -> list[tuple[str, float, float]]:
    response = client.post("/tts", json={"text": text, "timestamps": True, "voice": "af_heart"})
    assert response.status_code == 200, response.text
    return [(word["word"], word["start"], word["end"]) for word in response.json()["words"]]


@pytest.mark.slow
@pytest.mark.parametrize("seconds", [0.8, 2.0])
def test_a_break_is_that_much_silence_in_the_audio(client: TestClient, seconds: float) -> None:
    text = f'<speak>Hello there.<break time="{int(seconds * 1000)}ms"/>General Kenobi.</speak>'
    response = client.post("/tts", json={"text": text, "voice": "af_heart"})
    assert response.status_code == 200, response.text
    samples, rate = decode_wav(response.content)
    quiet = asr.silences(samples, rate, 0.5)
    assert len(quiet) == 1 and abs((quiet[0][1] - quiet[0][0]) - seconds) < 0.08, quiet
    words = timed(client, text)
    gap = words[2][1] - words[1][2]
    assert [word for word, _, _ in words] == ["Hello", "there.", "General", "Kenobi."]
    assert seconds - 0.05 < gap < seconds + 0.15


@pytest.mark.slow
def test_sub_and_say_as_name_the_words_as_written_and_change_what_is_said(client: TestClient) -> None:
    words = timed(client, '<speak>See <sub alias="World Wide Web Consortium">W3C</sub> now.</speak>')
    assert [word for word, _, _ in words] == ["See", "W3C", "now."]
    assert words[1][2] - words[1][1] > 1.0  # four words said in its time
    plain = client.post("/tts", json={"text": "Code XQ7.", "voice": "af_heart"})
    spelled = client.post(
        "/tts",
        json={"text": '<speak>Code <say-as interpret-as="characters">XQ7</say-as>.</speak>', "voice": "af_heart"},
    )
    assert spelled.status_code == 200 and spelled.content != plain.content


@pytest.mark.slow
def test_the_openai_route_takes_ssml_as_its_input(client: TestClient) -> None:
    body = {"model": "tts-1", "voice": "af_heart", "response_format": "pcm"}
    ssml = client.post("/v1/audio/speech", json={**body, "input": '<speak>One.<break time="1s"/>Two.</speak>'})
    plain = client.post("/v1/audio/speech", json={**body, "input": "One. Two."})
    assert ssml.status_code == 200 and len(ssml.content) - len(plain.content) > 2 * 24_000 * 0.5


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("<speak>Hi <audio src='x'/></speak>", "invalid_ssml"),
        ("<speak>Hi <break time='1s'>", "malformed_xml"),
        ('<?xml version="1.0"?><!DOCTYPE s [<!ENTITY a "a">]><speak>&a;</speak>', "xml_unsafe"),
        ("<speak><break time='1s'/></speak>", "empty_text"),
        ("<speak><lexicon uri='0123456789abcdef'/>Hi</speak>", "lexicon_not_found"),
        ("<speak><lang xml:lang='klingon'>Hi</lang></speak>", "unsupported_language"),
    ],
)
def test_ssml_that_cannot_be_honoured_is_refused(client: TestClient, text: str, code: str) -> None:
    response = client.post("/tts", json={"text": text})
    assert response.json()["code"] == code, response.text


@pytest.fixture(scope="module")
def transcriber() -> asr.Transcriber:
    return asr.Transcriber()


@pytest.mark.slow
def test_whisper_hears_the_alias_and_the_spelled_code(client: TestClient, transcriber: asr.Transcriber) -> None:
    lexicon = client.post("/lexicons", json=[{"grapheme": "Zorblax", "alias": "banana"}]).json()["lexicon_id"]
    aliased = client.post("/tts", json={"text": "I would like a Zorblax, please.", "lexicons": [lexicon]})
    heard = asr.spoken_words(transcriber.transcribe(aliased.content).text)
    assert "banana" in heard, heard
    ssml = '<speak>Your code is <say-as interpret-as="characters">KQ</say-as>.</speak>'
    spelled = transcriber.transcribe(client.post("/tts", json={"text": ssml}).content).text
    assert any(form in spelled.lower().replace(".", "").replace(",", "") for form in ("k q", "kq", "k, q", "kyu")), (
        spelled
    )


@pytest.mark.slow
def test_a_voice_element_says_its_span_in_another_stock_voice(client: TestClient) -> None:
    """A dialogue in one request: the second line in another voice; an unknown voice is a 422 naming it."""
    one = client.post("/tts", json={"text": "<speak>Hello there. General Kenobi.</speak>", "voice": "af_heart"})
    two = client.post(
        "/tts",
        json={
            "text": '<speak>Hello there. <voice name="am_adam">General Kenobi.</voice></speak>',
            "voice": "af_heart",
        },
    )
    assert one.status_code == two.status_code == 200, two.text
    assert two.content != one.content and len(decode_wav(two.content)[0]) > 24_000
    words = timed(client, '<speak>Hello there. <voice name="am_adam">General Kenobi.</voice></speak>')
    assert [word for word, _, _ in words] == ["Hello", "there.", "General", "Kenobi."]
    refused = client.post(
        "/tts", json={"text": '<speak>Hi. <voice name="nobody_here">Bye.</voice></speak>', "voice": "af_heart"}
    )
    assert refused.status_code == 422 and refused.json()["code"] == "invalid_ssml", refused.text
    assert "nobody_here" in refused.json()["message"]
