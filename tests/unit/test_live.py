"""text/live_text.py: the phrases of a live request as text arrives (the routes themselves: test_server_live.py)."""

from __future__ import annotations

import pytest

from errors import InvalidInput, PayloadTooLarge
from text.chunking import Chunk, PhraseSegmenter
from text.languages import resolve_language
from text.live_text import LiveText
from text.normalize import read_english
from text.scripts import skip_unreadable
from text.spoken import Spoken


def live_text() -> tuple[LiveText, list[int]]:
    wakes: list[int] = []
    return LiveText(PhraseSegmenter(60, 120), 10_000, lambda: wakes.append(1)), wakes


def test_a_complete_clause_is_spoken_at_once_when_nothing_waits() -> None:
    text, wakes = live_text()
    text.add("Listeners hear the first words almost at once,")
    assert not text.ready()
    text.add(" while")  # the comma is decided, and no phrase of this request waits to be spoken
    assert text.ready() and wakes
    assert text.take() == (Chunk("Listeners hear the first words almost at once,", "clause"), False)


def test_clauses_are_packed_while_phrases_wait() -> None:
    text, _ = live_text()
    text.add("First things first. Then")
    assert text.ready()  # the first sentence waits to be spoken
    text.add(" the second part, which")
    text.add(" may go on for a while")  # a complete clause, but a phrase still waits: packing costs nobody
    assert text.take() == (Chunk("First things first.", "sentence"), False)
    text.add(" and on,")  # nothing waits any more: the complete clauses go, packed
    taken = text.take()
    assert taken == (Chunk("Then the second part,", "clause"), False)
    text.close()
    assert [text.take(), text.take(), text.take()] == [
        (Chunk("which may go on for a while and on,", "clause"), True),
        None,
        None,
    ]


def spoken_live(max_spoken_chars: int = 0) -> LiveText:
    """A live text read as Kokoro reads English: normalized, runs of other scripts skipped."""
    english = resolve_language("en")
    return LiveText(
        PhraseSegmenter(60, 120),
        10_000,
        lambda: None,
        speak=lambda text: read_english(skip_unreadable(Spoken.of(text), english)),
        max_spoken_chars=max_spoken_chars,
    )


def taken(text: LiveText) -> list[Chunk]:
    chunks = []
    while (item := text.take()) is not None:
        chunks.append(item[0])
    return chunks


def test_a_phrase_is_spoken_normalized_and_knows_its_written_words() -> None:
    text = spoken_live()
    text.add("It costs $4.50 today. And")
    assert text.take() == (
        Chunk("It costs four dollars and fifty cents today.", "sentence", "It costs $4.50 today."),
        False,
    )
    assert text.spoken_chars == len("It costs four dollars and fifty cents today.") and text.chars == 25


def test_a_phrase_longer_as_spoken_than_a_step_is_cut_again() -> None:
    text = spoken_live()
    text.add("Pay $999,999,999,999.99 now, or $999,999,999,999.99 later. ")
    text.add("Then $999,999,999,999.99 and $999,999,999,999.99 more.")
    text.close()
    chunks = taken(text)
    assert len(chunks) > 4 and all(len(chunk.text) <= 120 for chunk in chunks)  # 57 characters as written at most
    assert [chunk.pause for chunk in chunks].count("sentence") == 2 and chunks[-1].pause == "sentence"
    as_written = " ".join(chunk.text if chunk.written is None else chunk.written for chunk in chunks)
    assert (
        as_written.split()
        == "Pay $999,999,999,999.99 now, or $999,999,999,999.99 later. Then $999,999,999,999.99 and $999,999,999,999.99 more.".split()
    )


def test_the_running_total_counts_spoken_characters() -> None:
    text = spoken_live(max_spoken_chars=1_000)
    with pytest.raises(PayloadTooLarge) as refused:
        for _ in range(10):
            text.add("$999,999,999,999.99. ")
    assert refused.value.code == "spoken_too_long" and "POLYTTS_MAX_SPOKEN_CHARS" in refused.value.message
    assert text.chars < 250  # far below any limit as written


def test_a_phrase_of_a_script_the_voice_cannot_read_is_not_spoken() -> None:
    text = spoken_live()
    text.add("שלום עולם. Hello there. ")
    text.close()
    assert taken(text) == [Chunk("Hello there.", "sentence")]


def test_each_piece_is_cleaned_as_it_arrives() -> None:
    """Live text is cleaned as every route's text is (text.cleaning): format characters go, a lone surrogate is the
    request's `invalid_text` and adds nothing."""
    text, _ = live_text()
    text.add("Zero\u200bwidth wo\u2060rds.\ufeff And")
    assert text.take() == (Chunk("Zerowidth words.", "sentence"), False)
    assert text.chars == len("Zerowidth words. And")
    with pytest.raises(InvalidInput) as refused:
        text.add(" then \ud800 more")
    assert refused.value.code == "invalid_text" and text.chars == len("Zerowidth words. And")
    text.close()
    assert text.take() == (Chunk("And", "none"), True)  # the refused piece added nothing
