"""Voice blends: a formula such as `af_bella(2)+af_sky(1)` names a weighted mix of voices of one engine.

A formula is parsed into parts whose weights are normalised to sum to 1 (`parse_blend`) and spelled one stable way for
cache keys and logs (`canonical_blend`). The voice catalog resolves each part to a voice of a family whose voices are
style packs (`EngineSpec.packs`), and that family's engine mixes them (Kokoro: `engines.kokoro.voicepacks.mix`).
Every malformed formula is a 422 `invalid_blend` naming the part, numbered from 0 as `detail.index` is.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn

from errors import InvalidInput
from voicebank.voice_entry import excerpt

_BLEND_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_BLEND_WEIGHTED = re.compile(r"(?P<name>[^()]*?)\s*\((?P<weight>[^()]*)\)")
_BLEND_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_MAX_BLEND_PARTS = 8
_MAX_QUOTED_PART = 100  # a name (64) and a weight fit


@dataclass(frozen=True)
class BlendPart:
    """One voice of a blend and its weight (normalised, once parsed)."""

    name: str
    weight: float


def is_blend(name: str) -> bool:
    """True when a voice name is a blend formula rather than a single name."""
    return "+" in name or "(" in name


def parse_blend(formula: str) -> list[BlendPart]:
    """Parse `name(weight)+name(weight)+...`; whitespace around parts allowed; weights normalised to sum to 1."""
    if not formula.strip():
        _blend_error("", 0, "the blend formula is empty")
    texts = _split_blend(formula)
    if len(texts) > _MAX_BLEND_PARTS:
        _blend_error(texts[_MAX_BLEND_PARTS], _MAX_BLEND_PARTS, f"a blend has at most {_MAX_BLEND_PARTS} parts")
    parts: list[BlendPart] = []
    for index, text in enumerate(texts):
        part = _parse_blend_part(text, index)
        if any(p.name == part.name for p in parts):
            _blend_error(text, index, f"voice {part.name!r} appears twice")
        parts.append(part)
    return _normalised(parts)


def canonical_blend(parts: Sequence[BlendPart]) -> str:
    """A stable spelling of a blend for cache keys and logs.

    Parts stay in the given order, weights are normalised and written with 4 decimals:
    'af_bella(0.6667)+af_sky(0.3333)'.
    """
    if not parts:
        raise ValueError("a blend needs at least one part")
    return "+".join(f"{p.name}({p.weight:.4f})" for p in _normalised(parts))


def _split_blend(formula: str) -> list[str]:
    """Split on `+` outside parentheses, so a weight such as `1e+1` stays whole; parts come back stripped."""
    parts: list[str] = []
    current: list[str] = []
    in_weight = False
    for char in formula:
        if char == "+" and not in_weight:
            parts.append("".join(current).strip())
            current = []
            continue
        if char == "(":
            in_weight = True
        elif char == ")":
            in_weight = False
        current.append(char)
    parts.append("".join(current).strip())
    return parts


def _parse_blend_part(text: str, index: int) -> BlendPart:
    if not text:
        _blend_error(text, index, "empty part (two '+' in a row, or a '+' at either end)")
    if "(" not in text and ")" not in text:
        name, weight = text, 1.0
    else:
        match = _BLEND_WEIGHTED.fullmatch(text)
        if match is None or not _BLEND_NUMBER.fullmatch(match["weight"].strip()):
            _blend_error(text, index, "write a weighted part as name(number), e.g. af_bella(2)")
        name, weight = match["name"], float(match["weight"])
    if not _BLEND_NAME.fullmatch(name):
        _blend_error(text, index, "a voice name is 1-64 letters, digits, '_', '.' or '-'")
    if not math.isfinite(weight) or weight <= 0:
        _blend_error(text, index, "a weight must be a finite number above 0")
    return BlendPart(name, weight)


def _blend_error(part: str, index: int, why: str) -> NoReturn:
    # Numbered from 0, as `detail.index` is; a long part is quoted by its start only.
    shown = excerpt(part, _MAX_QUOTED_PART)
    raise InvalidInput(
        f"invalid blend part at index {index} '{shown}': {why}",
        code="invalid_blend",
        detail={"part": shown, "index": index},
    )


def _normalised(parts: Sequence[BlendPart]) -> list[BlendPart]:
    # Scale by the largest weight first so that huge weights cannot overflow the sum to inf.
    largest = max(p.weight for p in parts)
    scaled = [p.weight / largest for p in parts]
    total = math.fsum(scaled)
    return [BlendPart(p.name, w / total) for p, w in zip(parts, scaled)]
