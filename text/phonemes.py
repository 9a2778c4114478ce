"""Kokoro's phoneme alphabet, and phonemes written in the alphabets lexicons and SSML use (IPA, X-SAMPA, CMU
ARPAbet) converted to it.

Kokoro reads misaki's symbols: IPA, except that English diphthongs and affricates are one letter each (`A` for eɪ,
`I` aɪ, `O` oʊ, `Q` əʊ, `W` aʊ, `Y` ɔɪ, `ʤ` dʒ, `ʧ` tʃ). A phoneme string is converted when it is given (at a
lexicon's upload, or as the request is planned), and one holding a symbol Kokoro cannot say is refused naming it,
never dropped in silence.
"""

from __future__ import annotations

import re

from errors import InvalidInput

KOKORO_SYMBOLS = frozenset(
    ' !"(),.:;?AIOQSTWYabcdefhijklmnopqrstuvwxyzæçðøŋœɐɑɒɔɕɖəɚɛɜɟɡɣɤɥɨɪɯɰɲɳɴɸɹɻɽɾʁʂʃʈʊʋʌʎʒʔʝʣʤʥʦʧʨʰʲˈˌː̃βθχᵊᵝᵻ—“”…→↓↗↘ꭧ'
)
"""Every symbol of the Kokoro v1.0 vocabulary (the model's `vocab.json`)."""

ALPHABETS = {
    "ipa": "ipa",
    "x-sampa": "x-sampa",
    "xsampa": "x-sampa",
    "sampa": "x-sampa",
    "cmu-arpabet": "arpabet",
    "arpabet": "arpabet",
    "cmu": "arpabet",
    "kokoro": "kokoro",
    "x-kokoro": "kokoro",
    "misaki": "kokoro",
}
"""Alphabet names a lexicon or a `<phoneme>` may give (case-insensitive), and the converter each one takes."""

_IPA_TO_KOKORO = (  # longest first: a diphthong before its vowels
    ("eɪ", "A"),
    ("aɪ", "I"),
    ("oʊ", "O"),
    ("əʊ", "Q"),
    ("aʊ", "W"),
    ("ɔɪ", "Y"),
    ("dʒ", "ʤ"),
    ("tʃ", "ʧ"),
    ("ɝ", "ɜɹ"),
    ("ɫ", "l"),
    ("g", "ɡ"),
    ("'", "ˈ"),
    ("ˑ", "ː"),
)
_IPA_DROPPED = re.compile("[.\u0361\u035c\u0329\u032f\u0306]")
"""Syllable dots, tie bars and the syllabic, non-syllabic and extra-short marks, which Kokoro has no symbol for and
its voices do not need."""

_XSAMPA = {
    "r\\`": "ɻ",
    "@`": "ɚ",
    "3`": "ɝ",
    "r\\": "ɹ",
    "j\\": "ʝ",
    "z\\": "ʑ",
    "s\\": "ɕ",
    "h\\": "ɦ",
    "_h": "ʰ",
    "_j": "ʲ",
    "'": "ʲ",
    "A": "ɑ",
    "{": "æ",
    "6": "ɐ",
    "Q": "ɒ",
    "E": "ɛ",
    "@": "ə",
    "3": "ɜ",
    "I": "ɪ",
    "O": "ɔ",
    "2": "ø",
    "9": "œ",
    "U": "ʊ",
    "V": "ʌ",
    "Y": "ʏ",
    "}": "ʉ",
    "1": "ɨ",
    "M": "ɯ",
    "7": "ɤ",
    "B": "β",
    "C": "ç",
    "D": "ð",
    "G": "ɣ",
    "H": "ɥ",
    "J": "ɲ",
    "L": "ʎ",
    "N": "ŋ",
    "R": "ʁ",
    "S": "ʃ",
    "T": "θ",
    "X": "χ",
    "Z": "ʒ",
    "?": "ʔ",
    "4": "ɾ",
    "P": "ʋ",
    "g": "ɡ",
    '"': "ˈ",
    "%": "ˌ",
    ":": "ː",
    "~": "\u0303",
    "=": "",
    "-": "",
    ".": "",
    " ": " ",
    **{letter: letter for letter in "abcdefhijklmnopqrstuvwxyz"},
}
_XSAMPA_TOKEN = re.compile("|".join(re.escape(symbol) for symbol in sorted(_XSAMPA, key=len, reverse=True)))

