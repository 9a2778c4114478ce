"""Steps cut short: a planned chunk cut after one of its clauses (text.chunking.cut_short), the planned chunks of a
request (lifecycle.chunk_sources.PlannedChunks) and its job's plan of steps (gpu.jobs.Job) following the cut."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu.jobs import Job
from lifecycle.chunk_sources import PlannedChunks
from lifecycle.request_context import RequestContext
from lifecycle.service import Service
from tests.support.apps import kokoro_service
from text.chunking import Chunk, chunk_text, cut_short
from text.normalize import read_english
from text.spoken import Spoken
from web.fronts.shared.requests import TTSRequest

CHUNK = "Fishing boats leave first, the ferries follow them out, and the cargo ships wait for the tide to turn."


def test_a_chunk_is_cut_after_its_leading_clauses_and_joined_gives_it_back() -> None:
    text = (
        "Fishing boats leave first, the ferries follow them out, the tugs come last, and the cargo ships wait there "
        "for the tide to turn."
    )
    (chunk,) = chunk_text(text, 200, 200)
    assert [part.text for part in chunk.parts] == [
        "Fishing boats leave first,",
        "the ferries follow them out,",
        "the tugs come last,",
        "and the cargo ships wait there for the tide to turn.",
    ]
    cut = cut_short(chunk, 55)  # the first two clauses fit in 55 characters
    assert cut is not None
    head, rest = cut
    assert head == Chunk("Fishing boats leave first, the ferries follow them out,", "clause")
    assert rest == Chunk("the tugs come last, and the cargo ships wait there for the tide to turn.", "sentence")
    assert len(rest.parts) == 2
    assert f"{head.text} {rest.text}" == chunk.text and len(head.parts) == 2
    first = cut_short(chunk, 10)  # shorter than any clause: the first clause all the same
    assert first is not None and first[0].text == "Fishing boats leave first," and first[0].parts == ()


def test_a_cut_that_would_spare_less_than_half_a_short_step_is_not_made() -> None:
    (chunk,) = chunk_text(CHUNK, 120, 120)  # clauses of 26, 28 and 46 characters
    assert cut_short(chunk, 92) is not None  # 55 now, 46 later
    assert cut_short(chunk, 93) is None  # 55 now would leave 46, less than half such a step


def test_a_single_clause_is_never_cut() -> None:
    (chunk,) = chunk_text("A clause with many words and no mark in it anywhere to cut at", 120, 120)
    assert chunk.parts == () and cut_short(chunk, 10) is None


LONG_CLAUSE = (
    "The library at the end of the old harbour road keeps its reading room open late into the evening for anyone "
    "who wants a quiet place to sit"
)


def test_a_clause_longer_than_the_step_is_cut_inside_at_a_word_gap_only_when_asked() -> None:
    (chunk,) = chunk_text(f"{LONG_CLAUSE}, and then it closes its doors for the night.", 200, 200)
    assert [len(part.text) for part in chunk.parts] == [139, 43]
    cut = cut_short(chunk, 40)
    assert cut is not None and cut[0].text == f"{LONG_CLAUSE},"  # after the clause, however long it is
    rest, heads = chunk, []
    while (cut := cut_short(rest, 40, inside_clauses=True)) is not None:
        heads.append(cut[0])
        rest = cut[1]
    assert [head.text for head in heads] == [
        "The library at the end of the old",  # never after "the" or "of"
        "harbour road keeps its reading room open",
        "late into the evening for anyone",
        "who wants a quiet place to sit,",  # the clause's own end, once what is left of it fits
    ]
    assert [head.pause for head in heads] == ["none", "none", "none", "clause"]  # a word gap at each seam
    assert all(20 <= len(head.text) <= 40 for head in heads)
    assert rest == Chunk("and then it closes its doors for the night.", "sentence")
    assert " ".join([*(head.text for head in heads), rest.text]) == chunk.text


def test_a_single_clause_cut_inside_leaves_a_rest_worth_a_step() -> None:
    (chunk,) = chunk_text(LONG_CLAUSE, 200, 200)
    assert chunk.parts == () and cut_short(chunk, 100) is None
    cut = cut_short(chunk, 100, inside_clauses=True)
    assert cut is not None
    assert cut[0].text.endswith("open late") and 2 * len(cut[1].text) >= 100  # not 100: the rest would be too short
    assert cut_short(chunk, 200, inside_clauses=True) is None  # it fits: no cut


def test_a_chunk_given_back_is_taken_again_and_may_then_be_cut_inside_its_clause() -> None:
    chunks = PlannedChunks(chunk_text(f"{LONG_CLAUSE}, and then it closes its doors for the night.", 60, 200))
    first = chunks.take()
    taken = chunks.take()
    assert first is not None and taken is not None
    chunks.give_back()  # its step was stopped before its audio
    chunks.give_back()  # a second give-back with nothing taken since changes nothing
    again = chunks.take()
    assert again == taken
    chunks.give_back()
    assert chunks.shorten(40, inside_clauses=True) is not None  # a stream that yielded: inside the clause
    head = chunks.take()
    assert head is not None and head[0].pause == "none" and len(head[0].text) <= 40
    rest = chunks.take()
    assert rest is not None and f"{head[0].text} {rest[0].text}" == taken[0].text and rest[1] == taken[1]


def test_a_cut_inside_a_clause_never_splits_a_number_read_out_and_keeps_each_sides_written_text() -> None:
    spoken = read_english(Spoken.of("On the second day it cost $4.50 more to bring the big blue sofa up to the house"))
    (chunk,) = spoken.chunks(200, 200)
    pieces, rest = [], chunk
    while (cut := cut_short(rest, 30, inside_clauses=True)) is not None:
        pieces.append(cut[0])
        rest = cut[1]
    pieces.append(rest)
    assert [(p.text, p.written) for p in pieces] == [
        ("On the second day it cost", None),
        ("four dollars and fifty cents", "$4.50"),  # whole, with the text as written that it speaks
        ("more to bring the big blue", None),
        ("sofa up to the house", None),
    ]


def test_planned_chunks_plan_and_take_cuts_inside_clauses_only_when_told() -> None:
    chunks = chunk_text(f"Go. {LONG_CLAUSE}.", 60, 200)
    assert PlannedChunks(chunks).cut_steps(40) == [(3,), (139,)]
    inside = PlannedChunks(chunks, inside_clauses=True)
    assert inside.cut_steps(40) == [(3,), (33, 40, 32, 31)]
    inside.take()
    assert inside.shorten(40) == (33, 105)


def test_each_part_keeps_the_text_as_written_that_it_speaks() -> None:
    spoken = read_english(Spoken.of("It cost $4.50, then $12 more, and the rest was free."))
    (chunk,) = spoken.chunks(200, 200)
    cut = cut_short(chunk, 20)
    assert cut is not None
    head, rest = cut
    assert head.text == "It cost four dollars and fifty cents," and head.written == "It cost $4.50,"
    assert (
        rest.written is not None and rest.written.startswith("then $12 more,") and rest.text.startswith("then twelve")
    )


def test_sentences_without_spaces_between_them_are_cut_without_adding_one() -> None:
    _, chunk = chunk_text("今日は晴れです。明日は雨です。また明日。", 120, 120)
    cut = cut_short(chunk, 5)
    assert cut is not None and (cut[0].text, cut[1].text) == ("明日は雨です。", "また明日。")


def test_planned_chunks_and_the_job_follow_a_cut() -> None:
    chunks = PlannedChunks(chunk_text(f"The harbour opens at dawn. {CHUNK}", 60, 120))
    loop = asyncio.new_event_loop()
    try:
        job = Job(
            engine="kokoro",
            chars=sum(chunks.unit_chars),
            steps=lambda: iter([]),
            loop=loop,
            unit_chars=chunks.unit_chars,
            shorten=chunks.shorten,
        )
    finally:
        loop.close()
    assert job.unit_chars == (26, 102) and job.units_total == 2
    assert chunks.take() == (Chunk("The harbour opens at dawn.", "sentence"), False)
    job.units_done = 1
    assert job.cut_next_step(30)
    assert job.unit_chars == (26, 26, 75) and job.units_total == 3
    assert chunks.take() == (Chunk("Fishing boats leave first,", "clause"), False)
    job.units_done = 2
    assert job.cut_next_step(30) and job.unit_chars == (26, 26, 28, 46)
    job.units_done = 3
    assert chunks.take() == (Chunk("the ferries follow them out,", "clause"), False)
    assert not job.cut_next_step(30)  # one clause left: the step stays whole
    assert chunks.take() == (Chunk("and the cargo ships wait for the tide to turn.", "sentence"), True)
    assert chunks.take() is None


@pytest.fixture
def one_lane(tmp_path: Path, assembled_model: Path) -> Iterator[Service]:
    """The service on the real engine, one step at a time, cutting any step longer than 0.1 s of GPU time."""
    with kokoro_service(tmp_path, assembled_model, onnx_parallel_steps=1, short_step_s=0.1) as built:
        yield built


@pytest.mark.slow
async def test_a_stream_cut_short_is_cached_under_its_requests_key(one_lane: Service) -> None:
    text = f"The harbour opens at dawn. {CHUNK}"
    request = TTSRequest(text=text, language="en")
    streaming = RequestContext("test", principal="test", streaming=True)
    speech = await one_lane.synthesis.speak(request, streaming)
    pcm = b"".join([piece async for piece in speech.pcm()])
    planned = await one_lane.synthesis.planner.plan(request)
    assert [len(c.text) for c in planned.chunks] == [26, 102]
    assert speech.job is not None and speech.job.unit_chars[:2] == (26, 26)  # its second chunk was cut after a clause
    # The same request finds it: how the scheduler cut the steps is not the client's to know.
    assert planned.cache_key is not None and one_lane.synthesis.memory_cache.get(planned.cache_key) == pcm
