"""Default lexicons in this process: the node's (POLYTTS_DEFAULT_LEXICONS) apply to every request, an API key's
(POLYTTS_KEY_LEXICONS, by the key's name) to that key's requests, before the node's and after the request's own."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from lexicons.rules import read_rules
from tests.support.apps import InProcessApp

NODE_RULES = json.dumps([{"grapheme": "Zorblax", "alias": "node word"}]).encode()
KEY_RULES = json.dumps([{"grapheme": "Zorblax", "alias": "key word"}]).encode()
NODE_ID = read_rules(NODE_RULES, "", 10).lexicon_id
KEY_ID = read_rules(KEY_RULES, "", 10).lexicon_id


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[InProcessApp]:
    env = {
        "POLYTTS_API_KEYS": json.dumps({"sk-a": "alice", "sk-b": "bob"}),
        "POLYTTS_DEFAULT_LEXICONS": NODE_ID,
        "POLYTTS_KEY_LEXICONS": json.dumps({"alice": [KEY_ID]}),
    }
    with InProcessApp(tmp_path_factory.mktemp("defaults"), **env) as running:
        yield running


@pytest.mark.slow
def test_the_node_and_key_defaults_apply_in_their_order(app: InProcessApp) -> None:
    client = app.client
    alice, bob = {"Authorization": "Bearer sk-a"}, {"Authorization": "Bearer sk-b"}
    missing = client.post("/tts", json={"text": "Zorblax."}, headers=bob)
    assert (missing.status_code, missing.json()["code"]) == (404, "lexicon_not_found")  # named, never skipped
    for rules in (NODE_RULES, KEY_RULES):
        assert client.post("/lexicons", content=rules, headers=alice).status_code == 201

    def said(text: str, headers: dict[str, str], **fields: object) -> bytes:
        response = client.post("/tts", json={"text": text, "voice": "af_heart", **fields}, headers=headers)
        assert response.status_code == 200, response.text
        return response.content

    assert said("Zorblax.", bob) == said("node word.", bob)
    assert said("Zorblax.", alice) == said("key word.", alice)
    own = read_rules(json.dumps([{"grapheme": "Zorblax", "alias": "own word"}]).encode(), "", 10)
    client.post("/lexicons", json=[{"grapheme": "Zorblax", "alias": "own word"}], headers=alice)
    assert said("Zorblax.", alice, lexicons=[own.lexicon_id]) == said("own word.", alice)
