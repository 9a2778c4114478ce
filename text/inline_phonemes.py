"""Inline phonemes in plain text, the markup Kokoro's own G2P (misaki) reads: `[Kokoro](/kˈOkəɹO/)` says the word
in the brackets with the phonemes between the slashes, in Kokoro's symbols (text.phonemes).

The word stays the text as written (word timings name it); its phonemes ride in the text as spoken
(text.phoneme_spans). Other bracketed text, and a link whose target is not between slashes, is left as it is.
"""

from __future__ import annotations

import re

from text.phoneme_spans import encode
from text.phonemes import to_kokoro
from text.spoken import Edit

_MARKUP = re.compile(r"\[([^\[\]\n]{1,200})\]\(/([^/()\n]{1,400})/\)")


def inline_phonemes(text: str) -> tuple[str, list[Edit]]:
    """`text` with each markup replaced by its word, and an edit per word that says it with its phonemes (offsets
    into the text returned). Phonemes Kokoro cannot say are a 422 `unsayable_phonemes` naming them."""
    if "](/" not in text:
        return text, []
    pieces: list[str] = []
    edits: list[Edit] = []
    pos = length = 0
    for match in _MARKUP.finditer(text):
        before = text[pos : match.start()]
        word = match.group(1)
        phonemes = to_kokoro(match.group(2), "kokoro", f" (for {word[:40]!r})")
        pieces += (before, word)
        start = length + len(before)
        edits.append((start, start + len(word), encode(phonemes)))
        length = start + len(word)
        pos = match.end()
    pieces.append(text[pos:])
    return "".join(pieces), edits
