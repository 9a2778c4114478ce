"""lifecycle/timings.py: one request's log line and Server-Timing header, counting the characters it said."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from lifecycle.timings import Timings


def planned(chars: int) -> Any:
    engine = SimpleNamespace(name="kokoro", sample_rate=24_000)
    return SimpleNamespace(engine=engine, voice_key="af_heart", chars=chars, chunks=[object()] * 3)


def test_a_request_that_did_not_end_ok_counts_only_the_characters_it_said() -> None:
    timings = Timings("tts", "req-1", plan=planned(300))
    timings.spoken_chars = 96  # its first chunk's audio was made, the second's step was stopped
    assert 'chars;desc="300"' in timings.server_timing()  # while it runs: the whole text
    timings.outcome = "cancelled"
    assert " chars=96 " in timings.log_line() and timings.chars == 96
    timings.outcome = "ok"
    assert " chars=300 " in timings.log_line()
    assert Timings("tts", outcome="invalid_text").chars == 0  # refused before it was planned
