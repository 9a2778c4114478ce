"""Where text is cut into generations: sentence and clause splitting, chunking.

Chunking decides where one generation ends and the next begins, and what silence belongs between them. A listener
hears a chunk boundary as a pause, so boundaries go where a speaker would pause: after a sentence, else after a
clause mark (comma, semicolon, colon, dash), and inside an unpunctuated phrase only when it is longer than a hard
cap. `chunk_text` plans a whole text; `PhraseSegmenter` does the same for text that arrives a few words at a time.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, overload

from text.phoneme_spans import is_phoneme_char

# --- where text may be cut --------------------------------------------------------------------------------------

Pause = Literal["none", "clause", "sentence", "paragraph"]
"""The boundary that ends a chunk, strongest last; it says how much silence belongs after the chunk."""


@dataclass(frozen=True)
class Chunk:
    """One generation's text and the boundary that ends it."""

    text: str
    """What the engine speaks: the text as spoken (text/spoken.py), whose characters every cap counts. Empty only
    for a live request's trailing `<break>`: `lead` seconds of silence and no generation."""
    pause: Pause
    written: str | None = None
    """The text as written that `text` speaks, where the two differ ("$4.50" for "four dollars and fifty cents"):
    word timings name its words."""
    parts: tuple[Chunk, ...] = field(default=(), compare=False, repr=False)
    """The clauses the chunk packs, in order, each ended by its own boundary (empty: a single clause): where a step
    may end early (`cut_short`)."""
    silence: float | None = None
    """Seconds of silence after it, exactly (an SSML `<break>`), instead of the pause its boundary gives."""
    rate: float | None = None
    """Its speed, times the request's (SSML `<prosody rate>`); None: the request's."""
    language: str | None = None
    """Its language (SSML `<lang>`), another G2P in the same voice; None: the request's."""
    voice: str | None = None
    """The stock voice that says it (SSML `<voice>`); None: the request's."""
    lead: float | None = None
    """Seconds of silence before it, exactly (an SSML `<break>` before any text, or one the chunk before could no
    longer carry on a live request): the pause after the chunk before counts towards it."""


_CLOSERS = "\"'”’»)\\]}」』）】〕〉》"
_MARK = re.compile(
    rf"(?P<stop>[.!?…]+)[{_CLOSERS}]*"
    rf"|(?P<cjk_stop>[。！？]+)[{_CLOSERS}]*"
    rf"|(?P<clause>[,;:、，；：]|—+|--+|–|(?<=\s)-(?=\s))[{_CLOSERS}]*"
    r"|(?P<newline>\n)"
)
_SPACE = re.compile(r"\s*")
_WORD = re.compile(r"[\w'’]*")
_DOTTED = re.compile(r"[^\W\d_]+(?:\.[^\W\d_]+)+")
_LOOKBACK = 32
"""How far back a full stop looks for the word it ends; also the context PhraseSegmenter keeps when it compacts."""

# A full stop after one of these never ends a sentence on the same line ("Dr. Smith", "e.g. apples").
_TITLES = frozenset(
    "mr mrs ms mx dr prof rev hon gen col capt lt sgt cpl maj adm gov sen rep pres supt fr mt messrs mme mlle "
    "e.g i.e cf vs viz approx".split()
)
# ... nor after one of these when a number follows ("No. 5", "Jan. 3", "p. 12").
_BEFORE_NUMBERS = frozenset(
    "no nos vol vols fig figs p pp ch chap sec art jan feb mar apr jun jul aug sep sept oct nov dec".split()
)
# ... and after one of these only when the next word is capitalised ("etc. The", but "Apple Inc. shares").
_AMBIGUOUS = frozenset("etc inc ltd co corp jr sr st ave blvd rd esq bros al dept est ft".split())
# Words that often open a sentence: after an ambiguous abbreviation, one of them means a new sentence began.
_SENTENCE_OPENERS = frozenset(
    "the a an this that these those it its he she we they i you my our your his her their there here then now "
    "so but and or yet still also however meanwhile afterwards later today tomorrow yesterday in on at by for "
    "from with after before during when while if as since because although though what who why how where which "
    "one some many most all no yes not every each both another others everyone nobody nothing everything "
    "thanks please let let's i'm it's that's there's we're they're you're he's she's".split()
)


