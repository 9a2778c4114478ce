"""How a request's text is pronounced before its engine reads it: inline phonemes (`[word](/phonemes/)`), then the
lexicons that apply (the request's own, then its API key's, then the node's), emoji and pictographs left out (never
read by name), the engine's own rewriting last.

Each step rewrites the text as spoken and keeps it traced to the text as written (text.spoken), so word timings name
the words as written and the limits and chunk caps count what is said. An alias is text the engine then normalizes
like any other; phonemes ride in the text as phoneme spans (text.phoneme_spans), which the cache key holds too, so a
changed lexicon (another id) never serves the audio of the old one. An engine that reads text only
(`Engine.takes_phonemes` false) is given the aliases, and phonemes that would reach it are a 422 naming it.
"""

from __future__ import annotations

from collections.abc import Sequence

from engines.base import Engine, SynthesisOptions
from errors import InvalidInput
from lexicons.lexicon import Lexicon
from lexicons.matcher import Matchers
from text.inline_phonemes import inline_phonemes
from text.phoneme_spans import encode, holds_phonemes
from text.spoken import Edit, Spoken
from text.symbols import skip_pictographs


class Pronouncer:
    def __init__(
        self,
        defaults: Sequence[str] = (),
        key_defaults: dict[str, list[str]] | None = None,
        max_per_request: int = 8,
    ) -> None:
        self.defaults = tuple(defaults)
        self.key_defaults = key_defaults or {}
        self.max_per_request = max_per_request
        self.matchers = Matchers()

    def ids(self, named: Sequence[str] | None, principal: str | None) -> list[str]:
        """The ids of the lexicons a request is pronounced with, in precedence order: those it names, its key's,
        the node's (each once); a 422 `too_many_lexicons` past the bound."""
        ids = list(dict.fromkeys([*(named or ()), *self.key_defaults.get(principal or "", ()), *self.defaults]))
        if len(ids) > self.max_per_request:
            raise InvalidInput(
                f"the request is pronounced with {len(ids)} lexicons (its own and the defaults); the limit is "
                f"{self.max_per_request} (POLYTTS_MAX_LEXICONS_PER_REQUEST)",
                code="too_many_lexicons",
            )
        return ids

    def spoken(
        self,
        text: str,
        lexicons: Sequence[Lexicon],
        engine: Engine,
        options: SynthesisOptions,
        said: Sequence[Edit] | None = None,
    ) -> Spoken:
        """`text` (cleaned, whitespace collapsed) as `engine` says it, traced to the text as written: the text with
        its inline phoneme markup replaced by the words it marks, or, for a segment of SSML, `said`, its elements'
        edits (text.ssml), instead of inline markup; then its emoji and pictographs left out (text.symbols)."""
        written, edits = (text, list(said)) if said is not None else inline_phonemes(text)
        if lexicons:
            matcher = self.matchers.get(lexicons, options.language.code)
            edits = _merged(
                edits,
                [
                    (start, end, entry.alias if entry.alias is not None else encode(entry.phonemes or ""))
                    for start, end, entry in matcher.matches(written)
                ],
            )
        pronounced = skip_pictographs(Spoken.of(written).edited(edits) if edits else Spoken.of(written))
        if not engine.takes_phonemes and holds_phonemes(pronounced.text):
            raise InvalidInput(
                f"engine {engine.name!r} reads text, not phonemes: a lexicon's phoneme entry, inline phonemes or "
                "SSML <phoneme> cannot be said by it (give an alias instead)",
                code="phonemes_unsupported",
                detail={"engine": engine.name},
            )
        return pronounced.then(engine.spoken_text(pronounced.text, options))


def _merged(inline: list[Edit], matched: list[Edit]) -> list[Edit]:
    """Both edits in order; a lexicon match that overlaps inline markup gives way to it (the writer's own)."""
    if not inline:
        return matched
    taken = [(start, end) for start, end, _ in inline]
    kept = [edit for edit in matched if not any(edit[0] < end and start < edit[1] for start, end in taken)]
    return sorted([*inline, *kept])
