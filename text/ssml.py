"""SSML: a `<speak>` document read into the text it says, in segments, with what each element asks of it.

Parsed with the hardened parser (text.safe_xml: no DTD, no entities, no external references, bounded depth). A
document becomes segments of text as written, each with its edits (how spans of it are said), the exact silence after
it (`<break>`), and its own rate and language where `<prosody rate>` or `<lang>` set them; the planner pronounces and
chunks each segment. The elements:

- `<speak>` the root; `<p>` and `<s>` a paragraph and a sentence (their boundaries are line breaks, which end
  sentences); `<emphasis>` its content, said plainly (Kokoro has no control of emphasis).
- `<break time="500ms"|"1.5s" strength="none|x-weak|weak|medium|strong|x-strong">` exactly that much silence (at most
  MAX_BREAK_S), the text on each side spoken as separate generations.
- `<sub alias>` the alias said, its content the word as written (word timings name it).
- `<phoneme alphabet ph>` its content said with the phonemes (text.phonemes converts IPA, X-SAMPA, ARPAbet).
- `<say-as interpret-as>`: `characters` and `spell-out` letter by letter (English letter names on English text),
  `digits` digit by digit, `ordinal` as an ordinal, `cardinal` as a number (never a year), `telephone` digit by
  digit in its written groups, `date` in the order its `format` names (mdy, dmy, ymd, md, ...), `time` as a clock
  ("1430" fourteen thirty); the language's normalization then says them in words.
- `<prosody rate="x-slow|slow|medium|fast|x-fast|<n>%">` the span's speed (times the request's).
- `<lang xml:lang>` the span's language, read by that language's G2P in the same voice.
- `<lexicon uri>` a stored lexicon (its id, or a URL ending in it) applied to the whole document.
- `<voice name>` the span said by another voice (a dialogue in one request): a stock voice of the request's engine.

Anything else is a 422 `invalid_ssml` naming the element; a document that is not well-formed, a 422 `malformed_xml`
with its line and column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from errors import InvalidInput
from text.normalize import MONTHS
from text.phoneme_spans import encode
from text.phonemes import to_kokoro
from text.safe_xml import Element, parse_xml
from text.spoken import Edit

SSML_NAMESPACE = "http://www.w3.org/2001/10/synthesis"
MAX_BREAK_S = 10.0
MAX_DEPTH = 24
STRENGTHS = {"none": 0.0, "x-weak": 0.1, "weak": 0.25, "medium": 0.4, "strong": 0.7, "x-strong": 1.2}
RATES = {"x-slow": 0.6, "slow": 0.8, "medium": 1.0, "default": 1.0, "fast": 1.25, "x-fast": 1.6}
_TIME = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s)\s*$")
_PERCENT = re.compile(r"^\s*([+-]?\d+(?:\.\d+)?)\s*%\s*$")
_LETTERS = dict(
    zip(
        "abcdefghijklmnopqrstuvwxyz0123456789",
        "ay bee see dee ee ef jee aitch eye jay kay el em en oh pee cue ar ess tee you vee double-you ex why zee "
        "zero one two three four five six seven eight nine".split(),
        strict=True,
    )
)
_ORDINAL_SUFFIX = {"1": "st", "2": "nd", "3": "rd"}
_NUMBER = re.compile(r"^([-−])?(\d+)(\.\d+)?$")
_CLOCK_DIGITS = re.compile(r"^([01]?\d|2[0-3])([0-5]\d)$")
_DATE_FORMAT = re.compile(r"^(?!.*(.).*\1)[dmy]{1,3}$")
_PLAIN = frozenset({"speak", "emphasis", "p", "s", "paragraph", "sentence"})


@dataclass
class Segment:
    """Text spoken as one run: its generations follow each other with the usual pauses."""

    text: str = ""
    """As written, its whitespace collapsed."""
    edits: list[Edit] = field(default_factory=list)
    """How spans of `text` are said (offsets into it)."""
    silence: float | None = None
    """Seconds of silence after it, exactly (a `<break>`); None: the pause its punctuation gives."""
    rate: float | None = None
    """Its speed, times the request's; None: the request's."""
    language: str | None = None
    """Its language (`<lang>`); None: the request's."""
    voice: str | None = None
    """The voice that says it (`<voice name>`); None: the request's."""


@dataclass
class Ssml:
    segments: list[Segment]
    lexicons: list[str]


def is_ssml(text: str) -> bool:
    """Whether a request's text is an SSML document: it begins with `<speak`, an XML declaration or a DOCTYPE
    (which the parser then refuses: a hostile document is never read as text)."""
    head = text.lstrip()
    if head.startswith(("<?xml", "<!DOCTYPE")):
        return True
    return head.startswith("<speak") and head[6:7] in (" ", ">", "/", "\n", "\t")


