"""The Vapi front end to end: a real server on the Kokoro ONNX model answers Vapi's `voice-request` webhook as Vapi
calls it (a JSON POST with the secret as `X-VAPI-SECRET`, the body read chunk by chunk as it is piped to the call):
raw 16-bit PCM at the asked rate, the first bytes before the whole answer is made."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from bench.common import PROBE
from tests.support.servers import ServerProcess, no_tracebacks
from tests.support.voice_agents import speech

SECRET = "vapi-secret"
ANSWER = "The quick brown fox jumps over the lazy dog. It was a sunny day, and everyone was happy."


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path_factory.mktemp("vapi"), POLYTTS_KOKORO_BACKEND="onnx", POLYTTS_API_KEYS=f'{{"{SECRET}": "vapi"}}'
    ).start()
    yield server
    no_tracebacks(server)
    server.stop()


@pytest.mark.parametrize("rate", [8000, 16000])
def test_a_voice_request_streams_pcm_at_its_rate(node: ServerProcess, rate: int) -> None:
    body = {"message": {"type": "voice-request", "text": ANSWER, "sampleRate": rate}, "call": {"id": "c1"}}
    chunks: list[bytes] = []
    with PROBE.stream(
        "POST", f"{node.url}/vapi/synthesize?voice=af_heart", json=body, headers={"X-VAPI-SECRET": SECRET}, timeout=120
    ) as response:
        assert response.status_code == 200 and response.headers["x-sample-rate"] == str(rate)
        chunks.extend(response.iter_bytes())
    samples = np.frombuffer(b"".join(chunks), dtype="<i2")
    assert len(chunks) > 1  # streamed as it is made, not sent whole
    assert 4.0 < samples.size / rate < 9.0 and speech(samples)
    refused = PROBE.post(f"{node.url}/vapi/synthesize", json=body, headers={"X-VAPI-SECRET": "wrong"})
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
