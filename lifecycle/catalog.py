"""Every voice a request can name: built-in packs by name, blends of packs, and registered voice ids.

Resolving a name is decided before any audio is sent: an unknown voice is a 404, a bad blend a 422 that names its
part, and a name that may belong to an engine still loading a 503.
"""

from __future__ import annotations

import asyncio
from typing import Any

from engines import FAMILIES
from engines.base import BlendVoice, BuiltinVoice, VoiceRef
from engines.blends import canonical_blend, is_blend, parse_blend
from errors import InvalidInput, NotFound, ServiceError, Unavailable
from gpu.engine_pool import EnginePool
from voicebank import bundles
from voicebank.ids import is_voice_id
from voicebank.peers import Peers
from voicebank.registry import VoiceRegistry
from voicebank.voice_entry import VoiceEntry, excerpt


def _no_voice(name: str) -> NotFound:
    return NotFound(
        f"no voice {excerpt(name)!r}: not a registered voice id nor a built-in voice", code="voice_not_found"
    )


class VoiceCatalog:
    def __init__(
        self, registry: VoiceRegistry, pool: EnginePool, default_voice: str, peers: Peers, max_upload_bytes: int
    ) -> None:
        self.registry = registry
        self.pool = pool
        self.default_voice = default_voice
        self.peers = peers
        self.max_upload_bytes = max_upload_bytes

    def builtins(self) -> dict[str, BuiltinVoice]:
        return {v.name: v for engine in self.pool.engines.values() for v in engine.builtin_voices()}

    async def resolve(self, name: str | None) -> VoiceRef:
        """The voice a request names (the default when it names none). A registered id is looked up on disk (off
        the event loop) when this node has not indexed it: another node sharing the voices folder may have."""
        name = name or self.default_voice
        if is_blend(name):
            return await self.resolve_blend(name)
        return await self._resolve_single(name)

    async def _resolve_single(self, name: str) -> BuiltinVoice | VoiceEntry:
        """A built-in voice or a registered one by its name (a blend's parts are such names)."""
        builtin = self.builtins().get(name)
        if builtin is not None:
            return builtin
        if not is_voice_id(name):
            for engine_name in self.pool.unready():
                # An engine that is loading or failed cannot list its packs yet: the name may be one of them. A
                # family that clones from clips has no named voices: an unknown name is not its (404, not 503).
                if FAMILIES[engine_name].accepts_packs and not self.pool.engines[engine_name].builtin_voices():
                    self.pool.engine_for(engine_name)
            raise _no_voice(name)
        try:
            return await asyncio.to_thread(self.registry.lookup, name)
        except NotFound:
            if not self.peers:
                raise
        return await self._from_peers(name)

    async def _from_peers(self, voice_id: str) -> VoiceEntry:
        """A voice another node has: its bundle, verified by its id as it is registered here, then served."""
        bundle = await self.peers.bundle(voice_id)
        if bundle is None:
            raise NotFound(f"no voice {voice_id} here nor on any peer", code="voice_not_found")
        registration = bundles.registration(bundle, self.max_upload_bytes)
        if registration.expected_id != voice_id:
            raise NotFound(f"a peer answered voice {voice_id} with another voice's bundle", code="voice_not_found")
        entry, _ = await asyncio.to_thread(self.registry.register, registration)
        return entry

    async def resolve_blend(self, formula: str) -> BlendVoice:
        """Resolve every part of `a(2)+b(1)` to a pack voice of one engine; a bad part is a 422 that names it."""
        parts = parse_blend(formula)
        voices: list[BuiltinVoice | VoiceEntry] = []
        for index, part in enumerate(parts):
            where = {"part": part.name, "index": index}
            label = f"invalid blend part at index {index} '{excerpt(part.name)}'"
            try:
                voice = await self._resolve_single(part.name)
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
            voices.append(voice)
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
        """One voice by built-in name or registered id, for `GET /voices/{name}` (it touches the disk: call it off
        the event loop); 404 when it is neither."""
        builtin = self.builtins().get(name)
        if builtin is not None:
            return builtin
        if not is_voice_id(name):
            raise _no_voice(name)
        return self.registry.lookup(name)

    def view(self, voice: BuiltinVoice | VoiceEntry) -> dict[str, Any]:
        """What `GET /voices` shows of a voice, with whether this node can serve it."""
        servable = voice.engine in self.pool.engines
        if isinstance(voice, BuiltinVoice):
            return {**voice.public(), "servable": servable}
        return {**voice.public(), "builtin": False, "servable": servable}

    def listing(self) -> list[dict[str, Any]]:
        """Every voice usable here: registered ones first (oldest first), then the built-ins."""
        return [self.view(v) for v in self.registry.list()] + [self.view(v) for v in self.builtins().values()]
