"""Emoji and pictographs, which are not spoken: every engine, on every route, is given the text without them.

espeak-ng reads an emoji by its Unicode name ("grinning face", "party popper"): 300 emoji through an English voice
were 33 s of audio while counting as 300 characters, and a chat reply's "Done ✅" ended with "check mark button".
misaki drops them, CosyVoice's and Qwen's frontends do each their own thing. A reader reads past them, and so does the
node, the same way whatever the engine: runs of pictographs (the emoji blocks, the miscellaneous symbols and
dingbats, with their skin-tone modifiers, variation selectors and keycap marks) are taken out of the text as spoken
before it is counted, cut or cached, the way runs of an unread script are (text.scripts); word timings still name
the words as written. A lexicon alias or phoneme entry for an emoji is applied first, so one who wants "❤" said as
"love" writes it so. Symbols that say something in a sentence stay: arrows, mathematical and currency signs, ©, ®, ™,
°, and letters and digits in circles or squares.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from text.spoken import Spoken

_PICTOGRAPHS = (
    "\u2600-\u27bf"  # miscellaneous symbols (☀ ♥ ⚠), dingbats (✅ ✔ ❤ ➡)
    "\u2b00-\u2bff"  # miscellaneous symbols and arrows (⭐ ⬛)
    "\U0001f000-\U0001faff"  # the emoji blocks: cards, flags (regional indicators), pictographs, emoticons ...
)
_MODIFIERS = (
    "\ufe0e\ufe0f"  # text and emoji presentation selectors
    "\u20e3"  # combining enclosing keycap (1️⃣)
)
_UNSPOKEN = re.compile(f"[{_PICTOGRAPHS}{_MODIFIERS}]+")
_SPOKEN_IN_BLOCKS = re.compile(r"[\u2776-\u2793\U0001f100-\U0001f10c\U0001f110-\U0001f189]")
"""Within those blocks, what is read: dingbat digits (❶) and letters or digits in circles, parentheses or squares."""


def unspoken_runs(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each run of pictographs in `text`, which is not spoken."""
    for run in _UNSPOKEN.finditer(text):
        start = run.start()
        for kept in _SPOKEN_IN_BLOCKS.finditer(text, run.start(), run.end()):
            if kept.start() > start:
                yield start, kept.start()
            start = kept.end()
        if run.end() > start:
            yield start, run.end()


def holds_pictographs(text: str) -> bool:
    return next(unspoken_runs(text), None) is not None


def skip_pictographs(spoken: Spoken) -> Spoken:
    """`spoken` without its pictographs (each run a space, collapsed with those beside it)."""
    return spoken.edited((start, end, " ") for start, end in unspoken_runs(spoken.text))
