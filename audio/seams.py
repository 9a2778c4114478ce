"""Joining the audio of consecutive chunks so that it sounds like one utterance.

A TTS model pads every generation with its own silence (Kokoro: about 0.3 s before and 0.45 s after), so chunks
played back to back leave a gap of most of a second wherever the text was cut, even inside a phrase. The joiner
trims each chunk's leading and trailing silence, then puts back the pause that belongs to the boundary that ends
the chunk (`text.Pause`), and fades the trimmed edges over a few milliseconds so no seam has a step (a click).

Pauses are measured from the last audible sample of one chunk to the first audible sample of the next:

- `none` 0.05 s: the chunk was cut inside a phrase, and a word gap is all a listener should hear.
- `clause` 0.16 s: after a comma, semicolon, colon or dash.
- `sentence` 0.32 s: after a full stop, question or exclamation mark.
- `paragraph` 0.65 s: at a blank line.

Kokoro's own pauses inside a generation measure about 0.11-0.16 s at a comma and 0.23-0.25 s at a full stop; read
speech pauses about 0.3-0.6 s between sentences and longer between paragraphs. The durations sit at the model's own
clause pause and a little above its sentence pause, so a seam never sounds hurried next to the pauses around it,
and each step up is clearly longer than the one below.

It works on a stream: the pieces of one chunk go in as the engine yields them and come out as soon as it is known
that they are not trailing silence. The first audio of a chunk leaves as soon as its onset arrives; what is held
back is the current run of quiet samples (it may be the trailing silence) and a few milliseconds for the fade.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType

import numpy as np

from text.chunking import Pause

PAUSE_SECONDS: Mapping[Pause, float] = MappingProxyType(
    {"none": 0.05, "clause": 0.16, "sentence": 0.32, "paragraph": 0.65}
)
SILENCE_THRESHOLD = 0.005
"""Peak amplitude below which a sample counts as silence (-46 dBFS): well above Kokoro's silence floor (below
0.003) and well below the onsets of speech; a quieter engine simply keeps more of its own silence."""
MARGIN_SECONDS = 0.025
"""Quiet audio kept before the first and after the last audible sample: the soft start of an "h" or "f" and the
decay of a final consonant fall below the threshold but are speech."""
FADE_SECONDS = 0.004
"""Length of the fade in and out at a trimmed edge: long enough that no step is audible, short against speech."""


def _empty() -> np.ndarray:
    return np.zeros(0, dtype=np.float32)


class ChunkJoiner:
    """Trims, fades and spaces the audio of each chunk of one request; keeps no state between chunks."""

    def __init__(
        self,
        sample_rate: int,
        pauses: Mapping[Pause, float] = PAUSE_SECONDS,
        threshold: float = SILENCE_THRESHOLD,
        margin_seconds: float = MARGIN_SECONDS,
        fade_seconds: float = FADE_SECONDS,
    ) -> None:
        self.sample_rate = sample_rate
        self.pauses = pauses
        self.threshold = threshold
        self.margin = max(1, round(margin_seconds * sample_rate))
        self.fade = max(1, min(round(fade_seconds * sample_rate), self.margin))
        self.lead_trimmed = 0
        """Samples cut from the start of the last chunk joined (its own leading silence): word timings of the
        chunk's raw audio move this much earlier."""

    def join(
        self, pieces: Iterable[np.ndarray], pause: Pause, last: bool, silence: float | None = None
    ) -> Iterator[np.ndarray]:
        """The audio of one chunk, trimmed and faded, followed by the silence of `pause` (none after the `last`), or
        by exactly `silence` seconds (an SSML break: after the last chunk too)."""
        self.lead_trimmed = 0
        lead = _empty()  # while no audible sample has come: the quiet samples just before the onset
        held = _empty()  # after it: samples not yet sent (the current quiet run and the fade's samples)
        audible_in_held = 0  # how many of `held` precede the current quiet run
        started = False
        quiet = 0  # samples seen before the onset
        for piece in pieces:
            samples = np.asarray(piece, dtype=np.float32).reshape(-1)
            audible = np.flatnonzero(np.abs(samples) >= self.threshold)
            if not started:
                if not audible.size:
                    lead = np.concatenate([lead, samples])[-self.margin :]
                    quiet += len(samples)
                    self.lead_trimmed = quiet
                    continue
                started = True
                combined = np.concatenate([lead, samples])
                start = max(0, len(lead) + int(audible[0]) - self.margin)
                self.lead_trimmed = quiet - len(lead) + start
                held = combined[start:].copy()  # a copy: the fade must not write into the engine's array
                audible = audible + len(lead) - start
                fade = min(self.fade, len(held))
                held[:fade] *= self._ramp(fade)
            else:
                audible = audible + len(held)
                held = np.concatenate([held, samples])
            if audible.size:
                audible_in_held = int(audible[-1]) + 1
            # Send all but the quiet run after the last audible sample and the samples a final fade may touch.
            send = max(0, min(audible_in_held, len(held) - self.fade))
            if send:
                yield held[:send]
                held, audible_in_held = held[send:], audible_in_held - send
        if started:
            tail = held[: audible_in_held + self.margin].copy()
            fade = min(self.fade, len(tail))
            if fade:
                tail[len(tail) - fade :] *= self._ramp(fade)[::-1]
            yield tail
            kept = len(tail) - audible_in_held
        else:
            kept = 0
        if not last or silence is not None:
            seconds = self.pauses[pause] if silence is None else silence
            # The next chunk keeps `margin` of quiet before its onset; after the last nothing does.
            gap = round(seconds * self.sample_rate) - kept - (self.margin if not last else 0)
            if gap > 0:
                yield np.zeros(gap, dtype=np.float32)

    @staticmethod
    def _ramp(length: int) -> np.ndarray:
        """A raised-cosine ramp from 0 (exclusive) to 1 over `length` samples: no step and no kink at either end."""
        return (0.5 - 0.5 * np.cos(np.pi * np.arange(1, length + 1) / (length + 1))).astype(np.float32)