@dataclass(frozen=True)
class _Piece:
    """A clause of the text, by offsets: text[start:end], ended by `pause` ("none": the text simply stops)."""

    start: int
    end: int
    pause: Pause


def _clean(text: str) -> str:
    return " ".join(text.split())


def _span(text: str, start: int, end: int) -> int:
    """Length of text[start:end] as a chunk: whitespace runs collapsed."""
    return len(_clean(text[start:end]))


_WAIT: Final = "wait"
"""What a mark makes while the text after it is too short to decide (only ever at the end of the text)."""


def _is_sentence_end(
    text: str, mark_start: int, stop: str, following: str, complete: bool
) -> Pause | Literal["wait"] | None:
    """What a run of full stops, question or exclamation marks followed by a space ends: a sentence, a clause
    (an ellipsis or a quoted question going on in lower case: `"Why?" she asked`), or nothing (an abbreviation).
    `following` is the next word ("" at the end of the text), `complete` whether it may still grow."""
    if not following:
        return "sentence"
    next_char = following[0]
    lower_next = next_char.islower()
    if "?" in stop or "!" in stop or "…" in stop or len(stop) > 1:
        return "clause" if lower_next else "sentence"
    begin = mark_start
    while begin > max(0, mark_start - _LOOKBACK) and not text[begin - 1].isspace():
        begin -= 1
    word = text[begin:mark_start].lstrip("\"'“‘([{«¿¡").rstrip(_CLOSERS)
    key = word.lower()
    dotted = _DOTTED.fullmatch(key) is not None  # "u.s", "a.m", "ph.d"; not "3.14159"
    abbreviation = key in _TITLES or key in _BEFORE_NUMBERS or key in _AMBIGUOUS or dotted
    initial = len(word) == 1 and word.isupper()
    if (abbreviation or initial) and lower_next:
        return None
    if key in _TITLES or initial:
        return None
    if key in _BEFORE_NUMBERS:
        return None if next_char.isdigit() else "sentence"
    if key == "st" and not _previous_word(text, begin)[:1].isupper():
        return None  # "St. Louis" (saint); "Elm St. The" (street) is ambiguous like the rest
    if key in _AMBIGUOUS or dotted:
        # "in the U.S. The" ends a sentence, "the U.S. Army" does not: only a word that often opens a sentence
        # counts as the start of the next one. A missed boundary costs a longer chunk; a false one, a broken phrase.
        if not complete:
            return _WAIT
        return "sentence" if following.lower() in _SENTENCE_OPENERS else None
    return "sentence"


def _previous_word(text: str, before: int) -> str:
    """The word before text[before:], looking back at most _LOOKBACK characters."""
    floor = max(0, before - _LOOKBACK)
    end = before
    while end > floor and text[end - 1].isspace():
        end -= 1
    begin = end
    while begin > floor and not text[begin - 1].isspace():
        begin -= 1
    return text[begin:end]


def _mark_pause(
    text: str, match: re.Match[str], following: str, complete: bool, newlines: int
) -> Pause | Literal["wait"] | None:
    """The boundary a punctuation mark makes, given the word after it; None when it makes none, _WAIT when the
    word after it is still incomplete and matters."""
    if newlines:
        return "paragraph" if newlines > 1 else "sentence"
    spaced = match.end() == len(text) or text[match.end()].isspace()
    if match.group("stop"):
        return _is_sentence_end(text, match.start(), match.group("stop"), following, complete) if spaced else None
    if match.group("cjk_stop"):
        return "sentence"
    mark = match.group("clause")
    if mark in ",;:":
        return "clause" if spaced else None  # "1,234", "3:30"
    if mark == "–" and match.start() > 0 and text[match.start() - 1].isdigit() and following[:1].isdigit():
        return None  # a range: "1990–2000"
    return "clause"


