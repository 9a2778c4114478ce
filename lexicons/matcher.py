"""Lexicons applied to a text in one pass: a trie over words, not one pattern per entry.

The text is read as its words (`lexicon.WORD`); from each word the trie is walked over the words that follow it
(separated by whitespace only), and the longest grapheme that ends there wins, so "New York City" beats "New
York". Matching is whole-word; an English possessive of an entry's last word ("Kokoro's") is the entry and its
's. Case: a grapheme matches as written; a grapheme written all in lower case also matches any casing of its words
("kokoro" matches "Kokoro" and "KOKORO"; "US" never matches "us"): PLS 1.0 leaves case to the processor, and this
is what a writer of a lexicon means. Precedence: the first lexicon listed, then its
first entry for a grapheme. Building a matcher is the costly part, so matchers are kept by lexicon ids (a lexicon
is immutable, so an id never goes stale).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from lexicons.lexicon import WORD, Lexeme, Lexicon

_END = ""
"""The key of a trie node that holds the entry a grapheme ending there says (no word is empty)."""
_POSSESSIVE = ("'s", "’s")
_SIBILANTS = frozenset("szʃʒʧʤ")
_VOICELESS = frozenset("ptkfθ")
MAX_MATCHERS = 64


class Matcher:
    def __init__(self, lexicons: Sequence[Lexicon], language: str) -> None:
        self.exact: dict[str, Any] = {}
        self.folded: dict[str, Any] = {}
        self.phonemes = False
        """Whether an entry that can match says phonemes."""
        for lexicon in lexicons:
            if not lexicon.applies_to(language):
                continue
            for entry in lexicon.lexemes:
                for grapheme in entry.graphemes:
                    words = WORD.findall(grapheme)
                    lower = grapheme == grapheme.lower()
                    self._insert(
                        self.folded if lower else self.exact, [w.casefold() for w in words] if lower else words, entry
                    )
                self.phonemes = self.phonemes or entry.phonemes is not None

    @staticmethod
    def _insert(trie: dict[str, Any], words: list[str], entry: Lexeme) -> None:
        node = trie
        for word in words:
            node = node.setdefault(word, {})
        node.setdefault(_END, entry)

    def __bool__(self) -> bool:
        return bool(self.exact or self.folded)

    def matches(self, text: str) -> list[tuple[int, int, Lexeme]]:
        """Each match in `text`, in order and none overlapping: (start, end, the entry)."""
        words = [(m.start(), m.end(), m.group()) for m in WORD.finditer(text)]
        found: list[tuple[int, int, Lexeme]] = []
        index = 0
        while index < len(words):
            best = _longest(self.exact, words, index, text, fold=False)
            folded = _longest(self.folded, words, index, text, fold=True)
            if folded is not None and (best is None or folded[0] > best[0]):
                best = folded
            if best is None:
                index += 1
                continue
            last, entry = best
            found.append((words[index][0], words[last][1], entry))
            index = last + 1
        return found


def _longest(
    trie: dict[str, Any], words: list[tuple[int, int, str]], index: int, text: str, fold: bool
) -> tuple[int, Lexeme] | None:
    """(index of its last word, entry) of the longest grapheme of `trie` that starts at word `index`."""
    node: dict[str, Any] | None = trie
    best = None
    for position in range(index, len(words)):
        start, _, word = words[position]
        if position > index and not text[words[position - 1][1] : start].isspace():
            break
        assert node is not None
        following = node.get(word.casefold() if fold else word)
        if following is None:
            stem = word[:-2] if word[-2:] in _POSSESSIVE else ""
            stemmed = node.get(stem.casefold() if fold else stem) if stem else None
            if stemmed is not None and _END in stemmed:  # "Kokoro's": the entry's word, then its 's
                best = (position, possessive(stemmed[_END]))
            break
        node = following
        if _END in node:
            best = (position, node[_END])
    return best


def possessive(entry: Lexeme) -> Lexeme:
    """The entry said with an English possessive 's after it: the alias and 's, or the phonemes and /ɪz/ after a
    sibilant, /s/ after another voiceless sound, /z/ otherwise."""
    if entry.alias is not None:
        return replace(entry, alias=entry.alias + "'s")
    phonemes = entry.phonemes or ""
    last = phonemes.rstrip("ˈˌː ")[-1:]
    return replace(entry, phonemes=phonemes + ("ɪz" if last in _SIBILANTS else "s" if last in _VOICELESS else "z"))


class Matchers:
    """Matchers by (lexicon ids, language), the MAX_MATCHERS most recently used."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._matchers: OrderedDict[tuple[tuple[str, ...], str], Matcher] = OrderedDict()

    def get(self, lexicons: Sequence[Lexicon], language: str) -> Matcher:
        key = (tuple(lexicon.lexicon_id for lexicon in lexicons), language.split("-")[0])
        with self._lock:
            matcher = self._matchers.get(key)
            if matcher is not None:
                self._matchers.move_to_end(key)
                return matcher
        matcher = Matcher(lexicons, language)
        with self._lock:
            self._matchers[key] = matcher
            while len(self._matchers) > MAX_MATCHERS:
                self._matchers.popitem(last=False)
        return matcher