_ARPABET = {
    "AA": "ɑ",
    "AE": "æ",
    "AH": "ʌ",
    "AO": "ɔ",
    "AW": "W",
    "AY": "I",
    "EH": "ɛ",
    "ER": "ɜɹ",
    "EY": "A",
    "IH": "ɪ",
    "IY": "i",
    "OW": "O",
    "OY": "Y",
    "UH": "ʊ",
    "UW": "u",
    "B": "b",
    "CH": "ʧ",
    "D": "d",
    "DH": "ð",
    "F": "f",
    "G": "ɡ",
    "HH": "h",
    "JH": "ʤ",
    "K": "k",
    "L": "l",
    "M": "m",
    "N": "n",
    "NG": "ŋ",
    "P": "p",
    "R": "ɹ",
    "S": "s",
    "SH": "ʃ",
    "T": "t",
    "TH": "θ",
    "V": "v",
    "W": "w",
    "Y": "j",
    "Z": "z",
    "ZH": "ʒ",
}
_ARPABET_UNSTRESSED = {"AH": "ə", "ER": "əɹ"}
_ARPABET_STRESS = {"1": "ˈ", "2": "ˌ", "0": ""}


class PhonemeError(InvalidInput):
    """Phonemes that cannot be given to Kokoro: an unknown alphabet, or symbols it cannot say (named)."""


def alphabet_of(name: str | None, default: str = "ipa") -> str:
    """The converter for an alphabet name (None: `default`); a 422 `unknown_alphabet` names the accepted ones."""
    key = (name or default).strip().lower()
    if key not in ALPHABETS:
        raise PhonemeError(
            f"alphabet {name!r} is not one this node reads: {', '.join(sorted(ALPHABETS))}", code="unknown_alphabet"
        )
    return ALPHABETS[key]


def to_kokoro(phonemes: str, alphabet: str = "ipa", where: str = "") -> str:
    """`phonemes` in `alphabet` (a name `alphabet_of` takes) as Kokoro's symbols; a 422 `unsayable_phonemes`
    names each symbol it cannot say (`where`: whose phonemes, for the message)."""
    converter = alphabet_of(alphabet)
    text = " ".join(phonemes.split())
    if converter == "arpabet":
        converted = _from_arpabet(text, where)
    elif converter == "x-sampa":
        converted = _from_ipa(_from_xsampa(text, where))
    elif converter == "ipa":
        converted = _from_ipa(text)
    else:
        converted = text
    unsayable = sorted({char for char in converted if char not in KOKORO_SYMBOLS})
    if unsayable or not converted.strip():
        symbols = ", ".join(f"{char!r} (U+{ord(char):04X})" for char in unsayable) or "none at all"
        raise PhonemeError(
            f"phonemes {phonemes[:60]!r}{where} hold symbols Kokoro cannot say: {symbols}",
            code="unsayable_phonemes",
            detail={"phonemes": phonemes[:200], "symbols": unsayable},
        )
    return converted


def _from_ipa(text: str) -> str:
    text = _IPA_DROPPED.sub("", text)
    for ipa, kokoro in _IPA_TO_KOKORO:
        text = text.replace(ipa, kokoro)
    return text


def _from_xsampa(text: str, where: str) -> str:
    pieces: list[str] = []
    pos = 0
    for match in _XSAMPA_TOKEN.finditer(text):
        if match.start() != pos:
            _refuse_symbols(text[pos : match.start()], "X-SAMPA", where)
        pieces.append(_XSAMPA[match.group()])
        pos = match.end()
    if pos != len(text):
        _refuse_symbols(text[pos:], "X-SAMPA", where)
    return "".join(pieces)


def _from_arpabet(text: str, where: str) -> str:
    words = []
    for word in text.split(" | ") if " | " in text else [text]:
        pieces = []
        for token in word.split():
            symbol, stress = token.rstrip("012").upper(), token[len(token.rstrip("012")) :]
            if symbol not in _ARPABET or stress not in ("", *_ARPABET_STRESS):
                _refuse_symbols(token, "ARPAbet", where)
            sound = _ARPABET_UNSTRESSED.get(symbol, _ARPABET[symbol]) if stress == "0" else _ARPABET[symbol]
            pieces.append(_ARPABET_STRESS.get(stress, "") + sound)
        words.append("".join(pieces))
    return " ".join(words)


def _refuse_symbols(symbols: str, alphabet: str, where: str) -> None:
    raise PhonemeError(
        f"{symbols[:20]!r}{where} is not a symbol of {alphabet} this node converts",
        code="unsayable_phonemes",
        detail={"phonemes": symbols[:200], "symbols": sorted(set(symbols))},
    )