def _run_end(pattern: re.Pattern[str], text: str, pos: int) -> int:
    """Where the run of `pattern` (`_SPACE` or `_WORD`, which match the empty string too) starting at `pos` ends."""
    match = pattern.match(text, pos)
    assert match is not None, "the pattern matches the empty string"
    return match.end()


def _pieces(text: str, start: int, final: bool) -> tuple[list[_Piece], int]:
    """Clause pieces of text[start:] whose ends are decided, and how far the text after them surely runs.

    A mark is decided once the first non-space character after it is known (an abbreviation's full stop depends on
    the next word's case; a paragraph on the blank line before it), after an ambiguous abbreviation once the whole
    next word is, or at the end of the text when `final`. The scan stops at the first undecided mark, which can
    only be near the end of the text; the open piece after the decided ones reaches at least to the end of that
    mark (or of the text). With `final`, the text after the last mark becomes a piece ended by "none".
    """
    pieces: list[_Piece] = []
    begin = _run_end(_SPACE, text, start)
    pos = begin
    while (match := _MARK.search(text, pos)) is not None:
        after = _run_end(_SPACE, text, match.end())
        if after == len(text) and not final:
            return pieces, match.end()
        word_end = _run_end(_WORD, text, after)
        following = text[after : max(word_end, min(after + 1, len(text)))]
        newlines = text.count("\n", match.start() if match.group("newline") else match.end(), after)
        pause = _mark_pause(text, match, following, final or word_end < len(text), newlines)
        if pause == _WAIT:
            return pieces, match.end()
        if pause is None:
            pos = match.end()
            continue
        end = match.start() if match.group("newline") else match.end()
        pieces.append(_Piece(begin, end, pause))
        begin = pos = after
    if not final:
        return pieces, len(text.rstrip())
    tail_end = len(text.rstrip())
    if tail_end > begin:
        pieces.append(_Piece(begin, tail_end, "none"))
    return pieces, tail_end


def _ends_sentence(piece: _Piece) -> bool:
    return piece.pause in ("sentence", "paragraph")


def _sentences(pieces: Sequence[_Piece]) -> list[list[_Piece]]:
    sentences: list[list[_Piece]] = [[]]
    for piece in pieces:
        sentences[-1].append(piece)
        if _ends_sentence(piece):
            sentences.append([])
    return [s for s in sentences if s]


# Words a phrase may start with: a cut just before one of them falls where a speaker could pause.
_CLAUSE_OPENERS = frozenset(
    "and but or nor so yet because although though while whereas unless until since when whenever where wherever "
    "which who whom whose that if whether then than as once after before".split()
)
_PREPOSITIONS = frozenset(
    "with without for from into onto through over under about between during across against along among around "
    "behind beyond by in on at to of near toward towards upon within like per via despite except".split()
)
# Words that bind to what follows: a cut right after one of them strands it ("the | kitchen").
_BINDERS = frozenset(
    "a an the my your his her its our their this these those some any no every each either neither such what "
    "very too quite rather more most less least much many few several all both half to of in on at by for "
    "with from into is are was were be been being am has have had do does did will would shall should can could "
    "may might must not and or but nor".split()
)


def _word_key(word: str) -> str:
    return word.strip(_CLOSERS + "\"'“‘([{«¿¡.,;:!?").lower()


def _cut_score(previous: str, following: str) -> float:
    if _word_key(previous) in _BINDERS:
        return 0.6
    key = _word_key(following)
    if key in _CLAUSE_OPENERS:
        return 0.0
    if key in _PREPOSITIONS:
        return 0.15
    return 0.3


