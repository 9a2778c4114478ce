"""Every voice the node lists speaks, in its own language, on the default install: none answers 422 for want of its
language's G2P (Japanese and Chinese voices did while pyopenjtalk-plus and misaki[zh] were optional); a node set up
without one names the language and the command that adds it."""

from __future__ import annotations

import importlib.util

import pytest
from fastapi.testclient import TestClient

from text.languages import resolve_language

PHRASES = {
    "en-us": "Hello.",
    "en-gb": "Hello.",
    "es": "Hola.",
    "fr-fr": "Bonjour.",
    "hi": "नमस्ते।",
    "it": "Ciao.",
    "pt-br": "Olá.",
    "ja": "こんにちは。",
    "zh": "你好。",
}


@pytest.mark.slow
def test_every_listed_voice_speaks_in_its_language(client: TestClient) -> None:
    """Each listed voice's language has its G2P here (the plan refuses one that lacks it before any audio), and a
    voice of each language speaks through /tts; every stock voice's audio is checked in-process (test_kokoro.py)."""
    native = {v["voice_id"]: v["language"] for v in client.get("/voices").json()["voices"] if v["builtin"]}
    openai = {v["id"]: v["language"] for v in client.get("/v1/audio/voices").json()["data"] if v["engine"] == "kokoro"}
    assert set(native) == set(client.get("/health").json()["voices"]["builtin"]) and set(native) <= set(openai)
    listed = native | openai
    assert set(listed.values()) == set(PHRASES)  # all nine stock languages
    for name, language in listed.items():
        assert resolve_language(language).missing_package() is None, name
    for language in PHRASES:
        name = next(name for name, spoken in listed.items() if spoken == language)
        response = client.post("/tts", json={"text": PHRASES[language], "voice": name})
        assert response.status_code == 200, (name, response.text)
        assert len(response.content) > 44 + 2 * 4800, name  # more than 0.2 s of 24 kHz audio


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
