"""Text chunking and language mapping."""

from __future__ import annotations

import pytest

from errors import InvalidInput
from text import chunk_text, normalize_text, resolve_language, split_sentences


def test_sentences_split_on_end_marks_and_lines() -> None:
    assert split_sentences("One. Two!  Three?\nFour") == ["One.", "Two!", "Three?", "Four"]
    assert split_sentences("今日は晴れ。明日は雨！") == ["今日は晴れ。", "明日は雨！"]
    assert split_sentences("Dr.Who is 3.5 m tall.") == ["Dr.Who is 3.5 m tall."]  # no space: not a boundary


def test_normalize_collapses_spaces_but_keeps_lines() -> None:
    assert normalize_text("  a \t b \n\n c  ") == "a b\nc"


def test_first_chunk_is_short_and_the_rest_respect_the_cap() -> None:
    text = (
        "Hello there, this first sentence runs on for quite a while, and it keeps going well past the cap. "
        + " ".join(f"Sentence {i} is here." for i in range(30))
    )
    chunks = chunk_text(text, 40, 120)
    assert len(chunks[0]) <= 40
    assert all(len(c) <= 120 for c in chunks)
    assert " ".join(chunks).split() == text.split()  # nothing lost, nothing reordered


def test_sentences_are_packed_up_to_the_cap() -> None:
    chunks = chunk_text("A. B. C. D. E.", 10, 6)
    assert chunks == ["A.", "B. C.", "D. E."]


def test_long_words_and_unspaced_text_are_cut_hard() -> None:
    assert chunk_text("x" * 25, 10, 10) == ["x" * 10, "x" * 10, "x" * 5]
    japanese = "あ" * 30 + "。"
    chunks = chunk_text(japanese, 8, 12)
    assert "".join(chunks) == japanese and max(map(len, chunks)) <= 12 and len(chunks[0]) <= 8


def test_clause_marks_are_preferred_to_spaces() -> None:
    chunks = chunk_text("one two three, four five six seven eight nine", 20, 100)
    assert chunks[0] == "one two three,"


def test_empty_text_has_no_chunks() -> None:
    assert chunk_text(" \n ", 10, 20) == []


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (None, "en-us"), ("en", "en-us"), ("EN_us", "en-us"), ("English", "en-us"), ("a", "en-us"),
        ("en-GB", "en-gb"), ("British English", "en-gb"), ("es", "es"), ("French", "fr-fr"), ("pt", "pt-br"),
        ("hi", "hi"), ("it", "it"),
    ],
)  # fmt: skip
def test_language_codes_map_to_one_language(code: str | None, expected: str) -> None:
    assert resolve_language(code).code == expected


def test_unknown_language_lists_what_is_accepted() -> None:
    with pytest.raises(InvalidInput) as err:
        resolve_language("klingon")
    assert err.value.code == "unsupported_language" and "en-us" in err.value.message


def test_language_without_its_g2p_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyopenjtalk" else real(name, *a))
    with pytest.raises(InvalidInput) as err:
        resolve_language("Japanese")
    assert err.value.status == 422 and err.value.code == "language_not_installed"
    assert "pip install pyopenjtalk-plus" in err.value.message


def test_sentence_cap_and_unlimited_caps() -> None:
    text = "One. Two. Three. Four. Five. Six. Seven."
    assert chunk_text(text, 100, 100, max_sentences=3) == ["One.", "Two. Three. Four.", "Five. Six. Seven."]
    assert chunk_text(text, 0, 0, max_sentences=0) == ["One.", "Two. Three. Four. Five. Six. Seven."]
    assert chunk_text(text, 0, 12, max_sentences=0) == ["One.", "Two. Three.", "Four. Five.", "Six. Seven."]
    long = "word " * 100
    assert chunk_text(long, 0, 0) == [long.strip()]