def _natural_cut(text: str, start: int, end: int, cap: int, target: float, complete: bool) -> tuple[int, int] | None:
    """Where to cut text[start:end], a phrase longer than the hard cap with no punctuation to cut at.

    The head is at most `cap` characters. Among the word gaps that allow it, the cut goes to the one with the
    lowest score: distance from `target` (as a fraction of `cap`) plus a cost for the words around it: 0 before a
    conjunction or relative pronoun ("… | which …"), 0.15 before a preposition ("… | on the shelf"), 0.3 between
    two content words, 0.6 after a word that binds to the next one (an article, a preposition, an auxiliary: never
    "the | kitchen"). A phrase without any gap that short (one huge word, unspaced CJK) is cut at `cap` characters.
    Returns (end of head, start of the rest), or None when the text seen so far cannot decide (not `complete`: the
    word after the last candidate gap may still be growing).
    """
    best: tuple[float, int, int] | None = None
    length = 0  # collapsed length of text[start:gap]
    previous_end = start
    words = re.finditer(r"\S+", text[start:end])
    first = next(words, None)
    if first is None:
        return None
    length = first.end() - first.start()
    previous = first.group()
    previous_end = start + first.end()
    for word in words:
        if length > cap:
            break
        if not complete and start + word.end() == end:
            return None  # this word may still grow
        score = _cut_score(previous, word.group()) + abs(length - target) / max(cap, 1)
        if best is None or score <= best[0]:
            best = (score, previous_end, start + word.start())
        length += 1 + word.end() - word.start()
        previous, previous_end = word.group(), start + word.end()
    else:
        if length <= cap and not complete:
            return None
    if best is not None:
        return best[1], best[2]
    cut = start + cap  # no gap within the cap: count characters (the phrase has no spaces to collapse before cap)
    return cut, cut


@overload
def _take(
    text: str, pieces: list[_Piece], cap: int, hard: int, balanced: bool, open_last: Literal[False] = False
) -> tuple[list[_Piece], list[_Piece]]: ...
@overload
def _take(
    text: str, pieces: list[_Piece], cap: int, hard: int, balanced: bool, open_last: bool
) -> tuple[list[_Piece], list[_Piece]] | None: ...
def _take(
    text: str, pieces: list[_Piece], cap: int, hard: int, balanced: bool, open_last: bool = False
) -> tuple[list[_Piece], list[_Piece]] | None:
    """The head chunk of a sentence (or what is left of one) longer than `cap`, and the pieces after it.

    Whole clauses are packed up to `cap`; a first clause longer than that is taken whole up to `hard`, and one
    longer still is cut by `_natural_cut`, aiming at `cap` for the head or, when `balanced`, at equal parts.
    `open_last`: the last piece is a clause still arriving (PhraseSegmenter), known to be at least this long;
    None when the head depends on how it goes on.
    """
    count = 0
    while count < len(pieces) and _span(text, pieces[0].start, pieces[count].end) <= cap:
        count += 1
    if count:
        return pieces[:count], pieces[count:]
    first = pieces[0]
    still_open = open_last and len(pieces) == 1
    length = _span(text, first.start, first.end)
    if length <= hard:
        return None if still_open else ([first], pieces[1:])
    target = length / math.ceil(length / cap) if balanced else cap
    cut = _natural_cut(text, first.start, first.end, cap, target, complete=not still_open)
    if cut is None:
        return None
    head_end, rest_start = cut
    return [_Piece(first.start, head_end, "none")], [_Piece(rest_start, first.end, first.pause), *pieces[1:]]


def _chunk(text: str, pieces: Sequence[_Piece], written: Callable[[int, int], str] | None = None) -> Chunk:
    start, end = pieces[0].start, pieces[-1].end
    spoken = _clean(text[start:end])
    as_written = _clean(written(start, end)) if written is not None else spoken
    parts = tuple(_chunk(text, [piece], written) for piece in pieces) if len(pieces) > 1 else ()
    return Chunk(spoken, pieces[-1].pause, None if as_written == spoken else as_written, parts)


