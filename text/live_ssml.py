"""SSML arriving a little at a time, on a live request: read tag by tag as its pieces come, so that a tag split
across messages is whole before it is read, and the phrase segmenter is given text, never markup.

Text between tags goes to the segmenter as it comes. A `<sub>`, `<phoneme>` or `<say-as>` is held until it closes,
read by text.ssml, and handed on as one placeholder character (a private-use one of the Basic Multilingual Plane) that
the segmenter cannot cut inside; `expand` turns a phrase's placeholders back into the words as written and the edits
that say them. A `<break>`, and a `<prosody rate>`, `<lang>` or `<voice name>` opening or closing, is a `Mark`: the
text before it is a phrase of its own, and what follows is said with the new rate, language and voice (or after that
much silence); the caller checks the voice's name. `<speak>`, `<p>`, `<s>` and `<emphasis>` read as they do in a
whole document. Cartesia's own tags read too: `<spell>` as
`<say-as interpret-as="characters">`, `<speed ratio="1.5"/>` the rate of what follows it. A `<lexicon>` is refused:
a live request names its lexicons before its text (its `lexicons` field).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from errors import InvalidInput
from text.safe_xml import parse_xml
from text.spoken import Edit
from text.ssml import MAX_DEPTH, break_seconds, cartesia_tag, parse_ssml, prosody_rate, speed_ratio

MAX_TAG_CHARS = 2000
"""Longest tag (or comment) held while its end has not arrived."""
MAX_INLINE_CHARS = 4000
"""Longest `<sub>`, `<phoneme>` or `<say-as>`, tags included, held until it closes."""
_FIRST_PLACEHOLDER, _PLACEHOLDERS = 0xE000, 0x1000
_PLACEHOLDER = re.compile(f"[{chr(_FIRST_PLACEHOLDER)}-{chr(_FIRST_PLACEHOLDER + _PLACEHOLDERS - 1)}]")
_INLINE = frozenset({"sub", "phoneme", "say-as"})
_PLAIN = frozenset({"speak", "emphasis"})
_BOUNDARIES = {"p": "\n\n", "paragraph": "\n\n", "s": "\n", "sentence": "\n"}
_NAME = re.compile(r"</?\s*([\w:.-]+)")
_ENTITY = re.compile(r"&(amp|lt|gt|quot|apos|#\d{1,7}|#x[0-9a-fA-F]{1,6});")
_ENTITIES = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}


@dataclass(frozen=True)
class Mark:
    """Where the text before is a phrase of its own: `silence` seconds after it (a `<break>`), or, from here on, the
    `rate`, `language` and `voice` in force (None: the request's)."""

    silence: float = 0.0
    rate: float | None = None
    language: str | None = None
    voice: str | None = None


class LiveSsml:
    """One live request's SSML, read as it arrives (`feed`): text for the segmenter, and marks between."""

    def __init__(self, english: bool) -> None:
        self.english = english
        self.rate: float | None = None
        self.language: str | None = None
        self.voice: str | None = None
        self._held = ""
        """The start of a tag, or an entity, whose end has not arrived."""
        self._open: list[tuple[str, float | None, str | None, str | None]] = []
        """Open elements, each with the rate, language and voice in force before it."""
        self._inline = ""
        """An open `<sub>`, `<phoneme>` or `<say-as>` so far, from its start tag."""
        self._inline_depth = 0
        self._said: dict[str, tuple[str, list[Edit]]] = {}
        self._count = 0

    def feed(self, text: str) -> list[str | Mark]:
        """What `text`, after what came before, says: text for the segmenter and marks, in order."""
        if _PLACEHOLDER.search(text):
            raise InvalidInput(
                "live SSML holds characters U+E000-U+EFFF (private use), which this node keeps for its own markup",
                code="invalid_text",
            )
        buffer, self._held = self._held + text, ""
        out: list[str | Mark] = []
        pos = 0
        while pos < len(buffer):
            lt = buffer.find("<", pos)
            if lt < 0:
                self._text(buffer[pos:], out, final=False)
                break
            after = buffer[lt + 1 : lt + 2]
            if after and not (after.isalpha() or after in "/!?"):  # a bare `<` ("3 < 4", "<3") starts no tag
                self._text(buffer[pos : lt + 1], out, final=True)
                pos = lt + 1
                continue
            self._text(buffer[pos:lt], out, final=True)
            end = self._tag_end(buffer, lt)
            if end is None:
                if len(buffer) - lt > MAX_TAG_CHARS:
                    raise _malformed(f"a tag of live SSML runs past {MAX_TAG_CHARS} characters")
                self._held = buffer[lt:]
                break
            self._tag(buffer[lt:end], out)
            pos = end
        return out

    def close(self) -> None:
        """The end of the text: a tag or an element still open there is a 422 `malformed_xml`."""
        if self._held.lstrip().startswith("<") or self._inline:
            raise _malformed("the live SSML ends inside a tag or an unclosed <sub>, <phoneme> or <say-as>")

    def expand(self, phrase: str) -> tuple[str, list[Edit]]:
        """A phrase cut from the text `feed` gave: the text as written, and the edits that say its elements."""
        if not _PLACEHOLDER.search(phrase):
            return phrase, []
        pieces: list[str] = []
        edits: list[Edit] = []
        length = pos = 0
        for match in _PLACEHOLDER.finditer(phrase):
            before = phrase[pos : match.start()]
            written, said = self._said.pop(match.group(), ("", []))
            start = length + len(before)
            edits += [(start + begin, start + end, spoken) for begin, end, spoken in said]
            pieces += (before, written)
            length, pos = start + len(written), match.end()
        pieces.append(phrase[pos:])
        return "".join(pieces), edits

    def _text(self, text: str, out: list[str | Mark], final: bool) -> None:
        if self._inline:
            self._inline += text
            if len(self._inline) > MAX_INLINE_CHARS:
                raise _malformed(f"a <sub>, <phoneme> or <say-as> of live SSML runs past {MAX_INLINE_CHARS} characters")
            return
        amp = text.rfind("&")
        if not final and amp >= 0 and ";" not in text[amp:] and len(text) - amp <= 10:
            text, self._held = text[:amp], text[amp:]  # an entity split across messages
        if text:
            out.append(_ENTITY.sub(_entity, text))

    @staticmethod
    def _tag_end(buffer: str, lt: int) -> int | None:
        """Where the tag (or comment) starting at `lt` ends, past its `>`; None while it has not arrived."""
        if buffer.startswith("<!--", lt) or "<!--".startswith(buffer[lt : lt + 4]):
            end = buffer.find("-->", lt + 4)
            return None if end < 0 else end + 3
        quote: str | None = None
        for index in range(lt + 1, len(buffer)):
            char = buffer[index]
            if quote is not None:
                quote = None if char == quote else quote
            elif char in "\"'":
                quote = char
            elif char == ">":
                return index + 1
        return None

    def _tag(self, tag: str, out: list[str | Mark]) -> None:
        if tag.startswith(("<!--", "<?")):
            return
        if tag.startswith("<!"):
            raise InvalidInput("live SSML holds a DOCTYPE or other declaration, which is refused", code="xml_unsafe")
        tag = cartesia_tag(tag) or tag
        named = _NAME.match(tag)
        if named is None:
            raise _malformed(f"{tag[:40]!r} is not a tag")
        name, closing, empty = named.group(1).rsplit(":", 1)[-1], tag.startswith("</"), tag.endswith("/>")
        if self._inline:
            self._inline += tag
            self._inline_depth += -1 if closing else 0 if empty else 1
            if not self._inline_depth:
                out.append(self._placeholder(self._inline))
                self._inline = ""
            return
        if closing:
            self._close(name, out)
            return
        element = parse_xml(tag if empty else tag[:-1] + "/>", "the SSML", max_depth=MAX_DEPTH)
        if name in _INLINE:
            if not empty:
                self._inline, self._inline_depth = tag, 1
            return
        if name == "break":
            seconds = break_seconds(element)
            if seconds:
                out.append(Mark(seconds, self.rate, self.language, self.voice))
        elif name == "lexicon":
            raise InvalidInput(
                "a live request names its lexicons in its `lexicons` field, before its text, not in <lexicon>",
                code="invalid_ssml",
                detail={"element": name},
            )
        elif name in _BOUNDARIES:
            out.append(_BOUNDARIES[name])
        elif name == "speed":
            self.rate = speed_ratio(element.attrs.get("ratio", ""))
            out.append(Mark(0.0, self.rate, self.language, self.voice))
            return
        elif name == "prosody":
            self._push(name, empty, out, prosody_rate(element, self.rate), self.language, self.voice)
            return
        elif name == "lang":
            language = element.attrs.get("xml:lang")
            if not language:
                raise InvalidInput("<lang> needs `xml:lang`", code="invalid_ssml", detail={"element": name})
            self._push(name, empty, out, self.rate, language, self.voice)
            return
        elif name == "voice":
            voice = element.attrs.get("name")
            if not voice:
                raise InvalidInput(
                    "<voice> needs a `name` (a stock voice)", code="invalid_ssml", detail={"element": name}
                )
            self._push(name, empty, out, self.rate, self.language, voice)
            return
        elif name not in _PLAIN:
            raise InvalidInput(
                f"<{name}> is not an SSML element this node reads", code="invalid_ssml", detail={"element": name}
            )
        if not empty:
            self._push(name, empty, out, self.rate, self.language, self.voice)

    def _push(
        self,
        name: str,
        empty: bool,
        out: list[str | Mark],
        rate: float | None,
        language: str | None,
        voice: str | None,
    ) -> None:
        if empty:
            return
        if len(self._open) >= MAX_DEPTH:
            raise InvalidInput(f"live SSML nests more than {MAX_DEPTH} elements deep", code="xml_unsafe")
        self._open.append((name, self.rate, self.language, self.voice))
        self._switch(rate, language, voice, out)

    def _close(self, name: str, out: list[str | Mark]) -> None:
        if not self._open or self._open[-1][0] != name:
            opened = f"<{self._open[-1][0]}>" if self._open else "no element"
            raise _malformed(f"</{name}> closes {opened}")
        _, rate, language, voice = self._open.pop()
        if name in _BOUNDARIES:
            out.append(_BOUNDARIES[name])
        self._switch(rate, language, voice, out)

    def _switch(self, rate: float | None, language: str | None, voice: str | None, out: list[str | Mark]) -> None:
        """What follows is said at `rate`, in `language`, by `voice`: a mark where that differs from what was."""
        if (rate, language, voice) != (self.rate, self.language, self.voice):
            self.rate, self.language, self.voice = rate, language, voice
            out.append(Mark(0.0, rate, language, voice))

    def _placeholder(self, fragment: str) -> str:
        """A whole `<sub>`, `<phoneme>` or `<say-as>`, read, as the one character that stands for it."""
        segments = parse_ssml(f"<speak>{fragment}</speak>", self.english).segments
        if len(segments) != 1 or segments[0].silence is not None:
            raise InvalidInput("a <sub>, <phoneme> or <say-as> holds words only, no <break>", code="invalid_ssml")
        char = chr(_FIRST_PLACEHOLDER + self._count % _PLACEHOLDERS)
        self._count += 1
        self._said[char] = (segments[0].text, segments[0].edits)
        return char


def _entity(match: re.Match[str]) -> str:
    name = match.group(1)
    if name.startswith("#"):
        point = int(name[2:], 16) if name[1:2] == "x" else int(name[1:])
        return chr(point) if 0 < point < 0x110000 and not 0xD800 <= point <= 0xDFFF else ""
    return _ENTITIES[name]


def _malformed(message: str) -> InvalidInput:
    return InvalidInput(message, code="malformed_xml")
