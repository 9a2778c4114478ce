"""The text of a live request, cut into phrases as it arrives while a language model writes it.

Each piece of text is cleaned as it arrives, as every route's text is (text/cleaning.py). Each complete phrase is cut
by the same rules as every other request's text (`PhraseSegmenter`: no break inside a phrase) and waits, in order,
for the GPU thread to take it. While none of the request's phrases waits to be spoken, a clause is released as soon
as it is complete; while some wait, clauses are packed as on the other routes. Each phrase is rewritten as the engine
says it (`Engine.spoken_text`) when it is cut: the limits count it as spoken, and a phrase longer as spoken than the
cap it was cut for is cut again, so that one step stays one step's worth of audio. Phrases that queue up before the
GPU thread takes the next one (a producer flushing word by word while the engine is busy) are taken as one step, up
to the cap, never across a break or a change of voice, rate or language (`take`).
Live text may be SSML (text/live_ssml.py), read tag by tag as it arrives, so that a tag split across messages is
whole before it is read and the segmenter never cuts inside one: a `<break>` ends the phrase before it with exactly
that silence (or, when that phrase is already being spoken, comes before the next, or ends the audio as a silence
of its own when no text follows), a `<prosody rate>`, `<lang>` or `<voice name>` ends one and speaks what follows at
its rate, in its language or by its voice (checked as it arrives, before any phrase in it is cut).
The messages that carry the text, and their timeouts, are the web layer's (web/fronts/shared/live.py).
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from collections.abc import Callable

from errors import InvalidInput, PayloadTooLarge
from text.chunking import Chunk, PhraseSegmenter, is_speakable
from text.cleaning import clean_text
from text.live_ssml import LiveSsml, Mark
from text.spoken import Edit, Spoken, check_spoken_length
from text.ssml import is_ssml

Pronounce = Callable[[str, list[Edit], str | None, float | None], Spoken]
"""A phrase of SSML as the engine says it: its text as written, its elements' edits, its language and its rate (None:
the request's)."""


