"""Pronunciation lexicons in this process: the lexicon routes (store, list, get, download, delete; hostile and
oversized documents refused fast), and lexicons and inline phonemes applied on the native routes and the OpenAI
route (the `openai` package's `extra_body`), with the caches keyed on what is said and word timings naming the words
as written."""

from __future__ import annotations

import base64
import json
import time

import openai
import pytest
from fastapi.testclient import TestClient

from tests.support.apps import InProcessApp
from tests.support.clips import decode_wav

PLS = """<?xml version="1.0" encoding="UTF-8"?>
<lexicon version="1.0" xmlns="http://www.w3.org/2005/01/pronunciation-lexicon" alphabet="ipa" xml:lang="en-US">
  <lexeme><grapheme>Zorblax</grapheme><alias>banana split</alias></lexeme>
  <lexeme><grapheme>Kokoro</grapheme><phoneme>kˈoʊkəɹoʊ</phoneme></lexeme>
  <lexeme><grapheme>new york city</grapheme><alias>the big apple</alias></lexeme>
</lexicon>
"""


def store(client: TestClient, body: str | bytes, **params: str) -> str:
    response = client.post("/lexicons", content=body, params=params)
    assert response.status_code in (200, 201), response.text
    return str(response.json()["lexicon_id"])


def seconds(wav: bytes) -> float:
    samples, rate = decode_wav(wav)
    return len(samples) / rate


def test_a_lexicon_is_stored_listed_got_downloaded_and_deleted(client: TestClient) -> None:
    created = client.post("/lexicons", content=PLS, params={"name": "brands"})
    assert created.status_code == 201 and created.json()["created"] is True and created.json()["entries"] == 3
    lexicon_id = created.json()["lexicon_id"]
    again = client.post("/lexicons", content=PLS, params={"name": "brands"})
    assert again.status_code == 200 and again.json() == {**created.json(), "created": False}
    listed = client.get("/lexicons").json()["lexicons"]
    assert {
        "lexicon_id": lexicon_id,
        "name": "brands",
        "language": "en-US",
        "entries": 3,
        "phoneme_entries": 1,
    } in listed
    got = client.get(f"/lexicons/{lexicon_id}").json()
    assert got["lexemes"][1] == {"graphemes": ["Kokoro"], "alias": None, "phoneme": "kˈOkəɹO", "alphabet": "kokoro"}
    downloaded = client.get(f"/lexicons/{lexicon_id}/pls")
    assert downloaded.headers["content-type"].startswith("application/pls+xml")
    assert store(client, downloaded.content, name="brands") == lexicon_id  # the download is the same lexicon
    assert client.delete(f"/lexicons/{lexicon_id}").status_code == 204
    assert client.get(f"/lexicons/{lexicon_id}").json()["code"] == "lexicon_not_found"
    assert client.delete(f"/lexicons/{lexicon_id}").status_code == 404
    assert client.get("/lexicons/not-an-id").json()["code"] == "invalid_lexicon_id"


def test_json_rules_are_stored_too(client: TestClient) -> None:
    rules = [{"grapheme": "Qxv", "alias": "cue ex vee"}, {"grapheme": "GIF", "phoneme": "JH IH1 F", "alphabet": "cmu"}]
    response = client.post("/lexicons", json=rules)
    assert response.status_code == 201, response.text
    assert client.get(f"/lexicons/{response.json()['lexicon_id']}").json()["lexemes"][1]["phoneme"] == "ʤˈɪf"


def test_a_bundle_imports_the_lexicon_with_its_id(app: InProcessApp) -> None:
    client = app.client
    lexicon_id = store(client, PLS, name="brands")
    bundle = client.get(f"/lexicons/{lexicon_id}/bundle").content
    assert client.delete(f"/lexicons/{lexicon_id}").status_code == 204
    imported = client.put(f"/lexicons/{lexicon_id}/bundle", content=bundle)
    assert imported.status_code == 201, imported.text
    assert imported.json() == {"lexicon_id": lexicon_id, "created": True, "entries": 3}
    again = client.put(f"/lexicons/{lexicon_id}/bundle", content=bundle)
    assert again.status_code == 200 and again.json()["created"] is False
    assert client.get(f"/lexicons/{lexicon_id}").json()["lexemes"][1]["phoneme"] == "kˈOkəɹO"
    # Words of its own: the cache is the module's, and the alias test counts on its first "Zorblax." missing it.
    said = client.post("/tts", json={"text": "Imported Zorblax.", "lexicons": [lexicon_id]})
    meant = client.post("/tts", json={"text": "Imported banana split."})
    assert said.status_code == 200 and said.content == meant.content


