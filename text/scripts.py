"""Which script a letter is written in, and the runs of letters a language cannot read, which are not spoken.

espeak-ng (Kokoro's G2P for English and the European languages and Hindi) names each letter of a script it cannot read
("Hebrew letter shin", "Chinese letter"): 200 Hebrew characters through an English voice were 70 s of audio, a
character taking longer to say than a word. A language reads the scripts of `Language.scripts`; a run of letters in
any other is skipped, with the spaces and punctuation between its letters.
"""

from __future__ import annotations

import bisect
import functools
import unicodedata
from collections import Counter
from collections.abc import Iterator

from text.languages import Language
from text.spoken import Spoken

_RANGES = (  # (first code point, last code point, script) of the letters of each script, in order
    (0x0041, 0x005A, "Latin"),
    (0x0061, 0x007A, "Latin"),
    (0x00AA, 0x00AA, "Latin"),
    (0x00BA, 0x00BA, "Latin"),
    (0x00C0, 0x02FF, "Latin"),  # Latin-1 letters, Latin Extended-A and -B, IPA, modifier letters
    (0x0370, 0x03FF, "Greek"),
    (0x0400, 0x052F, "Cyrillic"),
    (0x0530, 0x058F, "Armenian"),
    (0x0590, 0x05FF, "Hebrew"),
    (0x0600, 0x06FF, "Arabic"),
    (0x0700, 0x074F, "Syriac"),
    (0x0750, 0x077F, "Arabic"),
    (0x0780, 0x07BF, "Thaana"),
    (0x07C0, 0x07FF, "NKo"),
    (0x0870, 0x08FF, "Arabic"),
    (0x0900, 0x097F, "Devanagari"),
    (0x0980, 0x09FF, "Bengali"),
    (0x0A00, 0x0A7F, "Gurmukhi"),
    (0x0A80, 0x0AFF, "Gujarati"),
    (0x0B00, 0x0B7F, "Oriya"),
    (0x0B80, 0x0BFF, "Tamil"),
    (0x0C00, 0x0C7F, "Telugu"),
    (0x0C80, 0x0CFF, "Kannada"),
    (0x0D00, 0x0D7F, "Malayalam"),
    (0x0D80, 0x0DFF, "Sinhala"),
    (0x0E00, 0x0E7F, "Thai"),
    (0x0E80, 0x0EFF, "Lao"),
    (0x0F00, 0x0FFF, "Tibetan"),
    (0x1000, 0x109F, "Myanmar"),
    (0x10A0, 0x10FF, "Georgian"),
    (0x1100, 0x11FF, "Hangul"),
    (0x1200, 0x139F, "Ethiopic"),
    (0x13A0, 0x13FF, "Cherokee"),
    (0x1780, 0x17FF, "Khmer"),
    (0x1800, 0x18AF, "Mongolian"),
    (0x1C80, 0x1C8F, "Cyrillic"),
    (0x1C90, 0x1CBF, "Georgian"),
    (0x1D00, 0x1DBF, "Latin"),  # phonetic extensions
    (0x1E00, 0x1EFF, "Latin"),
    (0x1F00, 0x1FFF, "Greek"),
    (0x2070, 0x209F, "Latin"),  # super- and subscript letters
    (0x2C60, 0x2C7F, "Latin"),
    (0x2D00, 0x2D2F, "Georgian"),
    (0x2DE0, 0x2DFF, "Cyrillic"),
    (0x2E80, 0x2FDF, "Han"),  # radicals
    (0x3005, 0x3007, "Han"),  # 々 〆 〇
    (0x3021, 0x3029, "Han"),
    (0x3031, 0x3035, "Kana"),
    (0x3038, 0x303B, "Han"),
    (0x3040, 0x309F, "Hiragana"),
    (0x30A0, 0x30FF, "Katakana"),
    (0x3100, 0x312F, "Bopomofo"),
    (0x3130, 0x318F, "Hangul"),
    (0x31A0, 0x31BF, "Bopomofo"),
    (0x31F0, 0x31FF, "Katakana"),
    (0x3400, 0x4DBF, "Han"),
    (0x4E00, 0x9FFF, "Han"),
    (0xA000, 0xA4CF, "Yi"),
    (0xA640, 0xA69F, "Cyrillic"),
    (0xA720, 0xA7FF, "Latin"),
    (0xA8E0, 0xA8FF, "Devanagari"),
    (0xA960, 0xA97F, "Hangul"),
    (0xAB30, 0xAB6F, "Latin"),
    (0xAC00, 0xD7FF, "Hangul"),
    (0xF900, 0xFAFF, "Han"),
    (0xFB00, 0xFB06, "Latin"),  # ligatures: ﬁ ﬂ
    (0xFB13, 0xFB17, "Armenian"),
    (0xFB1D, 0xFB4F, "Hebrew"),
    (0xFB50, 0xFDFF, "Arabic"),
    (0xFE70, 0xFEFF, "Arabic"),
    (0xFF21, 0xFF3A, "Latin"),  # fullwidth
    (0xFF41, 0xFF5A, "Latin"),
    (0xFF66, 0xFF9F, "Katakana"),  # halfwidth
    (0xFFA0, 0xFFDC, "Hangul"),
    (0x20000, 0x323AF, "Han"),
)
_STARTS = [first for first, _, _ in _RANGES]


@functools.lru_cache(maxsize=8192)
def script_of(letter: str) -> str:
    """The script a letter is written in ("Latin", "Hebrew", "Han", ...): from the table above, else the first word
    of its Unicode name ("Adlam" for 𞤀), title-cased."""
    point = ord(letter)
    index = bisect.bisect_right(_STARTS, point) - 1
    if index >= 0 and point <= _RANGES[index][1]:
        return _RANGES[index][2]
    return unicodedata.name(letter, "unknown").split(" ")[0].title()


def unreadable_runs(text: str, language: Language) -> Iterator[tuple[int, int, str]]:
    """(start, end, script of its first letter) of each run of letters that `language` does not read: letters with
    their combining marks, and the spaces and punctuation between two of them. A letter it reads, a digit or a
    symbol ends a run."""
    if text.isascii():  # every language reads Latin
        return
    start = end = 0
    script = ""
    for index, char in enumerate(text):
        kind = unicodedata.category(char)[0]
        if kind == "L":
            name = script_of(char)
            if name not in language.scripts:
                if not script:
                    start, script = index, name
                end = index + 1
                continue
        elif kind == "M" and script and end == index:  # a mark on the letter before it
            end = index + 1
            continue
        elif kind not in "NS":
            continue  # spaces and punctuation: inside a run, part of it
        if script:
            yield start, end, script
            script = ""
    if script:
        yield start, end, script


def skip_unreadable(spoken: Spoken, language: Language) -> Spoken:
    """`spoken` without the runs of letters `language` does not read."""
    return spoken.edited((start, end, " ") for start, end, _ in unreadable_runs(spoken.text, language))


def unreadable_scripts(text: str, language: Language) -> list[str]:
    """The scripts of the runs `language` does not read in `text`, the most used first ("Hebrew")."""
    counts: Counter[str] = Counter()
    for start, end, script in unreadable_runs(text, language):
        counts[script] += end - start
    return [script for script, _ in counts.most_common()]
