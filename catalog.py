"""Every voice a request can name: built-in packs by name, blends of packs, and registered voice ids.

Resolving a name is decided before any audio is sent: an unknown voice is a 404, a bad blend a 422 that names its
part, and a name that may belong to an engine still loading a 503.
"""

from __future__ import annotations

from typing import Any

from engine_pool import EnginePool
from engines import FAMILIES
from engines.base import BlendVoice, BuiltinVoice, VoiceRef
from engines.voicepacks import canonical_blend, is_blend, parse_blend
from errors import InvalidInput, NotFound, ServiceError, Unavailable
from registry import VoiceRegistry, is_voice_id
from voice_entry import VoiceEntry

_QUOTED_NAME_CHARS = 40  # a hostile name is quoted in errors only this far


class VoiceCatalog:
    def __init__(self, registry: VoiceRegistry, pool: EnginePool, default_voice: str) -> None:
        self.registry = registry
        self.pool = pool
        self.default_voice = default_voice

    def builtins(self) -> dict[str, BuiltinVoice]:
        return {v.name: v for engine in self.pool.engines.values() for v in engine.builtin_voices()}

    def resolve(self, name: str | None) -> VoiceRef:
        """The voice a request names (the default when it names none)."""
        name = name or self.default_voice
        if is_blend(name):
            return self.resolve_blend(name)
        builtin = self.builtins().get(name)
        if builtin is not None:
            return builtin
        if not is_voice_id(name):
            for engine_name in self.pool.unready():
                # An engine that is loading or failed cannot list its packs yet: the name may be one of them.
                if not self.pool.engines[engine_name].builtin_voices():
                    self.pool.engine_for(engine_name)
            raise NotFound(
                f"no voice {name[:_QUOTED_NAME_CHARS]!r}: not a registered voice id nor a built-in voice",
                code="voice_not_found",
            )
        return self.registry.get(name)

    def resolve_blend(self, formula: str) -> BlendVoice:
        """Resolve every part of `a(2)+b(1)` to a pack voice of one engine; a bad part is a 422 that names it."""
        parts = parse_blend(formula)
        voices: list[BuiltinVoice | VoiceEntry] = []
        for index, part in enumerate(parts):
            where = {"part": part.name, "index": index}
            label = f"blend part {index + 1} ({part.name!r})"
            try:
                voice = self.resolve(part.name)
            except Unavailable:  # the engine is loading or failed: not the formula's fault
                raise
            except ServiceError as exc:
                raise InvalidInput(f"{label}: {exc.message}", code="invalid_blend", detail=where) from exc
            family = FAMILIES.get(voice.engine)
            blendable = family is not None and family.accepts_packs
            if not blendable or (isinstance(voice, VoiceEntry) and voice.kind != "pack"):
                raise InvalidInput(
                    f"{label} is a {voice.engine} voice cloned from a clip; only style packs blend",
                    code="invalid_blend",
                    detail=where,
                )
            if voices and voice.engine != voices[0].engine:
                raise InvalidInput(f"{label} belongs to another engine", code="invalid_blend", detail=where)
            voices.append(voice)  # type: ignore[arg-type]
        return BlendVoice(canonical_blend(parts), voices[0].engine, tuple(zip(voices, (p.weight for p in parts))))

    @staticmethod
    def language_of(voice: VoiceRef) -> str | None:
        """The language a voice speaks when a request names none: a built-in's from its name, a blend's from its
        first part, a registered voice's from its registration (if it gave one)."""
        if isinstance(voice, BlendVoice):
            return VoiceCatalog.language_of(voice.parts[0][0])
        if isinstance(voice, BuiltinVoice):
            return voice.language if voice.language != "unknown" else None
        return voice.language

    def get(self, name: str) -> BuiltinVoice | VoiceEntry:
        """One voice by built-in name or registered id, for `GET /voices/{name}`: 404 when it is neither."""
        builtin = self.builtins().get(name)
        if builtin is not None:
            return builtin
        if not is_voice_id(name):
            raise NotFound(f"no voice {name[:_QUOTED_NAME_CHARS]!r}: not a registered voice id nor a built-in voice", code="voice_not_found")
        return self.registry.get(name)

    def view(self, voice: BuiltinVoice | VoiceEntry) -> dict[str, Any]:
        """What `GET /voices` shows of a voice, with whether this node can serve it."""
        servable = voice.engine in self.pool.engines
        if isinstance(voice, BuiltinVoice):
            return {**voice.public(), "servable": servable}
        return {**voice.public(), "builtin": False, "servable": servable}

    def listing(self) -> list[dict[str, Any]]:
        """Every voice usable here: registered ones first (oldest first), then the built-ins."""
        return [self.view(v) for v in self.registry.list()] + [self.view(v) for v in self.builtins().values()]