def _bundle(lexemes: list[dict[str, object]], **fields: object) -> str:
    body = {"language": None, "lexemes": lexemes, "name": "n", **fields}
    return json.dumps(body, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


ANY_ID = "0123456789abcdef"


@pytest.mark.parametrize(
    ("body", "lexicon_id", "status", "code"),
    [
        (_bundle([{"graphemes": ["Qxv"], "alias": "cue"}]), ANY_ID, 422, "bundle_id_mismatch"),
        (_bundle([{"graphemes": ["Qxv"], "alias": "cue"}]).replace(",", ", "), ANY_ID, 422, "invalid_bundle"),
        (_bundle([{"graphemes": ["Qxv"], "phoneme": "☃", "alphabet": "kokoro"}]), ANY_ID, 422, "unsayable_phonemes"),
        (_bundle([{"graphemes": ["Qxv"], "phoneme": "kˈu", "alphabet": "ipa"}]), ANY_ID, 422, "invalid_bundle"),
        (_bundle([{"graphemes": ["Qxv"]}]), ANY_ID, 422, "invalid_lexicon"),
        (_bundle([{"graphemes": ["Qxv"], "alias": "cue"}], extra=1), ANY_ID, 422, "invalid_bundle"),
        (_bundle([{"graphemes": [1], "alias": "cue"}]), ANY_ID, 422, "invalid_bundle"),
        (_bundle([{"graphemes": ["Qxv"], "alias": "cue"}], name="x" * 201), ANY_ID, 422, "invalid_bundle"),
        ("[" * 100_000 + "]" * 100_000, ANY_ID, 422, "invalid_bundle"),
        (_bundle([{"graphemes": [f"w{i}"], "alias": "a"} for i in range(20_001)]), ANY_ID, 413, "lexicon_too_large"),
        (" " * (4 * 1024 * 1024 + 1), ANY_ID, 413, "body_too_large"),
        (_bundle([{"graphemes": ["Qxv"], "alias": "cue"}]), "not-an-id", 422, "invalid_lexicon_id"),
    ],
    ids=[
        "other-id", "not-canonical", "unsayable", "other-alphabet", "no-pronunciation", "unknown-field",
        "grapheme-not-text", "long-name", "deep", "too-many-entries", "10MB", "bad-id",
    ],
)  # fmt: skip
def test_a_bad_or_hostile_bundle_is_refused_and_nothing_is_written(
    app: InProcessApp, body: str, lexicon_id: str, status: int, code: str
) -> None:
    folder = app.settings.lexicons_dir
    before = sorted(folder.iterdir()) if folder.is_dir() else []
    response = app.client.put(f"/lexicons/{lexicon_id}/bundle", content=body)
    assert (response.status_code, response.json()["code"]) == (status, code), response.text
    assert (sorted(folder.iterdir()) if folder.is_dir() else []) == before
    assert app.client.get("/health").status_code == 200  # still serving


BOMB = (
    '<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa">'
    + "".join(f'<!ENTITY {c} "{("&" + p + ";") * 10}">' for p, c in zip("abcdefgh", "bcdefghi", strict=True))
    + "]><lexicon>&i;</lexicon>"
)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (BOMB, 422, "xml_unsafe"),
        ("<lexicon>" + "<lexeme>" * 5000, 422, "xml_unsafe"),
        ("<lexicon><lexeme>", 422, "malformed_xml"),
        ("hello", 422, "invalid_lexicon"),
        ('[{"grapheme": "a"}]', 422, "invalid_lexicon"),
        ('[{"grapheme": "a", "phoneme": "☃"}]', 422, "unsayable_phonemes"),
        ('[{"grapheme": "a", "alias": "b", "extra": 1}]', 422, "invalid_input"),
        ("<lexicon>" + " " * (4 * 1024 * 1024) + "</lexicon>", 413, "body_too_large"),
    ],
    ids=["entity-bomb", "deep", "malformed", "neither", "no-pronunciation", "unsayable", "unknown-field", "10MB"],
)
def test_bad_and_hostile_lexicons_are_refused_fast(client: TestClient, body: str, status: int, code: str) -> None:
    started = time.perf_counter()
    response = client.post("/lexicons", content=body)
    assert (response.status_code, response.json()["code"]) == (status, code), response.text
    assert time.perf_counter() - started < 2.0
    assert client.get("/health").status_code == 200  # still serving


def test_a_request_naming_an_unknown_lexicon_or_too_many_is_refused(client: TestClient) -> None:
    unknown = client.post("/tts", json={"text": "Hello.", "lexicons": ["0123456789abcdef"]})
    assert (unknown.status_code, unknown.json()["code"]) == (404, "lexicon_not_found")
    many = client.post("/tts", json={"text": "Hello.", "lexicons": [f"{i:016x}" for i in range(9)]})
    assert (many.status_code, many.json()["code"]) == (422, "too_many_lexicons")
    forged = client.post("/tts", json={"text": "Hello \U000f006b."})
    assert (forged.status_code, forged.json()["code"]) == (422, "invalid_phoneme_text")
    inline = client.post("/tts", json={"text": "[Hello](/h☃/)"})
    assert (inline.status_code, inline.json()["code"]) == (422, "unsayable_phonemes")