def cut_short(chunk: Chunk, max_chars: int, inside_clauses: bool = False) -> tuple[Chunk, Chunk] | None:
    """The chunk as two shorter ones: its leading clauses packed up to `max_chars` (its first clause at least) and
    the rest; None when it is a single clause, or when the rest would be shorter than half of `max_chars` (every step
    costs the model's padding and set-up: one that spares so little is not worth it). It is cut only after
    one of its own clauses or sentences, where chunking may cut anyway, so no cut falls inside a phrase; joined, the
    two give the chunk back. `inside_clauses`: a first clause longer than `max_chars` is cut at a word gap inside it
    instead (`_cut_inside`), where one allows it."""
    if inside_clauses and len((chunk.parts or (chunk,))[0].text) > max_chars:
        inside = _cut_inside(chunk, max_chars)
        if inside is not None:
            return _keeping(chunk, *inside)
    parts = chunk.parts
    if len(parts) < 2:
        return None
    count = 1
    while count < len(parts) - 1 and len(" ".join(p.text for p in parts[: count + 1])) <= max_chars:
        count += 1
    spoken = _split_at(chunk.text, [p.text for p in parts], count)
    if spoken is None or 2 * len(spoken[1]) < max_chars:
        return None
    written: tuple[str | None, str | None] = (None, None)
    if chunk.written is not None:
        found = _split_at(chunk.written, [p.text if p.written is None else p.written for p in parts], count)
        if found is None:
            return None
        written = found
    head, rest = parts[:count], parts[count:]
    head_chunk = Chunk(
        spoken[0], head[-1].pause, None if written[0] == spoken[0] else written[0], head if count > 1 else ()
    )
    rest_chunk = Chunk(
        spoken[1], chunk.pause, None if written[1] == spoken[1] else written[1], rest if len(rest) > 1 else ()
    )
    return _keeping(chunk, head_chunk, rest_chunk)


def _keeping(chunk: Chunk, head: Chunk, rest: Chunk) -> tuple[Chunk, Chunk]:
    """Both halves of `chunk` with its own rate, language and voice, the head with its lead, the rest ending as the
    chunk did (its exact silence included)."""
    if (
        chunk.rate is None
        and chunk.language is None
        and chunk.silence is None
        and chunk.lead is None
        and chunk.voice is None
    ):
        return head, rest
    rate, language, voice = chunk.rate, chunk.language, chunk.voice
    return (
        dataclasses.replace(head, rate=rate, language=language, voice=voice, lead=chunk.lead),
        dataclasses.replace(rest, rate=rate, language=language, voice=voice, silence=chunk.silence),
    )


