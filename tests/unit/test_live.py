"""text/live_text.py: the phrases of a live request as text arrives (the routes themselves: test_server_live.py)."""

from __future__ import annotations

from text.chunking import Chunk, PhraseSegmenter
from text.live_text import LiveText


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
