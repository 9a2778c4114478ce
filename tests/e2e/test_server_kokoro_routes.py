"""Kokoro's OpenVINO route forced on in a real server (POLYTTS_KOKORO_ONNX_ROUTE=openvino-bf16; on a processor
without bf16 in hardware OpenVINO runs the same graph in f32): /health names the route and the flags, and the
official ElevenLabs client gets speech whose word timings match its sound."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from elevenlabs import ElevenLabs

from bench.common import PROBE
from engines.cpu_flags import cpu_flags
from tests.support.servers import ServerProcess, no_tracebacks
from tests.support.voice_agents import check_timings, speech, words_of_characters

VOICE = "af_heart"
ANSWER = "The quick brown fox jumps over the lazy dog. It was a sunny day, and everyone was happy."
KEY = "sk-route"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path_factory.mktemp("kokoro-routes"),
        POLYTTS_KOKORO_BACKEND="onnx",
        POLYTTS_KOKORO_ONNX_ROUTE="openvino-bf16",
        POLYTTS_API_KEYS=f'{{"{KEY}": "route"}}',
    ).start(timeout=240)  # the float graph is derived and compiled at load: seconds more than int8
    yield server
    no_tracebacks(server)
    server.stop()


def test_health_names_the_route_and_the_flags_it_was_chosen_by(node: ServerProcess) -> None:
    health = PROBE.get(node.url + "/health", headers={"Authorization": f"Bearer {KEY}"}, timeout=30).json()
    kokoro = health["engines"]["kokoro"]
    assert kokoro["route"] == "openvino-bf16" and kokoro["route_requested"] == "openvino-bf16"
    assert kokoro["cpu_flags"] == cpu_flags()
    assert kokoro["checkpoint"].startswith("kokoro-82m-openvino-bf16@")


def test_the_route_speaks_with_word_timings_that_match_the_sound(node: ServerProcess) -> None:
    client = ElevenLabs(base_url=node.url + "/elevenlabs", api_key=KEY, timeout=240)
    timed = client.text_to_speech.convert_with_timestamps(VOICE, text=ANSWER, output_format="pcm_24000")
    samples = np.frombuffer(base64.b64decode(timed.audio_base_64), dtype="<i2")
    alignment = timed.alignment
    assert alignment is not None and "".join(alignment.characters) == ANSWER and speech(samples)
    assert 3.0 < samples.size / 24000 < 9.0
    starts, ends = alignment.character_start_times_seconds, alignment.character_end_times_seconds
    assert check_timings(samples, 24000, words_of_characters(alignment.characters, starts, ends)) >= 1
