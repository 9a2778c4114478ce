"""A request resolved and validated before any work is admitted: its voice and engine, its text as spoken, its
chunks and its cache key (`Plan`), as the `Planner` makes it.

Everything a client can get wrong about what it asked for is raised here, before the first byte: an unknown voice,
a language or a parameter the engine does not take, text that is empty, too long, or holds nothing the engine reads.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import ValidationError

from cache import synthesis_key
from engines import FAMILIES
from engines.base import BuiltinVoice, Engine, Param, SynthesisOptions, VoiceRef
from errors import InvalidInput, PayloadTooLarge, invalid_fields
from gpu.engine_pool import EnginePool
from lexicons.catalog import LexiconCatalog
from lexicons.dictionaries import DictionaryStore
from lexicons.lexicon import Lexicon
from lexicons.store import LexiconStore
from lifecycle.catalog import VoiceCatalog
from lifecycle.pronunciation import Pronouncer
from lifecycle.requests import ENGINE_PARAMS, SpeechRequest, VoiceRequest
from settings import Settings
from text.chunking import Chunk, PhraseSegmenter, collapse_whitespace, is_speakable
from text.cleaning import clean_text
from text.languages import resolve_language
from text.live_text import LiveText
from text.scripts import unreadable_scripts
from text.spoken import Edit, Spoken, check_spoken_length
from text.ssml import is_ssml, parse_ssml
from text.symbols import holds_pictographs
from voicebank.voice_entry import VoiceEntry, excerpt

log = logging.getLogger("polytts.plan")

MIN_CHARS_PER_GEN = 20
"""Floor of a request's own cap on one generation: a smaller cap multiplies the work (one generation per word)."""


@dataclass(frozen=True)
class Plan:
    """A request resolved and validated: what to synthesize, with what, and its cache key."""

    engine: Engine
    voice: VoiceRef
    voice_key: str
    text: str
    chunks: list[Chunk]
    options: SynthesisOptions
    cache_key: str | None
    """None while the engine's checkpoint is unknown: such a synthesis is neither served from nor put in a cache."""
    timed: bool = False
    """Word timings asked for: the engine times each word, and a cache hit needs the timings stored beside the
    audio."""
    lexicons: tuple[Lexicon, ...] = ()
    """The lexicons its text is pronounced with, in precedence order (lifecycle.pronunciation)."""
    voices: dict[str, VoiceRef] = dataclasses.field(default_factory=dict)
    """The other voices its chunks name (SSML `<voice>`), by name; a live request's are added as its text arrives."""

    @property
    def chars(self) -> int:
        """Characters of text (a live request's, as far as its phrases have been taken)."""
        return len(self.text) or sum(len(chunk.text) for chunk in self.chunks)


