"""One request's timings, from its arrival to its end: its log line and its `Server-Timing` header."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from lifecycle.plan import Plan


@dataclass
class Timings:
    """One request's timings, logged as one line when it ends."""

    route: str
    request_id: str | None = None
    plan: Plan | None = None
    started: float = field(default_factory=time.perf_counter)
    cache: str = "miss"
    first_audio: float | None = None
    queue_wait: float = 0.0
    synthesis: float = 0.0
    audio_bytes: int = 0
    spoken_chars: int = 0
    """Characters (as spoken) of the chunks whose audio began to reach the client (gpu.jobs.Job.spoken_chars): a
    request that did not end `ok` logs these."""
    ended: float | None = None
    outcome: str | None = None
    in_flight: bool = False
    """Counted in `SynthesisService.in_flight` until it ends."""
    underrun: float | None = None
    """Streams only: seconds a listener playing in real time would have stalled (gpu.jobs.Job.underrun_s)."""

    def audio_seconds(self) -> float:
        return self.audio_bytes / 2 / self.plan.engine.sample_rate if self.plan else 0.0

    @property
    def total(self) -> float:
        return (self.ended or time.perf_counter()) - self.started

    @property
    def time_to_first_audio(self) -> float | None:
        return self.first_audio - self.started if self.first_audio is not None else None

    @property
    def real_time_factor(self) -> float | None:
        """Synthesis time over audio duration (a cache hit has none)."""
        audio = self.audio_seconds()
        return self.synthesis / audio if audio and self.cache == "miss" else None

    @property
    def chars(self) -> int:
        """Characters of text: a request's whole text while it runs and once it ended `ok`, else what it said before
        it ended (a client gone, a failure)."""
        if self.plan is None:
            return 0
        return self.plan.chars if self.outcome in (None, "ok") else self.spoken_chars

    def log_line(self) -> str:
        ttfa, rtf, plan = self.time_to_first_audio, self.real_time_factor, self.plan
        return (
            f"{self.route} outcome={self.outcome} engine={plan.engine.name if plan else '-'} "
            f"voice={plan.voice_key if plan else '-'} chars={self.chars} "
            f"chunks={len(plan.chunks) if plan else 0} cache={self.cache} queue={self.queue_wait:.3f}s "
            f"ttfa={f'{ttfa:.3f}s' if ttfa is not None else '-'} synth={self.synthesis:.3f}s total={self.total:.3f}s "
            f"audio={self.audio_seconds():.2f}s rtf={f'{rtf:.3f}' if rtf is not None else '-'} "
            f"underrun={f'{self.underrun:.3f}s' if self.underrun is not None else '-'} id={self.request_id or '-'}"
        )

    def server_timing(self) -> str:
        """The `Server-Timing` header: durations in milliseconds, counts as descriptions."""
        parts = [f"queue;dur={self.queue_wait * 1000:.1f}"]
        if (ttfa := self.time_to_first_audio) is not None:
            parts.append(f"ttfa;dur={ttfa * 1000:.1f}")
        parts += [f"synth;dur={self.synthesis * 1000:.1f}", f"total;dur={self.total * 1000:.1f}"]
        parts += [f'chars;desc="{self.chars}"', f'audio;desc="{self.audio_seconds():.3f}"']
        if (rtf := self.real_time_factor) is not None:
            parts.append(f'rtf;desc="{rtf:.3f}"')
        if self.underrun is not None:
            parts.append(f"underrun;dur={self.underrun * 1000:.1f}")
        return ", ".join(parts)