def _cut_inside(chunk: Chunk, max_chars: int) -> tuple[Chunk, Chunk] | None:
    """The chunk cut at a word gap inside its first clause: a head of at most `max_chars`, as close to it as the
    words allow (half of it at least), ended by no pause (the seam joiner leaves a word gap), and the rest. The gap is scored as a natural
    cut is (`_cut_score`), never right after a word that binds to the next ("the | kitchen"), and only where the
    words on one side are spoken as written: a number or a symbol read out ("$4.50") is never split between two
    steps, and each side keeps the text as written that it speaks. None where no gap qualifies, or the rest would
    be shorter than half of `max_chars`."""
    spoken, written = chunk.text, chunk.written or chunk.text
    clause_words = len((chunk.parts or (chunk,))[0].text.split())
    said = list(re.finditer(r"\S+", spoken))
    as_written = list(re.finditer(r"\S+", written))
    same_head = next(
        (i for i, (a, b) in enumerate(zip(said, as_written, strict=False)) if a.group() != b.group()), len(said)
    )
    same_tail = next(
        (
            i
            for i, (a, b) in enumerate(zip(reversed(said), reversed(as_written), strict=False))
            if a.group() != b.group()
        ),
        len(said),
    )
    best: tuple[float, int, int] | None = None
    for gap in range(1, min(clause_words, len(said))):  # the gap after `gap` words
        length = said[gap - 1].end()
        if length > max_chars:
            break
        if 2 * length < max_chars:  # a step that short spares the wait little and costs a step's set-up
            continue
        previous, following = said[gap - 1].group(), said[gap].group()
        if _word_key(previous) in _BINDERS or 2 * (len(spoken) - said[gap].start()) < max_chars:
            continue
        # The gap in the text as written: counted from the start where the head is spoken as written, else from
        # the end where the rest is.
        at = gap if gap <= same_head else len(as_written) - (len(said) - gap)
        if (gap > same_head and len(said) - gap > same_tail) or not 0 < at < len(as_written):
            continue
        score = _cut_score(previous, following) + (max_chars - length) / max_chars
        if best is None or score < best[0]:
            best = (score, gap, at)
    if best is None:
        return None
    _, gap, at = best
    heads = (spoken[: said[gap - 1].end()], written[: as_written[at - 1].end()])
    rests = (spoken[said[gap].start() :], written[as_written[at].start() :])
    parts = chunk.parts
    rest_parts: tuple[Chunk, ...] = ()
    if len(parts) > 1:
        first_rest = parts[0].text[len(heads[0]) :].lstrip()
        first_written = (parts[0].written or parts[0].text)[len(heads[1]) :].lstrip()
        first = Chunk(first_rest, parts[0].pause, None if first_written == first_rest else first_written)
        rest_parts = (first, *parts[1:])
    return (
        Chunk(heads[0], "none", None if heads[1] == heads[0] else heads[1]),
        Chunk(rests[0], chunk.pause, None if rests[1] == rests[0] else rests[1], rest_parts),
    )


def _split_at(whole: str, pieces: list[str], count: int) -> tuple[str, str] | None:
    """`whole`, the `pieces` in order with a space or nothing between them, cut before piece `count`; None when the
    pieces do not make it up."""
    pos, cut = 0, 0
    for index, piece in enumerate(pieces):
        if not whole.startswith(piece, pos) and whole.startswith(" " + piece, pos):
            pos += 1
        if not whole.startswith(piece, pos):
            return None
        if index == count:
            cut = pos
        pos += len(piece)
    return (whole[:cut].rstrip(), whole[cut:]) if pos == len(whole) else None


def _caps(first_chunk_chars: int, max_chunk_chars: int) -> tuple[int, int, int]:
    """(first cap, hard cap of the first chunk, cap of every later chunk); 0 means unlimited.

    The first chunk's hard cap is twice its cap (never above the later cap): time to first audio grows with the
    first chunk's length, so a clause up to twice the target at worst doubles that wait once per request, a price
    worth paying against a pause heard in the middle of a phrase; beyond it the wait is no longer "early" and the
    phrase is cut at its most natural gap. Later chunks have one cap, the engine's: no generation may exceed it.
    """
    cap = max_chunk_chars or sys.maxsize
    first = min(first_chunk_chars or cap, cap)
    return first, min(2 * first, cap), cap


def collapse_whitespace(text: str) -> str:
    """Collapse runs of spaces and tabs; keep a line break as a sentence boundary and one blank line as a
    paragraph boundary."""
    paragraphs = re.split(r"\n\s*\n", text.replace("\r\n", "\n").replace("\r", "\n"))
    cleaned = ("\n".join(line for line in map(_clean, p.split("\n")) if line) for p in paragraphs)
    return "\n\n".join(p for p in cleaned if p)


def is_speakable(text: str) -> bool:
    """Whether the text holds something to speak: a letter, a digit or a symbol, or phonemes (text.phoneme_spans),
    not only spaces and punctuation."""
    return any(unicodedata.category(char)[0] in "LNS" or is_phoneme_char(char) for char in text)


