"""End to end: dots.tts on PyTorch on a tiny random checkpoint, served by a real server over /tts, /tts/stream, the
OpenAI route (the `openai` client) and the live WebSocket, beside Kokoro in one-engine residency; and a dots voice on
a node without dots.tts, refused there and served once its folder reaches a node with it."""

from __future__ import annotations

import io
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import soundfile as sf

from tests.support.clips import assert_joined_length, wav_clip
from tests.support.live_socket import speak_live
from tests.support.servers import ServerProcess, no_tracebacks
from tests.support.tiny_dots import SAMPLES_PER_PATCH
from tests.support.voices import register_clip
from voicebank.ids import compute_voice_id

RATE = 24_000
XVECTOR = 12 * SAMPLES_PER_PATCH  # POLYTTS_DOTS_MAX_PATCHES 12: the random model never stops
CONTINUATION = 5 * SAMPLES_PER_PATCH  # the 0.5 s reference takes 7 of the 12 patches
CLIP = wav_clip(1.0, 410)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, tiny_dots: Path, assembled_model: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path_factory.mktemp("dots"),
        POLYTTS_DOTS_MODEL=str(tiny_dots),
        POLYTTS_DOTS_MAX_PATCHES="12",
        POLYTTS_DOTS_MAX_REF_SECONDS="0.5",
        POLYTTS_KOKORO_BACKEND="onnx",
        POLYTTS_LIVE_FLUSH_MS="300",
        OMP_NUM_THREADS="1",  # tiny models on a shared CPU
    ).start(timeout=120)
    yield server
    server.stop()


@pytest.fixture
def client(node: ServerProcess) -> Iterator[httpx.Client]:
    with node.client() as c:
        yield c


@pytest.fixture(scope="module")
def voices(node: ServerProcess) -> dict[str, str]:
    with node.client() as client:
        return {
            "continuation": register_clip(client, "dots", CLIP, ref_text="hello there"),
            "xvector": register_clip(client, "dots", wav_clip(1.0, 420), x_vector_only_mode="true"),
        }


def test_registrations_give_the_seed_ids_and_health_names_the_checkpoint(
    client: httpx.Client, voices: dict[str, str], tiny_dots: Path
) -> None:
    assert voices["continuation"] == compute_voice_id(CLIP, "dots")
    assert voices["xvector"] == compute_voice_id(wav_clip(1.0, 420), "dots", x_vector_only_mode=True)
    assert client.post("/tts", json={"text": "Load it.", "voice_id": voices["xvector"]}).status_code == 200
    health = client.get("/health").json()
    dots = health["engines"]["dots"]
    assert "dots" in health["serves"] and dots["backend"] == "torch" and dots["model"] == str(tiny_dots)
    assert dots["checkpoint"].startswith(f"dots:{tiny_dots}@")  # POLYTTS_DOTS_MODEL, as loaded
    assert {"engine": "dots", "checkpoint": dots["checkpoint"]} in health["resident"]
    assert health["manager"]["units"]["dots"]["footprint"] == dots["memory"]["footprint_bytes"] > 1_000_000


@pytest.mark.parametrize(("mode", "samples"), [("continuation", CONTINUATION), ("xvector", XVECTOR)])
def test_each_clone_mode_returns_a_24khz_wav(
    client: httpx.Client, voices: dict[str, str], mode: str, samples: int
) -> None:
    response = client.post("/tts", json={"text": "Hello from a cloned voice.", "voice_id": voices[mode]})
    assert response.status_code == 200, response.text
    assert response.headers["x-engine"] == "dots" and response.headers["x-sample-rate"] == str(RATE)
    audio, rate = sf.read(io.BytesIO(response.content))
    assert rate == RATE and len(audio) == samples


