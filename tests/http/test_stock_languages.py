"""Every voice the node lists can speak in its own language on the default install: its language's G2P is there, so
none answers 422 for want of it (Japanese and Chinese voices did while pyopenjtalk-plus and misaki[zh] were
optional); a node set up without one names the language and the command that adds it."""

from __future__ import annotations

import importlib.util

import pytest
from fastapi.testclient import TestClient

from text.languages import resolve_language

STOCK_LANGUAGES = {"en-us", "en-gb", "es", "fr-fr", "hi", "it", "pt-br", "ja", "zh"}


def test_every_listed_voice_has_its_languages_g2p(client: TestClient) -> None:
    """Each listed voice's language has its G2P here (the plan refuses one that lacks it before any audio). A voice
    of each language speaking over HTTP is tests/e2e/test_server_kokoro_voices.py's, every stock voice's audio
    tests/unit/test_kokoro.py's."""
    native = {v["voice_id"]: v["language"] for v in client.get("/voices").json()["voices"] if v["builtin"]}
    openai = {v["id"]: v["language"] for v in client.get("/v1/audio/voices").json()["data"] if v["engine"] == "kokoro"}
    assert set(native) == set(client.get("/health").json()["voices"]["builtin"]) and set(native) <= set(openai)
    listed = native | openai
    assert set(listed.values()) == STOCK_LANGUAGES
    for name, language in listed.items():
        assert resolve_language(language).missing_package() is None, name


def test_health_names_no_missing_g2p(client: TestClient) -> None:
    client.post("/tts", json={"text": "こんにちは。", "voice": "jf_alpha"})  # loaded: /health describes its G2P
    g2p = client.get("/health").json()["engines"]["kokoro"]["g2p"]
    assert g2p["missing"] == {} and g2p["routes"]["pyopenjtalk"] == ["ja"] and g2p["routes"]["misaki zh"] == ["zh"]


def test_a_node_without_a_languages_g2p_names_it_and_its_install_command(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyopenjtalk" else real(name, *a))
    client.post("/tts", json={"text": "Load me.", "voice": "af_heart"})
    assert client.get("/health").json()["engines"]["kokoro"]["g2p"]["missing"] == {"ja": "pip install pyopenjtalk-plus"}
    for route in ("/tts", "/tts/stream"):
        refused = client.post(route, json={"text": "こんにちは", "voice": "jf_alpha"})
        assert refused.status_code == 422 and refused.json()["code"] == "language_not_installed"
        assert "pip install pyopenjtalk-plus" in refused.json()["message"]