def split_sentences(text: str) -> list[str]:
    """Sentences of the text; full stops of abbreviations, initials and decimals do not end one."""
    text = collapse_whitespace(text)
    return [_clean(text[start:end]) for start, end in sentence_spans(text)]


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Where each sentence of a text already normalized (`collapse_whitespace`) starts and ends; none holds a line break."""
    pieces, _ = _pieces(text, 0, final=True)
    return [(sentence[0].start, sentence[-1].end) for sentence in _sentences(pieces)]


def chunk_text(
    text: str,
    first_chunk_chars: int,
    max_chunk_chars: int,
    max_sentences: int = 0,
    written: Callable[[int, int], str] | None = None,
) -> list[Chunk]:
    """Split text into model-sized chunks that end where a speaker pauses; each says which pause ends it.

    - The first chunk is the first sentence when it fits in `first_chunk_chars`, so the first audio comes early.
      A longer first sentence gives its leading clauses (cut after a comma, semicolon, colon or dash) that fit; a
      first clause longer than that is taken whole up to twice `first_chunk_chars` (see `_caps`), and only a
      clause longer still is cut inside, at its most natural word gap (`_natural_cut`).
    - Later chunks pack whole sentences up to `max_chunk_chars` characters and `max_sentences` sentences and never
      run across a paragraph break; a sentence longer than the cap is split at clause marks the same way, and a
      clause longer than the cap is cut into near-equal parts at natural gaps.
    - Caps of 0 mean unlimited. Chunk texts have whitespace collapsed; joined, they give the normalized text back.
    - `written`, for a text as spoken (already normalized: `Spoken.chunks`), gives the written text that
      `text[start:end]` speaks: each chunk carries it.
    """
    text = collapse_whitespace(text)
    pieces, _ = _pieces(text, 0, final=True)
    sentences = _sentences(pieces)
    if not sentences:
        return []
    first_cap, first_hard, cap = _caps(first_chunk_chars, max_chunk_chars)
    first = sentences[0]
    rest: list[_Piece]
    if _span(text, first[0].start, first[-1].end) <= first_cap:
        head, rest = first, []
    else:
        head, rest = _take(text, first, first_cap, first_hard, balanced=False)
    chunks = [_chunk(text, head, written)]
    current: list[_Piece] = []
    count = 0
    for sentence in [rest, *sentences[1:]] if rest else sentences[1:]:
        if current and (
            _span(text, current[0].start, sentence[-1].end) > cap
            or (max_sentences and count >= max_sentences)
            or current[-1].pause == "paragraph"
        ):
            chunks.append(_chunk(text, current, written))
            current, count = [], 0
        if _span(text, sentence[0].start, sentence[-1].end) <= cap:
            current += sentence
            count += 1
            continue
        while sentence:
            if _span(text, sentence[0].start, sentence[-1].end) <= cap:
                head, sentence = sentence, []
            else:
                head, sentence = _take(text, sentence, cap, cap, balanced=True)
            chunks.append(_chunk(text, head, written))
    if current:
        chunks.append(_chunk(text, current, written))
    return chunks


class PhraseSegmenter:
    """Chunks for text that arrives a little at a time (an LLM's answer streamed in), by `chunk_text`'s rules.

    `feed` returns each chunk as soon as it is decided: a whole sentence once it ends, or, while a sentence runs
    past the cap, its leading clauses (the same cut `chunk_text` makes: clauses packed up to the cap, a first
    clause kept whole up to the hard cap, a natural cut only beyond it). Unlike `chunk_text` it does not pack
    several sentences into one chunk: that would hold a finished sentence back to wait for the next one. `flush`
    speaks whatever is pending (at the end of the input, or after an idle pause). Chunks do not depend on how the
    text was split into feeds: feeding it whole or a character at a time gives the same chunks.
    """

    def __init__(self, first_chunk_chars: int, max_chunk_chars: int) -> None:
        self.first_chunk_chars, self.max_chunk_chars = first_chunk_chars, max_chunk_chars
        self._first_cap, self._first_hard, self._cap = _caps(first_chunk_chars, max_chunk_chars)
        self._text = ""
        self._pos = 0
        self._started = False

    @property
    def pending(self) -> str:
        """Text received and not yet emitted in a chunk."""
        return self._text[self._pos :]

    def aim(self, first: bool) -> int:
        """The length a chunk aims at: the first one's cap (below its hard cap, `longest`), or any later one's."""
        return self._first_cap if first else self._cap

    def longest(self, first: bool) -> int:
        """The longest a chunk may be: the first one (its hard cap, see `_caps`), or any later one."""
        return self._first_hard if first else self._cap

    def feed(self, text: str) -> list[Chunk]:
        self._text += text
        return self._emit(lambda: self._next(final=False))

    def flush(self) -> list[Chunk]:
        chunks = self._emit(lambda: self._next(final=True))
        self._text, self._pos = "", 0
        return chunks

    def release(self) -> list[Chunk]:
        """The complete clauses of the open sentence, packed up to the cap, as chunks now, instead of waiting for
        the rest of the sentence to decide how to pack them: for a listener with nothing left to hear, a clause is
        worth speaking the moment it is complete. The chunks then depend on when this is called."""
        return self._emit(self._next_complete)

    def _emit(self, decide: Callable[[], tuple[list[_Piece], int] | None]) -> list[Chunk]:
        """Chunks while `decide` gives the next one (its pieces and where the text after it starts)."""
        chunks: list[Chunk] = []
        while (decided := decide()) is not None:
            head, resume = decided
            chunks.append(_chunk(self._text, head))
            self._pos = resume
            self._started = True
        if self._pos > 4 * _LOOKBACK:  # keep only the context a full stop looks back at (its word and the one before)
            keep = self._pos - 2 * _LOOKBACK
            self._text, self._pos = self._text[keep:], self._pos - keep
        return chunks

    def _limits(self) -> tuple[int, int]:
        """(cap, hard cap) of the next chunk: the first chunk's, or every later chunk's."""
        return (self._cap, self._cap) if self._started else (self._first_cap, self._first_hard)

    def _next_complete(self) -> tuple[list[_Piece], int] | None:
        """The next chunk of the open sentence's complete clauses, packed up to the cap; None when none is."""
        pieces, _ = _pieces(self._text, self._pos, final=False)
        pieces = next((pieces[: i + 1] for i, p in enumerate(pieces) if _ends_sentence(p)), pieces)
        taken = _take(self._text, pieces, *self._limits(), balanced=False) if pieces else None
        if taken is None:
            return None
        head, _ = taken
        return head, self._resume(head[-1].end)

    def _next(self, final: bool) -> tuple[list[_Piece], int] | None:
        """The next chunk and where the text after it starts, or None until more text decides it."""
        text = self._text
        cap, hard = self._limits()
        pieces, floor = _pieces(text, self._pos, final)
        sentence = next((pieces[: i + 1] for i, p in enumerate(pieces) if _ends_sentence(p)), None)
        if sentence is None and final:
            sentence = pieces
        if sentence is not None:
            if not sentence:
                return None
            if _span(text, sentence[0].start, sentence[-1].end) <= cap:
                return sentence, self._resume(sentence[-1].end)
            taken: tuple[list[_Piece], list[_Piece]] | None = _take(text, sentence, cap, hard, balanced=False)
        else:
            # The sentence is still open. Once what is known of it exceeds the cap it will be cut, and the cut is
            # decided as soon as the clauses it depends on are: the open last clause counts by its length so far.
            open_start = self._resume(pieces[-1].end if pieces else self._pos)
            known = floor
            if known <= open_start or _span(text, pieces[0].start if pieces else open_start, known) <= cap:
                return None
            taken = _take(text, [*pieces, _Piece(open_start, known, "none")], cap, hard, balanced=False, open_last=True)
        if taken is None:
            return None
        head, _ = taken
        return head, self._resume(head[-1].end)

    def _resume(self, end: int) -> int:
        return _run_end(_SPACE, self._text, end)