def test_stream_hands_out_pieces_as_they_are_generated(client: httpx.Client, voices: dict[str, str]) -> None:
    started = time.perf_counter()
    arrivals: list[float] = []
    size = 0
    body = {"text": "First sentence here. Second one now.", "voice_id": voices["xvector"], "max_sentences_per_gen": 1}
    with client.stream("POST", "/tts/stream", json=body) as response:
        assert response.status_code == 200 and response.headers["x-sample-rate"] == str(RATE)
        for chunk in response.iter_raw():
            arrivals.append(time.perf_counter() - started)
            size += len(chunk)
    assert_joined_length(size // 2, [XVECTOR] * 2, RATE)  # two generations, s16le
    assert len(arrivals) >= 8  # a piece per 80 ms patch
    assert arrivals[0] < 0.5 * arrivals[-1]


def test_the_openai_client_speaks_a_dots_voice(node: ServerProcess, voices: dict[str, str]) -> None:
    client = openai.OpenAI(base_url=node.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    assert "dots" in [model.id for model in client.models.list()]
    with client.audio.speech.with_streaming_response.create(
        model="dots",
        voice=voices["continuation"],
        input="Spoken for the OpenAI client.",
        response_format="wav",
    ) as response:
        body = response.read()
    audio, rate = sf.read(io.BytesIO(body))
    assert rate == RATE and len(audio) == CONTINUATION
    with pytest.raises(openai.UnprocessableEntityError) as refused:
        client.audio.speech.create(model="tts-1", voice=voices["xvector"], input="Wrong model.")
    assert refused.value.code == "voice_engine_mismatch"


async def test_the_live_websocket_speaks_text_as_it_arrives(node: ServerProcess, voices: dict[str, str]) -> None:
    url = node.url.replace("http", "ws") + f"/tts/live/ws?voice={voices['xvector']}"
    words = [word + " " for word in "Live text comes in. And more of it follows.".split()]
    live = await speak_live(url, words, gap_s=0.02)
    assert live.kinds[0] == "start" and live.kinds[-1] == "done", live.events
    assert_joined_length(len(live.audio) // 2, [XVECTOR] * 2, RATE)  # a generation per sentence


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"num_steps": 0}, "invalid_input"),
        ({"num_steps": 65}, "invalid_input"),
        ({"num_steps": 2.5}, "invalid_input"),
        ({"guidance_scale": -0.1}, "invalid_input"),
        ({"guidance_scale": 10.5}, "invalid_input"),
        ({"speaker_scale": 0}, "invalid_input"),
        ({"speaker_scale": "1.5"}, "invalid_input"),
        ({"temperature": 0.7}, "unsupported_parameter"),
        ({"cfg_value": 2.0}, "unsupported_parameter"),
        ({"speed": 1.1}, "unsupported_parameter"),
    ],
)
def test_parameter_checks(client: httpx.Client, voices: dict[str, str], body: dict[str, object], code: str) -> None:
    response = client.post("/tts/stream", json={"text": "hi", "voice_id": voices["continuation"], **body})
    assert response.status_code == 422 and response.json()["code"] == code, response.text


def test_sampling_parameters_are_taken(client: httpx.Client, voices: dict[str, str]) -> None:
    body = {"text": "Tuned.", "voice_id": voices["xvector"], "language": "zh"}
    tuned = {"num_steps": 3, "guidance_scale": 2.0, "speaker_scale": 1.0}
    plain, changed = (client.post("/tts", json=body | extra) for extra in ({}, tuned))
    assert plain.status_code == changed.status_code == 200, changed.text
    assert len(sf.read(io.BytesIO(changed.content))[0]) == XVECTOR and changed.content != plain.content
    kokoro = client.post("/tts", json={"text": "hi", "voice_id": "af_heart", "num_steps": 4})
    assert kokoro.status_code == 422 and kokoro.json()["code"] == "unsupported_parameter"


def test_registrations_dots_cannot_serve_are_refused(client: httpx.Client, node: ServerProcess) -> None:
    before = sorted(p.name for p in (node.tmp / "voices").iterdir())
    no_text = client.post("/voices", files={"audio": ("a.wav", wav_clip(1.0, 430))}, data={"engine": "dots"})
    assert no_text.status_code == 422 and no_text.json()["code"] == "ref_text_required"
    seeded = client.post(
        "/voices",
        files={"audio": ("a.wav", wav_clip(1.0, 440)), "seed_audio": ("s.wav", wav_clip(1.0, 450))},
        data={"engine": "dots", "ref_text": "hi", "seed_text": "calm"},
    )
    assert seeded.status_code == 422 and seeded.json()["code"] == "seed_not_supported"
    assert sorted(p.name for p in (node.tmp / "voices").iterdir()) == before


def test_dots_and_kokoro_evict_each_other(client: httpx.Client, voices: dict[str, str]) -> None:
    before = client.get("/health").json()["manager"]["units"]["dots"]
    for turn, voice in enumerate([None, voices["continuation"], None, voices["xvector"]]):
        body = {"text": f"Swap number {turn}.", "language": "en"} | ({"voice_id": voice} if voice else {})
        assert client.post("/tts", json=body).status_code == 200
        assert [r["engine"] for r in client.get("/health").json()["resident"]] == ["dots" if voice else "kokoro"]
    after = client.get("/health").json()["manager"]["units"]["dots"]
    assert after["loads"] - before["loads"] == 2
    assert after["evictions"] - before["evictions"] == 1 + before["resident"]  # turn 0 evicts it if it was loaded


def test_a_node_without_dots_keeps_the_id_refuses_the_voice_and_its_folder_serves_elsewhere(
    server: ServerProcess, node: ServerProcess
) -> None:
    clip = wav_clip(1.0, 460)
    with server.client() as plain:
        created = plain.post("/voices", files={"audio": ("a.wav", clip)}, data={"engine": "dots", "ref_text": "hi"})
        assert created.status_code == 201, created.text
        voice_id = created.json()["voice_id"]
        assert voice_id == compute_voice_id(clip, "dots")
        refused = plain.post("/tts", json={"text": "Not here.", "voice_id": voice_id})
        assert refused.status_code == 422 and refused.json()["code"] == "engine_unavailable", refused.text
    shutil.copytree(server.tmp / "voices" / voice_id, node.tmp / "voices" / voice_id)
    with node.client() as capable:
        served = capable.post("/tts", json={"text": "Served here.", "voice_id": voice_id})
        assert served.status_code == 200, served.text
        assert len(sf.read(io.BytesIO(served.content))[0]) == CONTINUATION


def test_nothing_above_logged_a_traceback(node: ServerProcess) -> None:
    no_tracebacks(node)