@pytest.mark.slow
def test_an_alias_changes_what_is_said_and_the_cache_keys_on_it(client: TestClient) -> None:
    lexicon_id = store(client, PLS)
    plain = client.post("/tts", json={"text": "Zorblax.", "voice": "af_heart"})
    aliased = client.post("/tts", json={"text": "Zorblax.", "voice": "af_heart", "lexicons": [lexicon_id]})
    assert aliased.status_code == 200, aliased.text
    assert aliased.headers["x-cache"] == "miss" and aliased.content != plain.content
    said = client.post("/tts", json={"text": "banana split.", "voice": "af_heart"})
    assert said.headers["x-cache"] == "hit" and said.content == aliased.content  # the same words said
    changed = store(client, PLS.replace("banana split", "apple pie"))
    other = client.post("/tts", json={"text": "Zorblax.", "voice": "af_heart", "lexicons": [changed]})
    assert other.headers["x-cache"] == "miss" and other.content != aliased.content


@pytest.mark.slow
def test_an_ssml_lexicon_element_applies_a_stored_lexicon(client: TestClient) -> None:
    lexicon_id = store(client, PLS)
    document = f'<speak><lexicon uri="https://node.example/lexicons/{lexicon_id}"/>Zorblax.</speak>'
    named = client.post("/tts", json={"text": document, "voice": "af_heart"})
    assert named.status_code == 200, named.text
    listed = client.post("/tts", json={"text": "Zorblax.", "voice": "af_heart", "lexicons": [lexicon_id]})
    assert named.content == listed.content  # the alias said, as when the request lists the lexicon
    unknown = client.post("/tts", json={"text": '<speak><lexicon uri="0123456789abcdef"/>Hi.</speak>'})
    assert unknown.status_code == 404, unknown.text


@pytest.mark.slow
def test_phonemes_reach_kokoro_and_the_timings_name_the_words_as_written(client: TestClient) -> None:
    lexicon_id = store(client, PLS)
    body = {"text": "I love Kokoro in New York City.", "lexicons": [lexicon_id], "timestamps": True}
    timed = client.post("/tts", json=body)
    assert timed.status_code == 200, timed.text
    words = [word["word"] for word in timed.json()["words"]]
    assert words == ["I", "love", "Kokoro", "in", "New", "York", "City."]
    inline = client.post("/tts", json={"text": "I love [Kokoro](/kˈOkəɹO/) in the big apple."})
    lexicon = client.post("/tts", json={"text": "I love Kokoro in New York City.", "lexicons": [lexicon_id]})
    assert inline.content == lexicon.content  # the same phonemes and words reach the model
    audio = base64.b64decode(timed.json()["audio"])
    assert abs(seconds(audio) - seconds(lexicon.content)) < 0.01


@pytest.mark.slow
def test_the_openai_route_takes_lexicons_through_extra_body(client: TestClient) -> None:
    lexicon_id = store(client, PLS)
    sdk = openai.OpenAI(base_url=str(client.base_url) + "/v1", api_key="sk-any", http_client=client, max_retries=0)
    speech = sdk.audio.speech.create(
        model="tts-1", voice="af_heart", input="Zorblax.", response_format="wav", extra_body={"lexicons": [lexicon_id]}
    )
    native = client.post("/tts", json={"text": "Zorblax.", "voice": "af_heart", "lexicons": [lexicon_id]})
    assert speech.content[44:] == native.content[44:]  # a streamed WAV header leaves its length open
    with pytest.raises(openai.NotFoundError):
        sdk.audio.speech.create(
            model="tts-1", voice="af_heart", input="Hi.", extra_body={"lexicons": ["0123456789abcdef"]}
        )


@pytest.mark.slow
def test_the_live_routes_take_lexicons(client: TestClient) -> None:
    lexicon_id = store(client, PLS)
    lines = [{"voice": "af_heart", "lexicons": [lexicon_id], "text": "Zorblax."}, {"end": True}]
    body = "".join(json.dumps(line) + "\n" for line in lines)
    live = client.post("/tts/live", content=body)
    assert live.status_code == 200, live.text
    whole = client.post("/tts/stream", json={"text": "banana split.", "voice": "af_heart"})
    assert abs(len(live.content) - len(whole.content)) < 0.05 * len(whole.content)
    query = client.post("/tts/live", params={"lexicons": lexicon_id}, content=json.dumps({"text": "Zorblax."}) + "\n")
    assert query.status_code == 200 and abs(len(query.content) - len(live.content)) < 0.05 * len(live.content)
    with client.websocket_connect("/tts/live/ws") as ws:
        ws.send_json({"voice": "af_heart", "lexicons": [lexicon_id], "text": "I love Kokoro.", "end": True})
        events = []
        while (message := ws.receive()).get("type") != "websocket.close":
            if message.get("text"):
                events.append(json.loads(message["text"]))
    words = [word["word"] for event in events if event["type"] == "words" for word in event["words"]]
    assert events[-1]["type"] == "done" and words == ["I", "love", "Kokoro."]
