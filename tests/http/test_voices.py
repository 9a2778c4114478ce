"""The voice routes in this process, on the embedded Kokoro ONNX default: registering, listing, getting and deleting
voices, and every refusal of a registration or a voice id, with its status and code."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.apps import InProcessApp
from tests.support.clips import wav_clip
from tests.support.voices import clone_form
from voicebank.ids import compute_voice_id


def test_register_list_get_delete(client: TestClient) -> None:
    clip = wav_clip(1.5, 330)
    created = client.post("/voices", **clone_form(clip))
    assert created.status_code == 201, created.text
    voice_id = created.json()["voice_id"]
    assert len(voice_id) == 16 and created.json()["created"] is True

    again = client.post("/voices", **clone_form(clip))
    assert again.status_code == 200 and again.json() == {"voice_id": voice_id, "created": False}

    listed = {v["voice_id"]: v for v in client.get("/voices").json()["voices"]}
    assert listed[voice_id]["engine"] == "qwen"
    assert listed[voice_id]["ref_text"] == "a reference transcript"
    assert listed[voice_id]["servable"] is False  # stored for portability; this node has no Qwen3-TTS
    assert listed["jf_alpha"]["builtin"] is True and listed["jf_alpha"]["engine"] == "kokoro"

    got = client.get(f"/voices/{voice_id}")
    assert got.status_code == 200 and got.json()["duration_s"] == pytest.approx(1.5, abs=0.01)
    assert client.get("/voices/jf_alpha").json()["language"] == "ja"

    conflict = client.post("/voices", **clone_form(clip, ref_text="another transcript"))
    assert conflict.status_code == 409 and conflict.json()["code"] == "voice_exists"
    replaced = client.post("/voices", **clone_form(clip, ref_text="another transcript", replace="true"))
    assert replaced.status_code == 201
    assert client.get(f"/voices/{voice_id}").json()["ref_text"] == "another transcript"

    assert client.delete(f"/voices/{voice_id}").json() == {"deleted": voice_id}
    assert client.get(f"/voices/{voice_id}").status_code == 404
    assert client.delete(f"/voices/{voice_id}").status_code == 404
    assert client.delete("/voices/jf_alpha").status_code == 409


def test_voice_id_vectors_over_http(client: TestClient) -> None:
    form: dict[str, Any] = {
        "files": {"audio": ("a.bin", b"polytts-test-audio")},
        "data": {"engine": "voxcpm", "ref_text": "x"},
    }
    # These bytes do not decode as audio, so the id cannot be registered; the vector is pinned in test_registry.
    refused = client.post("/voices", **form)
    assert refused.status_code == 422 and refused.json()["code"] == "invalid_audio"


@pytest.mark.parametrize(
    ("form", "status", "code"),
    [
        (
            {"files": {"seed_audio": ("s.wav", wav_clip())}, "data": {"engine": "voxcpm", "ref_text": "x"}},
            422,
            "audio_required",
        ),
        ({"files": {"audio": ("a.wav", wav_clip())}, "data": {"ref_text": "x"}}, 422, "engine_required"),
        (
            {"files": {"audio": ("a.wav", wav_clip())}, "data": {"engine": "nope", "ref_text": "x"}},
            422,
            "unknown_engine",
        ),
        ({"files": {"audio": ("a.wav", wav_clip())}, "data": {"engine": "kokoro"}}, 422, "engine_cannot_clone"),
        ({"files": {"audio": ("a.wav", b"")}, "data": {"engine": "voxcpm", "ref_text": "x"}}, 422, "invalid_audio"),
        (
            {"files": {"audio": ("a.wav", wav_clip(0.1))}, "data": {"engine": "voxcpm", "ref_text": "x"}},
            422,
            "audio_duration",
        ),
        ({"files": {"audio": ("a.wav", wav_clip())}, "data": {"engine": "voxcpm"}}, 422, "ref_text_required"),
        (
            {"files": {"audio": ("a.wav", wav_clip())}, "data": {"engine": "voxcpm", "x_vector_only_mode": "maybe"}},
            422,
            "invalid_field",
        ),
    ],
)
def test_registration_errors(client: TestClient, app: InProcessApp, form: dict, status: int, code: str) -> None:
    before = sorted(p.name for p in (app.tmp / "voices").iterdir())
    response = client.post("/voices", **form)
    assert response.status_code == status, response.text
    assert response.json()["code"] == code
    if code == "engine_cannot_clone":
        assert "built-in" in response.json()["message"]
    assert sorted(p.name for p in (app.tmp / "voices").iterdir()) == before


def test_registration_not_multipart(client: TestClient) -> None:
    response = client.post("/voices", json={"engine": "voxcpm"})
    assert response.status_code == 415 and response.json()["code"] == "expected_multipart"


def test_seeded_and_xvector_registrations(client: TestClient) -> None:
    clip = wav_clip(1.2, 440)
    xvec = client.post("/voices", **clone_form(clip, ref_text="", x_vector_only_mode="true"))
    seeded = client.post(
        "/voices",
        files={"audio": ("a.wav", clip), "seed_audio": ("s.wav", wav_clip(1.0, 550))},
        data={"engine": "voxcpm", "ref_text": "hello", "seed_text": "你好"},
    )
    assert xvec.status_code == 201 and seeded.status_code == 201
    assert xvec.json()["voice_id"] != seeded.json()["voice_id"]
    meta = client.get(f"/voices/{seeded.json()['voice_id']}").json()
    assert meta["seed_text"] == "你好" and meta["has_seed_audio"] is True
    assert client.get(f"/voices/{xvec.json()['voice_id']}").json()["x_vector_only_mode"] is True


def test_invalid_voice_ids_never_reach_the_disk(client: TestClient) -> None:
    for bad in ("..%2F..%2Fetc", "ABCDEF0123456789", "0123456789abcde", "0123456789abcdef0"):
        response = client.get(f"/voices/{bad}")
        assert response.status_code in (404, 422), bad
        assert response.status_code != 200
    # A name that is neither a built-in nor an id names no voice; deleting one is a malformed id.
    assert client.get("/voices/0123456789abcdeg").json()["code"] == "voice_not_found"
    assert client.delete("/voices/0123456789abcdeg").json()["code"] == "invalid_voice_id"
    assert client.delete("/voices/NOT-AN-ID").json()["code"] == "invalid_voice_id"


def test_a_node_without_qwen_stores_the_voice_and_refuses_it(client: TestClient) -> None:
    """Voices are portable: a Qwen voice on a node that cannot run Qwen3-TTS is kept, and using it names the engine."""
    clip = wav_clip(1.0, 345)
    assert "qwen" not in client.get("/health").json()["serves"]
    created = client.post(
        "/voices", files={"audio": ("ref.wav", clip)}, data={"engine": "qwen", "ref_text": "hello there"}
    )
    assert created.status_code == 201 and created.json()["voice_id"] == compute_voice_id(clip, "qwen")
    refused = client.post("/tts", json={"text": "hi", "voice_id": created.json()["voice_id"]})
    assert refused.status_code == 422 and "qwen" in refused.json()["message"]