_VENDOR_TAG = re.compile(r"<(break|phoneme)\b")
_BARE_AMPERSAND = re.compile(r"&(?!(?:amp|lt|gt|quot|apos|#\d+|#x[0-9a-fA-F]+);)")


def with_vendor_tags(text: str) -> str:
    """Plain text holding the tags ElevenLabs' clients write without a `<speak>` (`<break time="1s"/>`,
    `<phoneme>`) as an SSML document; any other text as it is."""
    if is_ssml(text) or not _VENDOR_TAG.search(text):
        return text
    return f"<speak>{_BARE_AMPERSAND.sub('&amp;', text)}</speak>"


_CARTESIA_TAG = re.compile(r"<(break|spell|speed)\b")
_SPELL_OR_SPEED = re.compile(r"<(/?)spell\s*>|<speed\s+ratio\s*=\s*[\"']([^\"']*)[\"']\s*/?>")


def speed_ratio(ratio: str) -> float:
    """Cartesia's `<speed ratio>` as a rate; a 422 `invalid_ssml` for one that is no number or outside 0.25-4."""
    try:
        rate = float(ratio)
    except ValueError:
        rate = 0.0
    if not 0.25 <= rate <= 4.0:
        raise InvalidInput(f"<speed ratio={ratio[:20]!r}> is not a number from 0.25 to 4", code="invalid_ssml")
    return rate


def cartesia_tag(tag: str) -> str | None:
    """Cartesia's `<spell>` or `</spell>` as the `<say-as>` that reads it; None for any other tag."""
    match = _SPELL_OR_SPEED.fullmatch(tag)
    if match is None or match.group(2) is not None:
        return None
    return "</say-as>" if match.group(1) else '<say-as interpret-as="characters">'


def with_cartesia_tags(text: str) -> str:
    """Plain text holding the tags Cartesia's clients write without a `<speak>` (`<break time="1s"/>`,
    `<spell>`, `<speed ratio="1.5"/>`, which sets the speed of what follows it) as an SSML document; any other text
    as it is."""
    if is_ssml(text) or not _CARTESIA_TAG.search(text):
        return text
    opened = False

    def standard(match: re.Match[str]) -> str:
        nonlocal opened
        if match.group(2) is None:
            return cartesia_tag(match.group()) or match.group()
        percent = round(speed_ratio(match.group(2)) * 100, 1)
        tag = ("</prosody>" if opened else "") + f'<prosody rate="{percent:g}%">'
        opened = True
        return tag

    body = _SPELL_OR_SPEED.sub(standard, _BARE_AMPERSAND.sub("&amp;", text))
    return f"<speak>{body}{'</prosody>' if opened else ''}</speak>"


def parse_ssml(document: str, english: bool = True) -> Ssml:
    """The document's segments and lexicons; `english`: spell letters out by their English names."""
    root = parse_xml(document, "the SSML", max_depth=MAX_DEPTH)
    if root.tag != "speak":
        raise InvalidInput(f"an SSML document's root is <speak>, not <{root.tag}>", code="invalid_ssml")
    reader = _Reader(english)
    reader.element(root, None, None)
    for segment in reader.segments:
        segment.text = segment.text.rstrip()  # every edit ends before the whitespace after it
    return Ssml([segment for segment in reader.segments if segment.text or segment.silence], reader.lexicons)


