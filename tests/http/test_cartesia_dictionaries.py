"""Cartesia's pronunciation dictionaries in this process, answered in the `cartesia` client's own types
(`PronunciationDict`): created, got, updated (a new version), listed and deleted; `pronunciation_dict_id` honoured on `tts/bytes`, `tts/sse` and the WebSocket, an
unknown one refused in Cartesia's shape, never ignored."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cartesia.types import PronunciationDict
from fastapi.testclient import TestClient

from tests.http.test_cartesia import sse_events
from tests.support.apps import InProcessApp

KEY = {"X-API-Key": "sk-ca", "Cartesia-Version": "2025-04-16"}
DICTS = "/cartesia/pronunciation-dicts"
ALIAS = "a banana split with whipped cream and two cherries on the top"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[InProcessApp]:
    with InProcessApp(tmp_path_factory.mktemp("cartesia-dicts"), POLYTTS_API_KEYS='{"sk-ca": "cartesia"}') as running:
        yield running


@pytest.fixture
def client(app: InProcessApp) -> TestClient:
    return app.client


def body(transcript: str, **fields: Any) -> dict[str, Any]:
    output = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}
    voice = {"mode": "id", "id": "af_heart"}
    return {"model_id": "sonic-2", "transcript": transcript, "voice": voice, "output_format": output, **fields}


def test_dictionaries_are_created_got_updated_listed_and_deleted(client: TestClient) -> None:
    items = [{"text": "Zorblax", "alias": ALIAS}, {"text": "Kokoro", "alias": "<<k|ˈoʊ|k|ə|ɹ|oʊ>>"}]
    created = PronunciationDict.model_validate(
        client.post(DICTS + "/", json={"name": "brands", "items": items}, headers=KEY).json()
    )
    assert [item.text for item in created.items] == ["zorblax", "kokoro"]  # case-insensitive, as Cartesia's default
    assert created.items[1].alias == "<<k|ˈ|O|k|ə|ɹ|O>>"  # phonemes, in Kokoro's symbols
    edit = {"items": [{"text": "GIF", "alias": "jif", "case_sensitive": True}]}
    updated = PronunciationDict.model_validate(client.patch(f"{DICTS}/{created.id}", json=edit, headers=KEY).json())
    assert updated.name == "brands" and updated.id == created.id
    got = PronunciationDict.model_validate(client.get(f"{DICTS}/{created.id}", headers=KEY).json())
    assert [(item.text, item.case_sensitive) for item in got.items] == [("GIF", True)]
    assert created.id in [d["id"] for d in client.get(DICTS + "/", headers=KEY).json()["data"]]
    assert client.delete(f"{DICTS}/{created.id}", headers=KEY).status_code == 204
    gone = client.get(f"{DICTS}/{created.id}", headers=KEY)
    assert gone.status_code == 404 and "dictionary_not_found" in gone.text


@pytest.mark.slow
def test_pronunciation_dict_id_is_honoured_on_bytes_sse_and_the_websocket(client: TestClient) -> None:
    made = client.post(
        DICTS + "/", json={"name": "brands", "items": [{"text": "Zorblax", "alias": ALIAS}]}, headers=KEY
    )
    created = PronunciationDict.model_validate(made.json())
    said = client.post("/cartesia/tts/bytes", json=body("Zorblax.", pronunciation_dict_id=created.id), headers=KEY)
    meant = client.post("/cartesia/tts/bytes", json=body(ALIAS + "."), headers=KEY)
    assert said.status_code == 200 and said.content == meant.content
    assert "x-ignored-parameters" not in said.headers
    url = "/cartesia/tts/websocket?api_key=sk-ca&cartesia_version=2025-04-16"
    with client.websocket_connect(url) as ws:
        ws.send_json({**body("Zorblax.", pronunciation_dict_id=created.id), "context_id": "c"})
        events = []
        while (event := ws.receive_json())["type"] not in ("done", "error"):
            events.append(event)
    heard = b"".join(base64.b64decode(e["data"]) for e in events if e["type"] == "chunk")
    assert event["type"] == "done" and abs(len(heard) - len(meant.content)) < 0.3 * len(meant.content)
    sse = client.post("/cartesia/tts/sse", json=body("Zorblax.", pronunciation_dict_id=created.id), headers=KEY)
    streamed = b"".join(base64.b64decode(e["data"]) for e in sse_events(sse.text) if e["type"] == "chunk")
    assert sse.status_code == 200 and streamed == meant.content
    unknown = client.post("/cartesia/tts/bytes", json=body("Hi.", pronunciation_dict_id="0" * 20), headers=KEY)
    assert unknown.status_code == 404 and "dictionary_not_found" in unknown.text
