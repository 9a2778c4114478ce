"""Where a synthesis's chunks come from, taken in order by the GPU thread: planned from the whole text
(`PlannedChunks`), or cut from a live request's text as it arrives (text.live_text.LiveText)."""

from __future__ import annotations

import collections
from typing import Protocol

from text.chunking import Chunk, cut_short


class ChunkSource(Protocol):
    """The chunks of one synthesis, as its job's steps take them (`PlannedChunks` or `LiveText`)."""

    @property
    def unit_chars(self) -> tuple[int, ...]:
        """Characters of each chunk, when all are known in advance (admission's estimate of the work); else ()."""
        ...

    def ready(self) -> bool:
        """Whether a chunk, or the end, can be taken now: a job with none holds no step of the GPU thread."""
        ...

    def take(self) -> tuple[Chunk, bool] | None:
        """The next chunk and whether it is known to be the last; None once there are no more."""
        ...

    def give_back(self) -> None:
        """The chunk taken last comes first again: its step was stopped before it delivered any audio (an arrival
        went first), and the next take gives it again, or the head of it where the scheduler cuts it short first."""
        ...


class PlannedChunks:
    """The chunks of a text planned whole (`chunk_text`): all known, always ready; the next one may be cut short at
    one of its clauses (`shorten`) when the scheduler wants a shorter step, or inside a long clause at a word gap
    (`inside_clauses`: POLYTTS_SHORT_STEP_WORD_CUTS)."""

    def __init__(self, chunks: list[Chunk], inside_clauses: bool = False) -> None:
        self.unit_chars = tuple(len(chunk.text) for chunk in chunks)
        self._chunks = collections.deque(chunks)
        self._inside = inside_clauses
        self._taken: Chunk | None = None

    def ready(self) -> bool:
        return True

    def take(self) -> tuple[Chunk, bool] | None:
        if not self._chunks:
            return None
        chunk = self._taken = self._chunks.popleft()
        return chunk, not self._chunks

    def give_back(self) -> None:
        if self._taken is not None:
            self._chunks.appendleft(self._taken)
            self._taken = None

    def shorten(self, max_chars: int, inside_clauses: bool = False) -> tuple[int, int] | None:
        """Cut the next chunk after its leading clauses (or words) within `max_chars` (`cut_short`): the characters of
        the two chunks it becomes; None where it cannot be. `inside_clauses`: a word gap inside a clause will do for
        this cut, whatever POLYTTS_SHORT_STEP_WORD_CUTS says (a stream that gave its step to a newcomer)."""
        cut = cut_short(self._chunks[0], max_chars, self._inside or inside_clauses) if self._chunks else None
        if cut is None:
            return None
        head, rest = cut
        self._chunks[0] = rest
        self._chunks.appendleft(head)
        return len(head.text), len(rest.text)

    def cut_steps(self, max_chars: int) -> list[tuple[int, ...]]:
        """For each chunk not taken yet, the characters of the steps it becomes when `shorten` cuts it at each."""
        steps = []
        for chunk in tuple(self._chunks):  # a copy: the GPU thread may be taking one
            sizes = []
            while (cut := cut_short(chunk, max_chars, self._inside)) is not None:
                sizes.append(len(cut[0].text))
                chunk = cut[1]
            steps.append((*sizes, len(chunk.text)))
        return steps
