"""What tests register: clips for a cloning engine (one the node serves, or one it lacks), and Kokoro voice packs as
`.npy` bytes."""

from __future__ import annotations

import io

import httpx
import numpy as np


def clone_form(audio: bytes, ref_text: str = "a reference transcript", **fields: str) -> dict:
    """A registration for `qwen`, a cloning engine this node does not serve (voices are portable)."""
    return {
        "files": {"audio": ("ref.wav", audio, "audio/wav")},
        "data": {"engine": "qwen", "ref_text": ref_text, **fields},
    }


def register_clip(client: httpx.Client, engine: str, audio: bytes, **data: str) -> str:
    """Register `audio` as a voice of `engine` on a running node; its voice id."""
    response = client.post("/voices", files={"audio": ("ref.wav", audio)}, data={"engine": engine, **data})
    assert response.status_code == 201, response.text
    return str(response.json()["voice_id"])


def npy(array: np.ndarray, allow_pickle: bool = False) -> bytes:
    out = io.BytesIO()
    np.save(out, array, allow_pickle=allow_pickle)
    return out.getvalue()


def pack_values(seed: int) -> np.ndarray:
    """A Kokoro voice pack's worth of values (510 x 1 x 256), different for each seed."""
    return (0.1 * np.random.default_rng(seed).standard_normal((510, 1, 256))).astype(np.float32)
