"""The real Kokoro-82M int8 model on ONNX Runtime, loaded for the unit tests that speak with it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engines.base import EngineCaps
from engines.kokoro.engine import KokoroEngine


@contextlib.contextmanager
def loaded_onnx_kokoro(model_dir: Path, **options: Any) -> Iterator[KokoroEngine]:
    """The engine on one CPU thread (the same audio as on more, for less CPU: threads spin between operators) with
    chunks of 60 then 220 characters unless `threads` or `caps` say otherwise, loaded for the duration; `options` are KokoroEngine's other arguments (`parallel_steps`, ...)."""
    kokoro = KokoroEngine(
        backend="onnx",
        runtime="cpu",
        onnx_dir=model_dir,
        torch_model="",
        **{
            "threads": 1,
            "caps": EngineCaps(first_chunk_chars=60, max_chunk_chars=220),
            **options,
        },
    )
    kokoro.load()
    try:
        yield kokoro
    finally:
        kokoro.unload()