class _Reader:
    def __init__(self, english: bool) -> None:
        self.english = english
        self.segments = [Segment()]
        self.lexicons: list[str] = []
        self.voice: str | None = None
        """The voice of the text read now (`<voice>`)."""

    @property
    def current(self) -> Segment:
        return self.segments[-1]

    def begin(self, rate: float | None, language: str | None) -> None:
        """Later text goes into a segment of this rate and language (a new one where the current differs)."""
        current = self.current
        if (current.rate, current.language, current.voice) == (rate, language, self.voice):
            return
        if current.text:
            current = Segment()
            self.segments.append(current)
        current.rate, current.language, current.voice = rate, language, self.voice

    def append(self, text: str) -> None:
        """Text, its whitespace collapsed across what came before it."""
        words = " ".join(text.split())
        if not words:
            if text and self.current.text and not self.current.text.endswith((" ", "\n")):
                self.current.text += " "
            return
        if text[:1].isspace() and self.current.text and not self.current.text.endswith((" ", "\n")):
            self.current.text += " "
        self.current.text += words
        if text[-1:].isspace():
            self.current.text += " "

    def said(self, content: str, spoken: str) -> None:
        """`content` written, said as `spoken`."""
        words = " ".join(content.split())
        if not words:
            return
        if self.current.text and not self.current.text.endswith((" ", "\n")):
            self.current.text += " "
        start = len(self.current.text)
        self.current.text += words
        self.current.edits.append((start, len(self.current.text), spoken))

    def boundary(self, mark: str) -> None:
        """A sentence ("\n") or paragraph ("\n\n") ends here."""
        segment = self.current
        segment.text = segment.text.rstrip(" ")
        if segment.text and not segment.text.endswith(mark):
            segment.text = segment.text.rstrip("\n") + mark

    def pause(self, seconds: float) -> None:
        segment = self.current
        segment.text = segment.text.strip()
        if not segment.text and len(self.segments) > 1 and self.segments[-2].silence is not None:
            self.segments[-2].silence = (self.segments[-2].silence or 0.0) + seconds  # breaks in a row add up
            return
        segment.silence = (segment.silence or 0.0) + seconds
        self.segments.append(Segment(rate=segment.rate, language=segment.language, voice=segment.voice))

    def element(self, element: Element, rate: float | None, language: str | None) -> None:
        tag = element.tag
        if tag in _PLAIN:
            if tag in ("p", "paragraph", "s", "sentence"):
                self.boundary("\n\n" if tag in ("p", "paragraph") else "\n")
            self.children(element, rate, language)
            if tag in ("p", "paragraph", "s", "sentence"):
                self.boundary("\n\n" if tag in ("p", "paragraph") else "\n")
        elif tag == "break":
            seconds = break_seconds(element)
            if seconds:
                self.pause(seconds)
        elif tag == "sub":
            alias = element.attrs.get("alias")
            if alias is None:
                raise _invalid(element, "<sub> needs an `alias`")
            self.said(element.text(), alias)
        elif tag == "phoneme":
            ph = element.attrs.get("ph")
            if ph is None:
                raise _invalid(element, "<phoneme> needs `ph`")
            where = f" (line {element.line})"
            self.said(element.text(), encode(to_kokoro(ph, element.attrs.get("alphabet", "ipa"), where)))
        elif tag == "say-as":
            self.say_as(element)
        elif tag == "prosody":
            self.begin(prosody_rate(element, rate), language)
            self.children(element, prosody_rate(element, rate), language)
            self.begin(rate, language)
        elif tag == "lang":
            spoken_in = element.attrs.get("xml:lang")
            if not spoken_in:
                raise _invalid(element, "<lang> needs `xml:lang`")
            self.begin(rate, spoken_in)
            self.children(element, rate, spoken_in)
            self.begin(rate, language)
        elif tag == "voice":
            name = element.attrs.get("name")
            if not name:
                raise _invalid(element, "<voice> needs a `name` (a stock voice)")
            outer, self.voice = self.voice, name
            self.begin(rate, language)
            self.children(element, rate, language)
            self.voice = outer
            self.begin(rate, language)
        elif tag == "lexicon":
            uri = element.attrs.get("uri", "").rstrip("/")
            if not uri:
                raise _invalid(element, "<lexicon> needs a `uri` (a stored lexicon's id)")
            self.lexicons.append(uri.rsplit("/", 1)[-1].rsplit(":", 1)[-1])
        else:
            raise _invalid(element, f"<{tag}> is not an SSML element this node reads", code="invalid_ssml")

    def children(self, element: Element, rate: float | None, language: str | None) -> None:
        for child in element.children:
            if isinstance(child, str):
                self.append(child)
            else:
                self.element(child, rate, language)

    def say_as(self, element: Element) -> None:
        kind = element.attrs.get("interpret-as", "")
        content = " ".join(element.text().split())
        if kind in ("characters", "spell-out", "verbatim"):
            letters = [char for char in content if not char.isspace()]
            if self.english:
                spoken = " ".join(_LETTERS.get(char.lower(), char) for char in letters)
            else:
                spoken = " ".join(letters)
            self.said(content, spoken)
        elif kind == "digits":
            self.said(content, " ".join(char for char in content if not char.isspace()))
        elif kind == "ordinal":
            digits = content.rstrip(".")
            if not digits.isdigit():
                raise _invalid(element, f"say-as ordinal of {content[:20]!r}, which is not a number")
            self.said(content, _with_suffix(digits))
        elif kind in ("cardinal", "number"):
            self.said(content, _cardinal(element, content, self.english))
        elif kind == "telephone":
            self.said(content, _telephone(element, content, self.english))
        elif kind == "date":
            self.said(content, _date(element, content, self.english))
        elif kind == "time":
            clock = _CLOCK_DIGITS.match(content)
            self.said(content, f"{clock.group(1)}:{clock.group(2)}" if clock else content)
        else:
            raise _invalid(element, f"say-as interpret-as {kind!r} is not one this node reads")


