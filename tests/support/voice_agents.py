"""What the end-to-end tests of the voice-agent fronts share: whether a client's audio is speech, whether the word or
character timings it consumes match that audio, and Pipecat and LiveKit's plugins driven as an agent drives them."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterable, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING

import numpy as np
import soundfile as sf

from bench.asr import SILENCE_DB, Word
from bench.timings import pause_edges

if TYPE_CHECKING:
    from livekit.agents import APIConnectOptions
    from livekit.agents.tts import TTS, SynthesizedAudio

EDGE_TOLERANCE_S = 0.1
"""How far a word's end (start) may lie from where the sound stops (resumes) at a pause: twice bench/timings.py's
goal, for the milliseconds clients round to and the resampling of the rates they ask for."""
PIPECAT_PATIENCE_S = 30.0
"""Pipecat's `stop_frame_timeout_s` for these tests: Pipecat ends a TTS context that gets no audio for 3 s, and the
Kokoro ONNX model on a busy 2-core CPU can take longer than that to speak one phrase (a GPU takes well under)."""
TimedWord = tuple[str, float, float | None]
"""A word as a client reports it: its text, start and end in seconds from the start of its audio (None where the
client gives starts only)."""


def speech(samples: np.ndarray) -> bool:
    """Not silence: the loudest 50 ms windows (at 16 kHz) are well above the noise floor."""
    windows = samples[: samples.size // 800 * 800].reshape(-1, 800).astype(np.float64)
    return float(np.sqrt((windows**2).mean(axis=1)).max()) > 1000


def sound_starts(samples: np.ndarray, rate: int) -> float:
    """Where the sound first rises within SILENCE_DB of its loudest 10 ms (bench.asr's measure of silence)."""
    frame = rate // 100
    count = samples.size // frame
    power = np.mean(np.square(samples[: count * frame].astype(np.float64).reshape(count, frame)), axis=1)
    level = 10 * np.log10(power + 1e-20)
    return float(np.argmax(level >= level.max() - SILENCE_DB)) / 100


def check_timings(samples: np.ndarray, rate: int, words: Sequence[TimedWord]) -> int:
    """The timings match the audio: in order, inside it, and at each pause in the sound the word before it ends
    (where ends are given) and the word after it starts within EDGE_TOLERANCE_S of the sound, as bench/timings.py
    measures without Whisper. Returns how many pauses were measured."""
    seconds = samples.size / rate
    assert words, "no word timings"
    starts = [start for _, start, _ in words]
    assert starts == sorted(starts) and starts[0] >= 0, words
    for (_, start, end), (_, following, _) in pairwise(words):
        assert end is None or start <= end <= following + 0.002, words  # clients round to milliseconds
    assert max(end if end is not None else start for _, start, end in words) <= seconds + 0.02, (words, seconds)
    known_ends = all(end is not None for _, _, end in words)
    # Where ends are not given, each word runs to the next one's start: only the starts after pauses are measured.
    ends = [end if end is not None else following for (_, _, end), following in zip(words, [*starts[1:], seconds])]
    wav = io.BytesIO()
    sf.write(wav, samples.astype(np.int16), rate, format="WAV", subtype="PCM_16")
    timed = [Word(text, start, end) for (text, start, _), end in zip(words, ends, strict=True)]
    edges = pause_edges(wav.getvalue(), timed)["edges"]
    for edge in edges:
        assert abs(edge["start_ms"]) <= EDGE_TOLERANCE_S * 1000, edge
        assert not known_ends or abs(edge["end_ms"]) <= EDGE_TOLERANCE_S * 1000, edge
    return len(edges)


def words_of_characters(chars: Sequence[str], starts: Sequence[float], ends: Sequence[float]) -> list[TimedWord]:
    """The words of a character alignment (ElevenLabs'), each from its first letter's start to its last's end."""
    words: list[TimedWord] = []
    current: list[tuple[str, float, float]] = []
    for char, start, end in [*zip(chars, starts, ends, strict=True), (" ", 0.0, 0.0)]:
        if char.isspace():
            if current:
                words.append(("".join(c for c, _, _ in current), current[0][1], current[-1][2]))
            current = []
        else:
            current.append((char, start, end))
    return words


async def pipecat_speak(service: object, text: str, rate: int) -> tuple[np.ndarray, list[TimedWord]]:
    """Run `service` in a Pipecat pipeline as an agent would: speak a language model's `text` as its tokens come,
    collect the audio (at `rate`, which every frame must have) and the words with their start times in that audio.
    Pipecat stamps a word with its presentation time (its time in the audio from when that audio began to play):
    the first word is placed where the sound starts."""
    from pipecat.frames.frames import (
        EndFrame,
        Frame,
        LLMFullResponseEndFrame,
        LLMFullResponseStartFrame,
        LLMTextFrame,
        TTSAudioRawFrame,
        TTSStoppedFrame,
        TTSTextFrame,
    )
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.runner import PipelineRunner
    from pipecat.pipeline.task import PipelineParams, PipelineTask
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

    heard = bytearray()
    rates: set[int] = set()
    stamped: list[tuple[str, int]] = []
    stopped = asyncio.Event()

    class Collect(FrameProcessor):
        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, TTSAudioRawFrame):
                heard.extend(frame.audio)
                rates.add(frame.sample_rate)
            elif isinstance(frame, TTSTextFrame) and frame.pts is not None:
                stamped.append((frame.text, frame.pts))
            elif isinstance(frame, TTSStoppedFrame):
                stopped.set()
            await self.push_frame(frame, direction)

    task = PipelineTask(
        Pipeline([service, Collect()]),  # type: ignore[list-item]
        params=PipelineParams(audio_out_sample_rate=rate),
        idle_timeout_secs=60,
    )
    tokens = [LLMTextFrame(word + " ") for word in text.split()]  # a language model's answer, token by token
    await task.queue_frames([LLMFullResponseStartFrame(), *tokens, LLMFullResponseEndFrame()])
    running = asyncio.create_task(PipelineRunner(handle_sigint=False).run(task))
    await asyncio.wait_for(stopped.wait(), 120)  # the answer is spoken: the agent's turn is over
    await task.queue_frame(EndFrame())
    await asyncio.wait_for(running, 60)
    assert rates == {rate}
    samples = np.frombuffer(bytes(heard), dtype="<i2")
    onset = sound_starts(samples, rate) if stamped else 0.0
    words: list[TimedWord] = [(word, onset + (pts - stamped[0][1]) / 1e9, None) for word, pts in stamped]
    return samples, words


