"""text/cleaning.py: the one cleaning every request's text goes through, whole or live."""

from __future__ import annotations

import json

import pytest

from errors import InvalidInput
from text.cleaning import clean_text, visible_text

FORMAT_CHARACTERS = "\u200b\u200c\u200d\u2060\ufeff\u200e\u200f\u00ad"
"""Zero-width space, non-joiner and joiner, word joiner, byte order mark, direction marks, soft hyphen: category Cf."""


@pytest.mark.parametrize("text", ["lone \ud800 high", "lone \udfff low", "\udc00", "a\ud83d", "\ude00b"])
def test_a_lone_surrogate_is_refused_as_invalid_text(text: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        clean_text(text)
    assert refused.value.code == "invalid_text" and refused.value.status == 422
    assert "surrogate" in refused.value.message


def test_a_surrogate_pair_sent_as_json_escapes_is_one_character_and_kept() -> None:
    text = json.loads('"smile \\ud83d\\ude00"')  # what a JSON body holds: one astral character
    assert clean_text(text) == "smile \U0001f600"


def test_format_characters_are_removed_and_everything_else_kept() -> None:
    assert clean_text(f"Zero{FORMAT_CHARACTERS}width") == "Zerowidth"
    assert clean_text(FORMAT_CHARACTERS) == ""
    kept = "  Hello,\tworld!\n\nNaïve café, 你好, שלום, 🙂 $4.50 "
    assert clean_text(kept) == kept  # whitespace too: collapsing it is chunking's business


def test_cleaning_pieces_one_by_one_cleans_the_whole() -> None:
    """A live request's text is cleaned piece by piece as it arrives: the same text as the whole cleaned at once."""
    pieces = ["Zero\u200b", "\u2060width ", "wo\ufeffrds", "."]
    assert "".join(clean_text(piece) for piece in pieces) == clean_text("".join(pieces)) == "Zerowidth words."


def test_visible_text_drops_what_clean_text_refuses_and_never_raises() -> None:
    """For text read without a request to answer (the English reader's `normalize_english`)."""
    assert visible_text(f"a\ud800b{FORMAT_CHARACTERS}c\udfff ") == "abc "
    assert visible_text("Zero\u200bwidth") == clean_text("Zero\u200bwidth")