class Planner:
    """Plans requests against the voices this node knows (`VoiceCatalog`) and the engines it runs."""

    def __init__(
        self, settings: Settings, pool: EnginePool, catalog: VoiceCatalog, lexicons: LexiconStore | None = None
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.catalog = catalog
        self.lexicons = LexiconCatalog(
            lexicons if lexicons is not None else LexiconStore(settings.lexicons_dir),
            DictionaryStore(settings.lexicons_dir / "dictionaries"),
            catalog.peers,
            settings.max_lexicon_entries,
        )
        self.pronouncer = Pronouncer(
            settings.default_lexicons, settings.key_lexicons, settings.max_lexicons_per_request
        )

    async def plan(
        self, request: SpeechRequest, engine_name: str | None = None, timed: bool = False, principal: str | None = None
    ) -> Plan:
        """The request resolved: its voice and engine, its text as spoken (what limits, chunk caps and the cache key
        count), its chunks and its cache key."""
        written = collapse_whitespace(clean_text(request.text))
        if not is_speakable(written):
            raise InvalidInput("text is empty: it holds nothing to speak", code="empty_text")
        if len(written) > self.settings.max_text_chars:
            raise PayloadTooLarge(
                f"text is {len(written)} characters; the limit is {self.settings.max_text_chars}", code="text_too_long"
            )
        plan = await self.plan_voice(request, engine_name, timed, principal)
        caps = chunk_caps(plan.engine, request.max_chars_per_gen, request.max_sentences_per_gen)
        if is_ssml(written):
            plan, text, chunks = await self.ssml_chunks(plan, written, caps)
        else:
            spoken = self.spoken(plan, written)
            text = spoken.text
            # Caps count spoken characters, so one step is one step's worth of audio however the text was written.
            chunks = spoken.chunks(*caps)
        # A registered voice replaced under the same id must not hit audio cached for its old transcript.
        voice = plan.voice
        cache_voice = f"{plan.voice_key}@{voice.created_at}" if isinstance(voice, VoiceEntry) else plan.voice_key
        checkpoint = plan.engine.checkpoint
        key = (
            synthesis_key(
                text=text,
                voice_id=cache_voice,
                engine=plan.engine.name,
                checkpoint=checkpoint,
                # Where the text is cut into generations, and the pauses between them, change the audio too.
                params={**plan.options.cache_params(), "chunks": [_chunk_key(chunk) for chunk in chunks]},
            )
            if checkpoint is not None
            else None
        )
        return dataclasses.replace(plan, text=text, chunks=chunks, cache_key=key)

    async def plan_voice(
        self,
        request: VoiceRequest,
        engine_name: str | None = None,
        timed: bool | None = False,
        principal: str | None = None,
    ) -> Plan:
        """Everything but the text: the voice, its engine (ready), the language, the engine's parameters and the
        lexicons (those the request names in `lexicons`, its key's (`principal`) and the node's). A live request
        plans this much before its text arrives. `timed` None: word timings where the engine has them."""
        ids = self.pronouncer.ids(getattr(request, "lexicons", None), principal)
        lexicons = tuple([await self.lexicons.resolve(lexicon_id) for lexicon_id in ids])
        if request.voice_id is None:  # the default voice: a failed default engine cannot even list it
            self.pool.engine_for(self.settings.default_engine)
        voice = await self.catalog.resolve(request.voice_id)
        if engine_name is not None and voice.engine != engine_name:
            raise InvalidInput(
                f"voice {str(request.voice_id)[:40]!r} belongs to engine {voice.engine}, not {engine_name} (the model)",
                code="voice_engine_mismatch",
                detail={"param": "voice"},
            )
        engine = self.pool.engine_for(voice.engine)
        if timed is None:
            timed = engine.word_timings
        if timed and not engine.word_timings:
            raise InvalidInput(
                f"engine {engine.name!r} cannot tell when each word is spoken; word timings come from Kokoro voices",
                code="timestamps_unsupported",
            )
        language = resolve_language(request.language or self.catalog.language_of(voice))
        engine.check_language(language)
        options = SynthesisOptions(language=language, params=engine_params(engine, request))
        voice_key = voice.voice_id if isinstance(voice, VoiceEntry) else voice.name
        return Plan(engine, voice, voice_key, "", [], options, None, timed, lexicons)

    def spoken(self, plan: Plan, written: str) -> Spoken:
        """`written` as the plan's engine will say it (lexicons and inline phonemes applied), within POLYTTS_MAX_SPOKEN_CHARS (413 `spoken_too_long`); text
        of which the engine reads nothing (every letter of a script the language does not read) is a 422
        `unreadable_text` naming the scripts."""
        spoken = self.pronounced(plan, written)
        if not is_speakable(spoken.text):
            language = plan.options.language
            scripts = " and ".join(unreadable_scripts(written, language)[:3])
            raise InvalidInput(
                f"text holds nothing {language.name} reads: its letters are {scripts}, which {plan.engine.name} "
                "skips rather than spell out letter by letter; choose a voice or `language` that reads them"
                if scripts
                else "text holds only emoji and pictographs, which are not spoken"
                if holds_pictographs(written)
                else f"text holds nothing {plan.engine.name} says in {language.name}",
                code="unreadable_text",
            )
        check_spoken_length(len(written), len(spoken.text), self.settings.max_spoken_chars)
        return spoken

    async def ssml_chunks(self, plan: Plan, document: str, caps: tuple[int, int, int]) -> tuple[Plan, str, list[Chunk]]:
        """An SSML document's chunks (text.ssml): each segment pronounced in its own language and chunked, its
        chunks carrying its rate and language and the last one its break; the plan with the document's lexicons
        (`<lexicon>`) first among its own; the text as spoken, the segments' joined."""
        engine, options = plan.engine, plan.options
        ssml = parse_ssml(document, english=options.language.code in ("en-us", "en-gb"))
        named = [lexicon.lexicon_id for lexicon in plan.lexicons]
        new = [lexicon_id for lexicon_id in dict.fromkeys(ssml.lexicons) if lexicon_id not in named]
        if len(new) + len(named) > self.settings.max_lexicons_per_request:
            raise InvalidInput(
                f"the request is pronounced with {len(new) + len(named)} lexicons; the limit is "
                f"{self.settings.max_lexicons_per_request} (POLYTTS_MAX_LEXICONS_PER_REQUEST)",
                code="too_many_lexicons",
            )
        added = tuple([await self.lexicons.resolve(lexicon_id) for lexicon_id in new])
        voices: dict[str, VoiceRef] = {
            name: self.stock_voice(plan, name) for name in dict.fromkeys(s.voice for s in ssml.segments) if name
        }
        plan = dataclasses.replace(plan, lexicons=added + plan.lexicons, voices=voices)
        first, cap, sentences = caps
        chunks: list[Chunk] = []
        texts: list[str] = []
        lead = 0.0  # a break before any text: silence before the first chunk
        for segment in ssml.segments:
            if segment.rate is not None and "speed" not in options.params:
                raise InvalidInput(
                    f"engine {engine.name!r} takes no speed, so SSML <prosody rate> cannot be honoured",
                    code="invalid_ssml",
                )
            said = options
            if segment.language is not None:
                said = dataclasses.replace(options, language=resolve_language(segment.language))
                engine.check_language(said.language)
            if segment.text:
                spoken = self.pronouncer.spoken(segment.text, plan.lexicons, engine, said, segment.edits)
                if is_speakable(spoken.text):
                    parts = spoken.chunks(cap if chunks else first, cap, sentences)
                    parts = [
                        dataclasses.replace(c, rate=segment.rate, language=segment.language, voice=segment.voice)
                        for c in parts
                    ]
                    if lead and not chunks:
                        parts[0] = dataclasses.replace(parts[0], lead=lead)
                    chunks += parts
                    texts.append(spoken.text)
            if segment.silence is not None and chunks:
                chunks[-1] = dataclasses.replace(chunks[-1], silence=(chunks[-1].silence or 0.0) + segment.silence)
            elif segment.silence is not None:
                lead += segment.silence
        if not chunks:
            raise InvalidInput("the SSML holds nothing to speak", code="empty_text")
        text = "\n".join(texts)
        check_spoken_length(len(document), len(text), self.settings.max_spoken_chars)
        return plan, text, chunks

    def stock_voice(self, plan: Plan, name: str) -> BuiltinVoice:
        """The stock voice an SSML `<voice name>` names, of the plan's engine (which is ready, so its voices are
        listed); a 422 `invalid_ssml` naming it otherwise."""
        voice = self.catalog.builtins().get(name)
        if voice is None or voice.engine != plan.engine.name:
            raise InvalidInput(
                f"SSML <voice name={excerpt(name)!r}> is not a stock voice of engine {plan.engine.name!r}",
                code="invalid_ssml",
                detail={"element": "voice", "voice": excerpt(name)},
            )
        return voice

    def pronounced(self, plan: Plan, text: str) -> Spoken:
        """`text` as the plan's engine says it with the plan's lexicons and inline phonemes (`Pronouncer.spoken`)."""
        return self.pronouncer.spoken(text, plan.lexicons, plan.engine, plan.options)

    def live_text(
        self,
        plan: Plan,
        wake: Callable[[], None],
        phrase_chars: tuple[int, int] | None = None,
        ssml: bool | None = None,
    ) -> LiveText:
        """The text of a live request planned as `plan` (its voice), cut into phrases as it arrives: each phrase as
        the engine says it, cut again when that is longer than the engine's cap, every limit counting spoken
        characters as `plan` does. `phrase_chars`: the request's own caps of its first and later phrases (a
        client's chunk schedule), within the engine's. `ssml`: as `LiveText` has it. A stock voice an SSML `<voice>`
        names is added to `plan.voices` as its tag arrives, before any phrase names it."""
        first, cap, _ = chunk_caps(plan.engine, None, None)
        if phrase_chars is not None:
            cap = min(cap, phrase_chars[1]) if cap else phrase_chars[1]
            first = min(phrase_chars[0], cap)
        return LiveText(
            PhraseSegmenter(first, cap),
            self.settings.max_text_chars,
            wake,
            speak=lambda text: self.pronounced(plan, text),
            max_spoken_chars=self.settings.max_spoken_chars,
            pronounce=lambda text, edits, language, rate: self.pronounced_ssml(plan, text, edits, language, rate),
            ssml=ssml,
            english=plan.options.language.code in ("en-us", "en-gb"),
            voice=lambda name: self.add_live_voice(plan, name),
        )

    def add_live_voice(self, plan: Plan, name: str) -> None:
        """The stock voice a live request's SSML `<voice name>` names, checked and added to the plan's voices (the
        GPU thread looks up each chunk's there)."""
        plan.voices.setdefault(name, self.stock_voice(plan, name))

    def pronounced_ssml(
        self, plan: Plan, text: str, edits: list[Edit], language: str | None, rate: float | None
    ) -> Spoken:
        """A phrase of live SSML as the plan's engine says it: its elements' `edits`, in its `language` (None: the
        plan's), with the plan's lexicons; a `rate` is refused where the engine takes no speed."""
        options = plan.options
        if rate is not None and "speed" not in options.params:
            raise InvalidInput(
                f"engine {plan.engine.name!r} takes no speed, so SSML <prosody rate> cannot be honoured",
                code="invalid_ssml",
            )
        if language is not None:
            options = dataclasses.replace(options, language=resolve_language(language))
            plan.engine.check_language(options.language)
        return self.pronouncer.spoken(text, plan.lexicons, plan.engine, options, edits)


def engine_params(engine: Engine, request: VoiceRequest) -> dict[str, Param]:
    """The engine family's generation parameters: its defaults, overridden by what the request gave."""
    given = {name: value for name in ENGINE_PARAMS if (value := getattr(request, name, None)) is not None}
    spec = FAMILIES[engine.name]
    foreign = sorted(set(given) - set(spec.params.model_fields))
    if foreign:
        takes = ", ".join(spec.params.model_fields) or "none"
        verb = "does" if len(foreign) == 1 else "do"
        raise InvalidInput(
            f"{' and '.join(foreign)} {verb} not apply to engine {engine.name!r} (it takes: {takes})",
            code="unsupported_parameter",
        )
    try:
        params: dict[str, Param] = spec.params.model_validate(given).model_dump()
    except ValidationError as exc:  # a check of the family's own, beyond the request field's range
        raise invalid_fields(exc.errors()) from None
    if isinstance(params.get("speed"), float):
        params["speed"] = round(float(params["speed"]), 3)
    engine.check_params(params)
    return params


def chunk_caps(
    engine: Engine, max_chars_per_gen: int | None, max_sentences_per_gen: int | None
) -> tuple[int, int, int]:
    """(first chunk, every chunk, sentences per chunk) caps: the engine's, or the request's own (0 unlimited)."""
    caps = engine.caps
    max_chars = caps.max_chunk_chars if max_chars_per_gen is None else max_chars_per_gen
    if 0 < max_chars < MIN_CHARS_PER_GEN:
        raise InvalidInput(
            f"max_chars_per_gen must be 0 (unlimited) or at least {MIN_CHARS_PER_GEN}; a smaller cap multiplies "
            "the work without making the first audio earlier",
            code="invalid_input",
        )
    max_sentences = caps.max_sentences if max_sentences_per_gen is None else max_sentences_per_gen
    first = caps.first_chunk_chars or max_chars
    if max_chars:
        first = min(first, max_chars) if first else max_chars
    return first, max_chars, max_sentences


def _chunk_key(chunk: Chunk) -> list[object]:
    """What of a chunk's cut changes its audio: its length, its pause, and SSML's silence, rate, language and lead."""
    own = [chunk.silence, chunk.rate, chunk.language, *([chunk.lead] if chunk.lead is not None else [])]
    if chunk.voice is not None:
        own.append(chunk.voice)
    return [len(chunk.text), chunk.pause, *(own if any(value is not None for value in own) else [])]
