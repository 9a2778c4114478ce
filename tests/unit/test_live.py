"""text/live_text.py: the phrases of a live request as text arrives (the routes themselves: test_server_live.py)."""

from __future__ import annotations

import pytest

from errors import InvalidInput, PayloadTooLarge
from text.chunking import Chunk, PhraseSegmenter
from text.languages import resolve_language
from text.live_text import LiveText, joinable
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


def test_phrases_queued_before_a_step_are_one_step_within_the_cap() -> None:
    """A producer flushing word by word while the engine is busy: the words queued when the next step starts are
    spoken in that step (each step costs as much again as its audio), never more than a phrase's cap, and the flush
    marks still count phrases (Cartesia answers `flush_done` once the step that spoke its phrases is out)."""
    text, _ = live_text()
    words = [f"word{index}" for index in range(100)]
    for word in words:
        text.add(word)
        text.flush()
    text.close()
    steps = taken(text)
    assert len(steps) < 10 and " ".join(step.text for step in steps).split() == words
    assert len(steps[0].text) <= 60 and all(len(step.text) <= 120 for step in steps)  # the first cap, then 120
    assert [len(step.parts) for step in steps] == [len(step.text.split()) for step in steps]
    assert text.flush_marks == list(range(1, 101)) and text.phrases_in(len(steps)) == 100
    assert text.phrases_in(1) == len(steps[0].text.split()) and text.phrases_in(0) == 0


def test_phrases_taken_as_they_come_stay_steps_of_their_own() -> None:
    text, _ = live_text()
    said = []
    for word in ("One", "two", "three"):
        text.add(word)
        text.flush()
        step = text.take()  # an idle engine takes each phrase as it comes
        assert step is not None
        said.append(step[0].text)
    assert said == ["One", "two", "three"] and text.phrases_in(3) == 3


def test_a_step_given_back_is_taken_again_with_what_came_since_and_its_phrases_still_counted() -> None:
    """A step stopped before its audio (a newcomer went first) gives its phrases back: the next take gives them
    again, with a phrase that came meanwhile where it may join them, and the flush marks still count phrases."""
    text, _ = live_text()
    for word in ("One", "two"):
        text.add(word)
        text.flush()
    first = text.take()
    assert first is not None and first[0].text == "One two" and text.phrases_in(1) == 2
    text.add("three")
    text.flush()
    text.give_back()
    assert text.taken == [] and text.phrases_in(0) == 0
    text.close()
    again = text.take()
    assert again is not None and again == (Chunk("One two three", "none", parts=again[0].parts), True)
    assert text.phrases_in(1) == 3 and text.flush_marks == [1, 2, 3] and text.take() is None


@pytest.mark.parametrize(
    ("first", "then"),
    [
        (Chunk("Hello", "none", silence=0.5), Chunk("there", "none")),  # a break after the first
        (Chunk("Hello", "none"), Chunk("there", "none", lead=0.5)),  # a break before the next
        (Chunk("Hello", "none"), Chunk("there", "none", rate=1.5)),  # another rate
        (Chunk("Hello", "none"), Chunk("there", "none", language="fr")),  # another language
        (Chunk("Hello", "none"), Chunk("there", "none", voice="am_adam")),  # another voice
        (Chunk("Hello " * 10, "none"), Chunk("there " * 15, "none")),  # past the cap
    ],
)
def test_phrases_are_never_joined_across_a_break_or_a_change(first: Chunk, then: Chunk) -> None:
    assert not joinable(first, then, 120)
    assert joinable(first, Chunk("there", "none"), 120) == (first.silence is None and len(first.text) < 110)


def test_joined_phrases_keep_their_words_as_written_and_the_last_boundary() -> None:
    text = spoken_live()
    text.add("It costs $4.50")
    text.flush()
    text.add(" today. Thanks")
    text.flush()
    text.close()
    (step,) = taken(text)
    assert step.text == "It costs four dollars and fifty cents today. Thanks"
    assert step.written == "It costs $4.50 today. Thanks" and step.pause == "none"