PATIENCE_S = 60.0
"""The plugins' `conn_options.timeout` for these tests: LiveKit gives up on a stream that gets no audio for 10 s,
and on a busy 2-core CPU two contexts' phrases, taking turns, can take longer than that (a GPU takes well under)."""


def patient() -> APIConnectOptions:
    """Connection options that wait PATIENCE_S and never retry: a failure is the test's, not hidden by a retry."""
    from livekit.agents import APIConnectOptions

    return APIConnectOptions(max_retry=0, timeout=PATIENCE_S)


async def heard(events: AsyncIterable[SynthesizedAudio]) -> tuple[np.ndarray, set[int], list[TimedWord], set[str]]:
    """A plugin's output as an agent's session consumes it: the audio frames (their samples and rates), the timed
    words LiveKit attaches to them (its aligned transcript) and the request ids."""
    from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT
    from livekit.agents.utils import is_given

    samples: list[np.ndarray] = []
    rates: set[int] = set()
    words: list[TimedWord] = []
    request_ids: set[str] = set()
    async for event in events:
        frame = event.frame
        samples.append(np.frombuffer(bytes(frame.data), dtype=np.int16))
        rates.add(frame.sample_rate)
        request_ids.add(event.request_id)
        for timed in frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, []):
            # A word runs with its trailing space to the next one's start: only its start marks its sound.
            assert is_given(timed.start_time) and is_given(timed.end_time) and timed.start_time <= timed.end_time
            words.append((str(timed).strip(), float(timed.start_time), None))
    return np.concatenate(samples), rates, words, request_ids


async def speak_streamed(tts: TTS, text: str) -> tuple[np.ndarray, set[int], list[TimedWord], set[str]]:
    """A language model's `text` pushed word by word into one of the plugin's streams (one context), then ended."""
    stream = tts.stream(conn_options=patient())
    for word in text.split():
        stream.push_text(word + " ")
    stream.end_input()
    try:
        return await heard(stream)
    finally:
        await stream.aclose()