class LiveText:
    """The phrases of one live request: cut from text as it arrives (on the event loop), taken in order by the GPU
    thread. `ready()` says whether the job has a step to take (a phrase, or the end of the text)."""

    unit_chars: tuple[int, ...] = ()
    """The phrases are not known in advance (admission plans the request without them)."""

    def __init__(
        self,
        segmenter: PhraseSegmenter,
        max_chars: int,
        wake: Callable[[], None],
        speak: Callable[[str], Spoken] = Spoken.of,
        max_spoken_chars: int = 0,
        pronounce: Pronounce | None = None,
        ssml: bool | None = None,
        english: bool = True,
        voice: Callable[[str], None] | None = None,
    ) -> None:
        """`speak`: a phrase as the engine will say it (`Engine.spoken_text` with the request's options);
        `max_chars` and `max_spoken_chars` (0: no limit) bound all the request's text, as written and as spoken.
        `pronounce`: a phrase of SSML as the engine says it (None: the text is never read as SSML); `ssml` True:
        the text is SSML without a `<speak>` of its own (ElevenLabs' `enable_ssml_parsing`), None: when it begins
        with `<speak`; `english`: SSML spells letters out by their English names; `voice`: checks the name an SSML
        `<voice>` gives, raising where it is no voice the request may switch to (None: any name is refused)."""
        self._segmenter = segmenter
        self._max_chars = max_chars
        self._wake = wake
        self._speak = speak
        self._max_spoken_chars = max_spoken_chars
        self._chunks: collections.deque[Chunk] = collections.deque()
        self._closed = False
        self._lock = threading.Lock()
        self._started = False
        """Whether a phrase is queued yet: the first may be as long as the first chunk may, later ones the cap."""
        self.chars = 0
        self.spoken_chars = 0
        self.taken: list[Chunk] = []
        """Phrases the GPU thread has taken, in order (for the request's log line)."""
        self.cut = 0
        """Phrases cut so far (taken or waiting)."""
        self._phrases_taken: list[int] = []
        """For each step taken, the phrases taken by its end (a step may speak several: `take`)."""
        self._given_back = 0
        """Phrases of the step given back (`give_back`), now the first chunk: it counts as that many when taken."""
        self.flush_marks: list[int] = []
        """For each flush so far, the phrases cut by its end: once that many phrases are spoken, so is everything
        sent before it (Cartesia's `flush_done`)."""
        self._pronounce = pronounce
        self._ssml: LiveSsml | None = LiveSsml(english) if pronounce is not None and ssml else None
        self._undecided = "" if pronounce is not None and ssml is None else None
        """Text held until it says whether it is SSML (it may begin `<spe` and end `ak>` in the next message)."""
        self._lead = 0.0
        """Silence of a break that comes before the next phrase."""
        self._english = english
        self._rate: float | None = None
        self._language: str | None = None
        self._voice: str | None = None
        """The rate, language and voice of the phrases cut now (SSML's `<prosody>`, `<lang>` and `<voice>`)."""
        self._check_voice = voice

    @property
    def pending(self) -> bool:
        """Text received that is not a phrase yet."""
        return bool(self._segmenter.pending.strip())

    def add(self, text: str) -> None:
        """Text as it arrives, cleaned as every route's text is (`clean_text`: a lone surrogate is `invalid_text`)."""
        text = clean_text(text)
        self.chars += len(text)
        if self.chars > self._max_chars:
            raise PayloadTooLarge(
                f"a live request may carry at most {self._max_chars} characters of text (POLYTTS_MAX_TEXT_CHARS)",
                code="text_too_long",
            )
        if self._undecided is not None:
            head = (self._undecided + text).lstrip()
            if not head or "<speak".startswith(head[:6]) and len(head) < 7:
                self._undecided = head
                return
            self._undecided = None
            self._ssml = LiveSsml(self._english) if is_ssml(head) else None
            text = head
        if self._ssml is None:
            self._feed(text)
            return
        for piece in self._ssml.feed(text):
            if isinstance(piece, Mark):
                self._mark(piece)
            else:
                self._feed(piece)

    def _feed(self, text: str) -> None:
        chunks = self._segmenter.feed(text)
        if not chunks and self._starved():
            chunks = self._segmenter.release()
        self._put(chunks)

    def _mark(self, mark: Mark) -> None:
        """A break, or another rate, language or voice: what is pending is a phrase of its own, then the mark
        applies."""
        if mark.voice is not None and mark.voice != self._voice:
            self._checked_voice(mark.voice)
        self._put(self._segmenter.flush())
        self._rate, self._language, self._voice = mark.rate, mark.language, mark.voice
        if not mark.silence:
            return
        with self._lock:
            if self._chunks:
                last = self._chunks[-1]
                self._chunks[-1] = dataclasses.replace(last, silence=(last.silence or 0.0) + mark.silence)
                return
        self._lead += mark.silence

    def _checked_voice(self, name: str) -> None:
        if self._check_voice is None:
            raise InvalidInput(
                f"SSML <voice name={name[:40]!r}>: this request cannot switch voices",
                code="invalid_ssml",
                detail={"element": "voice", "voice": name[:40]},
            )
        self._check_voice(name)

    def _starved(self) -> bool:
        """Nothing of this request waits to be spoken: a complete clause goes now rather than wait for the rest of
        its sentence to decide the packing (with phrases queued, packing costs the listener nothing)."""
        with self._lock:
            return not self._chunks

    def flush(self) -> None:
        self._put(self._segmenter.flush())
        self.flush_marks.append(self.cut)

    def close(self) -> None:
        """The end of the text: what is pending is spoken, then the job ends."""
        held, self._undecided = self._undecided, None
        if held:
            self._feed(held)
        if self._ssml is not None:
            self._ssml.close()
        chunks = self._as_spoken(self._segmenter.flush())
        if self._lead and self._started and not chunks:
            # A break after the last phrase had been taken: no phrase is left to carry it, so it is a silence of its
            # own, exact as a leading one is.
            chunks = [Chunk("", "none", lead=self._lead)]
        self._lead = 0.0
        self.cut += len(chunks)
        with self._lock:
            self._chunks.extend(chunks)
            self._closed = True
        self._wake()

    def _put(self, chunks: list[Chunk]) -> None:
        chunks = self._as_spoken(chunks)
        self.cut += len(chunks)
        if chunks:
            with self._lock:
                self._chunks.extend(chunks)
            self._wake()

    def _as_spoken(self, phrases: list[Chunk]) -> list[Chunk]:
        """The phrases as the engine says them, within the spoken limit; one longer as spoken than a phrase may be
        (`PhraseSegmenter.longest`) is cut again by `chunk_text`'s rules, its last part ending as the phrase did, and
        one with nothing left to say (a script the voice cannot read) is dropped."""
        chunks: list[Chunk] = []
        for phrase in phrases:
            spoken = self._spoken(phrase.text)
            self.spoken_chars += len(spoken.text)
            if self._max_spoken_chars:
                check_spoken_length(self.chars, self.spoken_chars, self._max_spoken_chars, "a live request's text")
            if not is_speakable(spoken.text):
                continue
            first, self._started = not self._started, True
            segmenter = self._segmenter
            if len(spoken.text) <= segmenter.longest(first):
                written = None if spoken.text == spoken.written else spoken.written
                parts = [Chunk(spoken.text, phrase.pause, written)]
            else:
                cap = segmenter.max_chunk_chars
                parts = spoken.chunks(segmenter.first_chunk_chars if first else cap, cap)
                parts[-1] = dataclasses.replace(parts[-1], pause=phrase.pause)
            if (self._rate, self._language, self._voice) != (None, None, None):
                parts = [
                    dataclasses.replace(part, rate=self._rate, language=self._language, voice=self._voice)
                    for part in parts
                ]
            if self._lead:
                parts[0], self._lead = dataclasses.replace(parts[0], lead=self._lead), 0.0
            chunks += parts
        return chunks

    def _spoken(self, phrase: str) -> Spoken:
        if self._ssml is None or self._pronounce is None:
            return self._speak(phrase)
        written, edits = self._ssml.expand(phrase)
        return self._pronounce(written, edits, self._language, self._rate)

    def ready(self) -> bool:
        with self._lock:
            return bool(self._chunks) or self._closed

    def take(self) -> tuple[Chunk, bool] | None:
        """The next step's phrase and whether it is known to be the last; None once the text has ended. Phrases that
        have queued up meanwhile (a producer flushing word by word while the engine was busy) are one step, as long
        as they fit a phrase's cap and nothing between them forbids it (`joinable`): each step costs the engine as
        much again as its audio, so 100 one-word steps took twice their audio's length."""
        with self._lock:
            if not self._chunks:
                return None
            chunk = self._chunks.popleft()
            phrases, self._given_back = self._given_back or 1, 0
            cap = self._segmenter.aim(not self.taken)  # a first step no longer than it aims at: the first audio
            while self._chunks and joinable(chunk, self._chunks[0], cap):
                chunk = together(chunk, self._chunks.popleft())
                phrases += 1
            self.taken.append(chunk)
            self._phrases_taken.append((self._phrases_taken[-1] if self._phrases_taken else 0) + phrases)
            return chunk, self._closed and not self._chunks

    def give_back(self) -> None:
        """The step taken last comes first again (its step was stopped before it delivered any audio): the next take
        gives it again, with any phrase that has come since and may join it."""
        with self._lock:
            if self.taken:
                self._chunks.appendleft(self.taken.pop())
                last = self._phrases_taken.pop()
                self._given_back = last - (self._phrases_taken[-1] if self._phrases_taken else 0)

    def phrases_in(self, steps: int) -> int:
        """How many phrases (as `cut` and `flush_marks` count them) the first `steps` steps taken have spoken."""
        with self._lock:
            return self._phrases_taken[steps - 1] if steps else 0


def joinable(first: Chunk, then: Chunk, cap: int) -> bool:
    """Whether `then` may be spoken in the same step as `first`: within `cap` characters, with no break between them
    (`silence`, `lead`) and in the same voice, rate and language (SSML's `<voice>`, `<prosody>`, `<lang>`)."""
    return (
        len(first.text) + 1 + len(then.text) <= cap
        and first.silence is None
        and then.lead is None
        and (first.voice, first.rate, first.language) == (then.voice, then.rate, then.language)
    )


def together(first: Chunk, then: Chunk) -> Chunk:
    """One step speaking `first` then `then`: ended by `then`'s boundary and break, each one a clause of it
    (`Chunk.parts`), its text as written the two's (word timings name the words of both)."""
    written = None
    if first.written is not None or then.written is not None:
        written = f"{first.written or first.text} {then.written or then.text}"
    parts = (first.parts or (first,)) + (then.parts or (then,))
    return dataclasses.replace(
        first, text=f"{first.text} {then.text}", pause=then.pause, written=written, parts=parts, silence=then.silence
    )
