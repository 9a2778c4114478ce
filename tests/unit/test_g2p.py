"""Grapheme-to-phoneme routes: the English route choice, espeak languages, Japanese through pyopenjtalk, Chinese
through misaki, and what a node lacking a route's package says."""

from __future__ import annotations

import importlib.util
from importlib.machinery import ModuleSpec
from typing import Any

import pytest

from engines.g2p import G2P, choose_english_route
from text.languages import resolve_language


def test_english_route_is_misaki_only_with_its_spacy_model(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    installed = {"misaki": True, "en_core_web_sm": True}

    def find_spec(name: str, *args: Any) -> ModuleSpec | None:
        if name in installed:
            return real("json") if installed[name] else None
        return real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    assert choose_english_route() == "misaki"
    installed["en_core_web_sm"] = False
    assert choose_english_route() == "espeak"
    installed["misaki"], installed["en_core_web_sm"] = False, True
    assert choose_english_route() == "espeak"


def test_this_host_uses_espeak_for_english() -> None:
    assert choose_english_route() == "espeak"  # en_core_web_sm is not on PyPI, so it is never installed here


@pytest.mark.parametrize(
    ("language", "text", "expected"),
    [
        ("en", "Hello world.", "həlˈoʊ"),
        ("en-gb", "Hello world.", "həlˈəʊ"),
        ("es", "Hola.", "ˈola"),
        ("fr", "Bonjour.", "bɔ̃ʒˈuʁ"),
        ("zh", "你好", "ni"),
        ("ja", "こんにちは", "koɲɲiʨiβa"),  # OpenJTalk's reading, in the cutlet romanization Kokoro was trained on
        ("ja", "東京", "toːkʲoː"),  # kanji from the dictionary inside pyopenjtalk-plus's wheel, never downloaded
    ],
)
@pytest.mark.slow
def test_phonemes_per_language(language: str, text: str, expected: str) -> None:
    phonemes = G2P("espeak").phonemize(text, resolve_language(language))
    assert expected in phonemes, phonemes


def test_routes_are_built_once_per_language() -> None:
    g2p = G2P("espeak")
    english = resolve_language("en")
    g2p.phonemize("One.", english)
    route = g2p._routes["en-us"]
    g2p.phonemize("Two.", english)
    assert g2p._routes["en-us"] is route
    assert g2p.describe()["english"] == "espeak"


def test_every_stock_language_has_its_route_on_the_default_install() -> None:
    described = G2P("espeak").describe()
    assert described["missing"] == {}
    assert described["routes"] == {
        "espeak-ng": ["en-gb", "en-us", "es", "fr-fr", "hi", "it", "pt-br"],
        "pyopenjtalk": ["ja"],
        "misaki zh": ["zh"],
    }


def test_a_language_whose_package_is_missing_is_named_with_its_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "jieba" else real(name, *a))
    described = G2P("espeak").describe()
    assert described["missing"] == {"zh": "pip install 'misaki[zh]'"}
    assert "zh" not in str(described["routes"])
