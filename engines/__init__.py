"""The engine families this service knows, whether or not this node can run them.

Voices are portable: a registration names a family, and a node that cannot run it still stores the voice. Adding an
engine is its module (which declares an `EngineSpec`), one line in ENGINE_SPECS, its requirements and its tests.
"""

from __future__ import annotations

from engines.base import EngineSpec
from engines.kokoro import engine as kokoro
from engines.qwen import engine as qwen
from engines.voxcpm import engine as voxcpm

ENGINE_SPECS: tuple[EngineSpec, ...] = (kokoro.SPEC, voxcpm.SPEC, qwen.SPEC)
FAMILIES: dict[str, EngineSpec] = {spec.family: spec for spec in ENGINE_SPECS}
