"""How one request's chunks become its audio, on the GPU thread: each chunk's stream through the seam joiner and,
when asked, its words timed in the response's time."""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Iterator

import numpy as np

from audio.seams import ChunkJoiner
from audio.word_timings import Words
from engines.base import Engine, SynthesisOptions
from text.chunking import Chunk
from text.languages import resolve_language


@dataclasses.dataclass(frozen=True)
class ChunkAudio:
    """One step's pieces (audio, then the chunk's word timings) and the characters of text it speaks: a request cut
    short counts those of the chunks whose audio it began to deliver (gpu.jobs.Job.spoken_chars)."""

    chars: int
    pieces: Generator[np.ndarray | Words, None, None]

    def __iter__(self) -> Iterator[np.ndarray | Words]:
        return self.pieces

    def close(self) -> None:
        self.pieces.close()


class Voicing:
    """How one request's chunks become its audio, on the GPU thread: each chunk's stream through the seam joiner
    (its own silence trimmed, a pause that fits its punctuation) and, when asked, its words timed in response time."""

    def __init__(self, engine: Engine, options: SynthesisOptions, timed: bool) -> None:
        self.engine = engine
        self.options = options
        self.timed = timed
        self.joiner = ChunkJoiner(engine.sample_rate)
        self.position = 0
        """Samples of the response so far."""
        self.silence_after: float | None = None
        """Seconds of silence the joiner put after the last chunk (None before the first)."""

    def chunk(self, chunk: Chunk, handle: object, last: bool) -> ChunkAudio:
        """The chunk's audio and word timings as the engine makes them, with the characters it speaks."""
        return ChunkAudio(len(chunk.text), self._pieces(chunk, handle, last))

    def _pieces(self, chunk: Chunk, handle: object, last: bool) -> Generator[np.ndarray | Words, None, None]:
        if not chunk.text:  # a live request's trailing break: silence only
            yield from self.trailing_silence(chunk.lead or 0.0)
            return
        # The lead's silence goes out with the chunk's first audio, so that a step stopped before the engine made any
        # has delivered nothing and can be said again from its start (gpu.scheduler).
        pad = max(0, self.lead_samples(chunk.lead)) if chunk.lead is not None else 0
        start, words = self.position + pad, []
        options = self.options_of(chunk)

        def timed_audio() -> Iterator[np.ndarray]:
            for audio, found in self.engine.stream_timed(chunk.text, handle, options, written=chunk.written):
                words.extend(found)
                yield audio

        pieces = timed_audio() if self.timed else self.engine.stream(chunk.text, handle, options)
        for piece in self.joiner.join(pieces, chunk.pause, last, chunk.silence):
            if pad:
                yield self.silence(pad)
                pad = 0
            self.position += len(piece)
            yield piece
        if pad:  # the chunk said nothing audible: its lead still stands
            yield self.silence(pad)
        if self.timed:
            rate = self.engine.sample_rate
            # The joiner cut the chunk's own leading silence: its words move that much earlier.
            shift, low, high = (start - self.joiner.lead_trimmed) / rate, start / rate, self.position / rate
            words = [word.shifted(shift).clamped(low, high) for word in words]
        self.silence_after = chunk.silence if chunk.silence is not None else self.joiner.pauses[chunk.pause]
        yield Words(words)  # also the end of the chunk's audio, words or not (Cartesia's `flush_done` counts them)

    def silence(self, samples: int) -> np.ndarray:
        """That many samples of silence, next in the response."""
        self.position += samples
        return np.zeros(samples, dtype=np.float32)

    def lead_samples(self, lead: float) -> int:
        """Zeros to put before a chunk so that `lead` seconds of silence precede its onset: less the silence already
        after the chunk before, or, for the first, the quiet the joiner keeps before an onset."""
        rate = self.engine.sample_rate
        if self.silence_after is None:
            return round(lead * rate) - self.joiner.margin
        return round((lead - self.silence_after) * rate)

    def trailing_silence(self, seconds: float) -> Iterator[np.ndarray | Words]:
        """Zeros that make `seconds` of silence after the last audible sample: nothing after them keeps the quiet a
        chunk keeps before its onset, so that margin is added back to `lead_samples`."""
        pad = self.lead_samples(seconds) + self.joiner.margin
        if pad > 0:
            yield self.silence(pad)
        self.silence_after = seconds
        yield Words([])

    def options_of(self, chunk: Chunk) -> SynthesisOptions:
        """The request's options with the chunk's own rate and language (SSML `<prosody>`, `<lang>`), where set."""
        if chunk.rate is None and chunk.language is None:
            return self.options
        params = dict(self.options.params)
        if chunk.rate is not None:
            params["speed"] = round(float(params.get("speed") or 1.0) * chunk.rate, 3)
        language = resolve_language(chunk.language) if chunk.language is not None else self.options.language
        return dataclasses.replace(self.options, language=language, params=params)