def _cardinal(element: Element, content: str, english: bool) -> str:
    """A number said as a number, never as a year or digit by digit: "1430" one thousand four hundred thirty."""
    plain = re.sub(r"[\s,_]", "", content) if english else content
    match = _NUMBER.match(plain)
    if not match:
        raise _invalid(element, f"say-as cardinal of {content[:20]!r}, which is not a number")
    if not english:
        return content  # the language's own normalization reads its numbers as written
    sign, whole, fraction = match.groups()
    return f"{'-' if sign else ''}{int(whole):,}{fraction or ''}"  # grouped: read as a cardinal, never a year


def _telephone(element: Element, content: str, english: bool) -> str:
    """A phone number digit by digit in the groups it is written in, a pause between groups: "+44 20 7946 0958"."""
    groups = re.findall(r"\d+", content)
    if not groups:
        raise _invalid(element, f"say-as telephone of {content[:20]!r}, which has no digits")
    spoken = ", ".join(" ".join(group) for group in groups)
    return ("plus " if english else "+") + spoken if content.lstrip().startswith("+") else spoken


def _date(element: Element, content: str, english: bool) -> str:
    """A date in the order `format` names (SSML's "mdy", "dmy", "ymd", "md", "dm", "ym", "my", "y", "m", "d"; by
    default year first where it has four digits, else month first in English and day first elsewhere), said as the
    language says dates (a whole date as ISO 8601, which every language's normalization reads)."""
    parts = re.findall(r"\d+", content)
    order = element.attrs.get("format") or ("ymd" if parts and len(parts[0]) == 4 else "mdy" if english else "dmy")
    if not _DATE_FORMAT.match(order) or len(parts) != len(order):
        raise _invalid(element, f"say-as date {content[:20]!r} does not match the format {order[:8]!r}")
    found = {field: int(value) for field, value in zip(order, parts)}
    year = found.get("y")
    if year is not None and year < 100 and len(parts[order.index("y")]) <= 2:
        year += 2000
    month, day = found.get("m"), found.get("d")
    if month is not None and not 1 <= month <= 12 or day is not None and not 1 <= day <= 31:
        raise _invalid(element, f"say-as date {content[:20]!r} is no date in the format {order!r}")
    if year is not None and month is not None and day is not None:
        return f"{year:04d}-{month:02d}-{day:02d}"
    if not english:
        return content
    month_name = MONTHS[month - 1] if month is not None else ""
    ordinal = _with_suffix(str(day)) if day else ""
    return " ".join(part for part in (month_name, ordinal, str(year) if year is not None else "") if part)


def _with_suffix(digits: str) -> str:
    """A number's digits as an ordinal is written ("21st", "12th"), for the normalization to say."""
    return digits + ("th" if digits[-2:-1] == "1" else _ORDINAL_SUFFIX.get(digits[-1], "th"))


def break_seconds(element: Element) -> float:
    time = element.attrs.get("time")
    if time is not None:
        match = _TIME.match(time)
        if not match:
            raise _invalid(element, f"break time {time[:20]!r} is not like '500ms' or '1.5s'")
        seconds = float(match.group(1)) / (1000 if match.group(2) == "ms" else 1)
        if seconds > MAX_BREAK_S:
            raise _invalid(element, f"a break is at most {MAX_BREAK_S:g} s, not {seconds:g}")
        return seconds
    strength = element.attrs.get("strength", "medium")
    if strength not in STRENGTHS:
        raise _invalid(element, f"break strength {strength[:20]!r} is none of {', '.join(STRENGTHS)}")
    return STRENGTHS[strength]


def prosody_rate(element: Element, outer: float | None) -> float | None:
    given = element.attrs.get("rate")
    if given is None:
        return outer
    match = _PERCENT.match(given)
    if given in RATES:
        rate = RATES[given]
    elif match:
        value = float(match.group(1))
        rate = 1 + value / 100 if given.strip()[0] in "+-" else value / 100
    else:
        raise _invalid(element, f"prosody rate {given[:20]!r} is none of {', '.join(RATES)} or a percentage")
    rate *= outer or 1.0
    if not 0.25 <= rate <= 4.0:
        raise _invalid(element, f"prosody rate {given!r} makes a speed of {rate:g}, outside 0.25-4")
    return round(rate, 3)


def _invalid(element: Element, message: str, code: str = "invalid_ssml") -> InvalidInput:
    return InvalidInput(
        f"{message} (line {element.line}, column {element.column})",
        code=code,
        detail={"element": element.tag, "line": element.line, "column": element.column},
    )
