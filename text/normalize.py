"""English text normalization before G2P: numbers, money, dates, times, units, abbreviations, addresses, symbols.

The phonemizer reads "$4.50" as "dollar four point five zero" and turns the full stops of "p.m." or "St." into
pauses; this module rewrites such tokens into the words an American speaker says ("four dollars and fifty cents").
It runs for en-us and en-gb on every request, so it is one pass of one compiled regular expression over the text,
with the number words from `inflect`. It never raises: a token it cannot read stays as it was. Each rewritten token is
an edit of a `Spoken` text, so the words it becomes are traced back to the token as written (word timings name it).

Chosen over full normalization grammars (wetext's English FSTs, NeMo text processing) after judging them on the
same table of cases (tests/unit/test_normalize.py): wetext reads "$4.50" as "four point five dollars", "1,234" without
its "one" and "1990s" as "one thousand nine hundred and ninety seconds", and leaves "e.g.", "etc." and "St." alone;
NeMo is accurate but needs pynini and minutes of grammar compilation at start and tens of milliseconds a sentence.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import typeguard

from text.chunking import sentence_spans
from text.cleaning import visible_text
from text.spoken import Edit, Spoken


@contextlib.contextmanager
def _typeguard_off() -> Iterator[None]:
    """typeguard's `@typechecked` as a no-op while inflect is imported: for each of the 23 methods it decorates it
    re-reads and re-compiles inflect's whole source, 2.6 CPU-seconds at every process start (a server, a test
    worker), and its checks cost a few hundred microseconds a call; this module hands inflect only the digit strings
    it matched itself. No effect where inflect was imported already."""

    def unchecked(target: Any = None, **_options: Any) -> Any:
        return target if target is not None else (lambda function: function)

    checked = typeguard.typechecked
    typeguard.typechecked = unchecked
    try:
        yield
    finally:
        typeguard.typechecked = checked


with _typeguard_off():
    import inflect


log = logging.getLogger("polytts.normalize")

_MAX_NUMBER_DIGITS = 15
"""Longer digit runs (ids, hostile input) are read digit by digit in groups, as people read them."""
_GROUP_DIGITS = 4
"""A long digit run without separators is read in groups of at most this many digits, a pause between groups."""

_DIGIT_WORDS = "zero one two three four five six seven eight nine".split()
MONTHS = "January February March April May June July August September October November December".split()
_MONTH_OF = {m[:3].lower(): m for m in MONTHS} | {"sept": "September"}
_MONTH_NAME = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sept?(?:ember)?"
    r"|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)"
)
_CURRENCIES = {  # symbol or code: (unit, units, cent, cents)
    "$": ("dollar", "dollars", "cent", "cents"),
    "USD": ("dollar", "dollars", "cent", "cents"),
    "€": ("euro", "euros", "cent", "cents"),
    "EUR": ("euro", "euros", "cent", "cents"),
    "£": ("pound", "pounds", "penny", "pence"),
    "GBP": ("pound", "pounds", "penny", "pence"),
    "¥": ("yen", "yen", "", ""),
    "JPY": ("yen", "yen", "", ""),
    "₹": ("rupee", "rupees", "paisa", "paise"),
    "INR": ("rupee", "rupees", "paisa", "paise"),
}
_SCALES = {
    "k": "thousand",
    "K": "thousand",
    "m": "million",
    "M": "million",
    "mn": "million",
    "b": "billion",
    "B": "billion",
    "bn": "billion",
    "thousand": "thousand",
    "million": "million",
    "billion": "billion",
    "trillion": "trillion",
}
_UNITS = {  # symbol: (singular, plural); case matters (m metre, M mega)
    "km": ("kilometer", "kilometers"),
    "m": ("meter", "meters"),
    "cm": ("centimeter", "centimeters"),
    "mm": ("millimeter", "millimeters"),
    "mi": ("mile", "miles"),
    "ft": ("foot", "feet"),
    "yd": ("yard", "yards"),
    "kg": ("kilogram", "kilograms"),
    "g": ("gram", "grams"),
    "mg": ("milligram", "milligrams"),
    "lb": ("pound", "pounds"),
    "lbs": ("pound", "pounds"),
    "oz": ("ounce", "ounces"),
    "l": ("liter", "liters"),
    "L": ("liter", "liters"),
    "ml": ("milliliter", "milliliters"),
    "mL": ("milliliter", "milliliters"),
    "km/h": ("kilometer per hour", "kilometers per hour"),
    "kph": ("kilometer per hour", "kilometers per hour"),
    "mph": ("mile per hour", "miles per hour"),
    "m/s": ("meter per second", "meters per second"),
    "sec": ("second", "seconds"),
    "ms": ("millisecond", "milliseconds"),
    "min": ("minute", "minutes"),
    "hr": ("hour", "hours"),
    "hrs": ("hour", "hours"),
    "Hz": ("hertz", "hertz"),
    "kHz": ("kilohertz", "kilohertz"),
    "MHz": ("megahertz", "megahertz"),
    "GHz": ("gigahertz", "gigahertz"),
    "W": ("watt", "watts"),
    "kW": ("kilowatt", "kilowatts"),
    "kWh": ("kilowatt hour", "kilowatt hours"),
    "V": ("volt", "volts"),
    "mAh": ("milliamp hour", "milliamp hours"),
    "KB": ("kilobyte", "kilobytes"),
    "kB": ("kilobyte", "kilobytes"),
    "MB": ("megabyte", "megabytes"),
    "GB": ("gigabyte", "gigabytes"),
    "TB": ("terabyte", "terabytes"),
    "Mbps": ("megabit per second", "megabits per second"),
    "Gbps": ("gigabit per second", "gigabits per second"),
}
_ABBREVIATIONS = {
    "mr": "Mister",
    "mrs": "Missus",
    "ms": "Miz",
    "prof": "Professor",
    "jr": "Junior",
    "sr": "Senior",
    "mt": "Mount",
    "ave": "Avenue",
    "blvd": "Boulevard",
    "rd": "Road",
    "inc": "Incorporated",
    "ltd": "Limited",
    "corp": "Corporation",
    "vs": "versus",
    "etc": "et cetera",
    "approx": "approximately",
    "dept": "department",
    "e.g": "for example",
    "i.e": "that is",
    "a.k.a": "also known as",
    "gov": "Governor",
    "sen": "Senator",
    "rep": "Representative",
    "capt": "Captain",
    "lt": "Lieutenant",
    "sgt": "Sergeant",
    "gen": "General",
}
_SYMBOLS = {"&": "and", "+": "plus", "@": "at", "=": "equals", "×": "times", "%": "percent", "°": "degrees"}
_VULGAR_FRACTIONS = {"½": "one half", "¼": "one quarter", "¾": "three quarters", "⅓": "one third", "⅔": "two thirds"}
_URL_SYMBOLS = {
    ".": "dot",
    "/": "slash",
    "-": "dash",
    "_": "underscore",
    ":": "colon",
    "?": "question mark",
    "=": "equals",
    "&": "and",
    "#": "hash",
    "%": "percent",
    "@": "at",
    "~": "tilde",
    "+": "plus",
}
_YEAR_CONTEXT = frozenset(
    "in since by of from until till year years before after during around circa early late mid summer winter "
    "spring fall autumn class season".split()
)

# Atomic groups and the look-behind keep a long run of digits from being rescanned at every position (quadratic).
_TOP_LEVEL_DOMAINS = "com|org|net|edu|gov|io|ai|dev|app|co|uk|de|fr|eu|us|ca|au|info|biz"
_NUMBER = r"(?<!\d)(?>\d{1,3}(?:,\d{3})+|\d+)(?>\.\d+)?"
_AMPM = r"(?P<ampm>[AaPp])\.?\s?[Mm]\b\.?"
_TOKEN = re.compile(
    "|".join(
        (
            r"(?P<url>\b(?:https?://|www\.)[^\s<>\"]*[^\s<>\".,;:!?)\]'])",
            rf"(?P<domain>(?<![\w.@-])[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.(?:{_TOP_LEVEL_DOMAINS})\b(?![.@-]?\w))",
            r"(?P<email>(?<![\w.+-])[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+\b)",
            r"(?P<iso_date>\b(?P<iso_y>\d{4})-(?P<iso_m>0?[1-9]|1[0-2])-(?P<iso_d>0?[1-9]|[12]\d|3[01])\b)",
            r"(?P<us_date>\b(?P<us_m>0?[1-9]|1[0-2])/(?P<us_d>0?[1-9]|[12]\d|3[01])/(?P<us_y>\d{4})\b)",
            rf"(?P<month_date>\b(?P<md_m>{_MONTH_NAME})\.?\s+(?P<md_d>[12]\d|3[01]|0?[1-9])(?:st|nd|rd|th)?\b"
            r"(?:,?\s+(?P<md_y>\d{4})\b)?)",
            rf"(?P<day_month>\b(?P<dm_d>[12]\d|3[01]|0?[1-9])(?:st|nd|rd|th)?\s+(?P<dm_m>{_MONTH_NAME})\b\.?"
            r"(?:,?\s+(?P<dm_y>\d{4})\b)?)",
            rf"(?P<clock>\b(?P<hour>[01]?\d|2[0-3])(?::(?P<minute>[0-5]\d)(?::(?P<second>[0-5]\d))?(?:\s*{_AMPM})?"
            rf"|\.(?P<dot_minute>[0-5]\d)\s*{_AMPM.replace('ampm', 'dot_ampm')}))",
            rf"(?P<hour_ampm>\b(?P<hour_only>1[0-2]|0?[1-9])\s*{_AMPM.replace('ampm', 'ampm2')})",
            r"(?P<phone>(?:\+?1[\s.-]?)?(?:\(\d{3}\)\s?|\b\d{3}[\s.-])?\b\d{3}[.-]\d{4}\b)",
            rf"(?P<money>(?P<money_neg>(?<![\w.])-)?(?P<cur>[$€£¥₹])\s?(?P<amount>{_NUMBER})"
            r"(?:\s?(?P<scale>thousand|million|billion|trillion|bn|mn|[kKmMbB])\b)?)",
            rf"(?P<money_after>(?<![\w.])(?P<amount2>{_NUMBER})\s?(?P<cur2>€|USD|EUR|GBP|JPY|INR)(?![\w]))",
            rf"(?P<percent>(?P<pct_neg>(?<![\w.])-)?(?P<pct>{_NUMBER})\s?%)",
            rf"(?P<degrees>(?P<deg_neg>(?<![\w.])-)?(?P<deg>{_NUMBER})\s?°\s?(?P<scale_deg>[CF]\b)?)",
            rf"(?P<unit>(?P<unit_neg>(?<![\w.])-)?(?P<unit_n>{_NUMBER})\s?"
            rf"(?P<unit_sym>{'|'.join(sorted(map(re.escape, _UNITS), key=len, reverse=True))})(?![\w/]))",
            r"(?P<ordinal>\b(?P<ord_n>\d{1,3}(?:,\d{3})+|\d+)(?P<ord_suffix>st|nd|rd|th)\b)",
            r"(?P<decade>(?<![\w.])'?(?P<decade_n>\d{1,3}0)s\b)",
            rf"(?P<range>(?<![\w.-])(?P<range_a>{_NUMBER})\s?(?:–|—|-(?=\d))\s?(?P<range_b>{_NUMBER})(?![\w.]\d))",
            r"(?P<fraction>(?<![\w./])(?P<num>\d+)/(?P<den>\d+)(?![\w/]))",
            r"(?P<version>(?<![\w.])\d+(?:\.\d+){2,}(?![\w.]\d))",
            rf"(?P<number>(?P<sign>(?<![\w.])[-−])?(?<![\w.,])(?P<value>{_NUMBER}|\.\d+)(?![\d,]\d))",
            r"(?P<abbr>(?<![\w.])(?P<abbr_word>Mrs|Mr|Ms|Prof|Jr|Sr|Mt|Ave|Blvd|Rd|Inc|Ltd|Corp|vs|etc|approx|"
            r"dept|e\.g|i\.e|a\.k\.a|Gov|Sen|Rep|Capt|Lt|Sgt|Gen)\.)",
            r"(?P<title>(?<![\w.])(?P<title_word>Mrs|Mr|Ms|Dr)\b(?=\s+[A-Z]))",
            r"(?P<dr_st>(?<![\w.])(?P<dr_st_word>Dr|St)\.)",
            r"(?P<number_sign>(?<![\w.])No\.(?=\s?\d)|#(?=\d))",
            r"(?P<initialism>(?<![\w.])(?:[A-Z]\.){2,})",
            r"(?P<symbol>[&+@=×%°½¼¾⅓⅔]+)",
        )
    )
)


class _Words:
    """Number words from inflect. An inflect engine keeps state while it converts, so each thread has its own;
    words are cached (numbers repeat)."""

    def __init__(self) -> None:
        self._local = threading.local()

    @property
    def _engine(self) -> inflect.engine:
        engine = getattr(self._local, "engine", None)
        if engine is None:
            engine = self._local.engine = inflect.engine()
        return engine

    def cardinal(self, digits: str) -> str:
        """A whole number: "1,234" one thousand two hundred thirty-four; leading zeros digit by digit ("007"), and
        runs longer than a number is said digit by digit in groups (`grouped`)."""
        plain = digits.replace(",", "")
        if len(plain) > _MAX_NUMBER_DIGITS:
            return self.grouped(digits)
        if len(plain) > 1 and plain.startswith("0"):
            return self.digits(plain)
        return self._cardinal(int(plain))

    def grouped(self, digits: str) -> str:
        """A long run of digits as people read an id or a card number aloud: in the groups its commas make, else in
        near-equal groups of at most four (17 digits: 4, 4, 3, 3, 3), each digit by digit, a comma between groups.
        The commas are pauses, and places where a chunk may end."""
        if "," in digits:
            groups = [group for group in digits.split(",") if group]
        else:
            count = -(-len(digits) // _GROUP_DIGITS)
            size, longer = divmod(len(digits), count)
            bounds = [index * size + min(index, longer) for index in range(count + 1)]
            groups = [digits[start:end] for start, end in zip(bounds, bounds[1:])]
        return ", ".join(self.digits(group) for group in groups)

    @functools.lru_cache(maxsize=4096)  # noqa: B019 (one module-level instance: the cache lives as long as it)
    def _cardinal(self, value: int) -> str:
        # As a string: inflect's annotation (numbers.Number) admits no int to a type checker; it reads str(value) anyway.
        return str(self._engine.number_to_words(str(value), andword="", comma=""))

    def number(self, text: str) -> str:
        """A decimal or whole number: "3.14" three point one four, ".5" point five."""
        whole, _, fraction = text.partition(".")
        spoken = self.cardinal(whole) if whole else ""
        if fraction:
            spoken = f"{spoken} point {self.digits(fraction)}".strip()
        return spoken

    def ordinal(self, digits: str) -> str:
        return self._ordinal(self.cardinal(digits))

    @functools.lru_cache(maxsize=1024)  # noqa: B019 (as above)
    def _ordinal(self, words: str) -> str:
        return str(self._engine.ordinal(words))

    def year(self, value: int) -> str:
        """How a year is said: 1984 nineteen eighty-four, 1900 nineteen hundred, 1905 nineteen oh five, 2005 two
        thousand five, 2024 twenty twenty-four."""
        century, rest = divmod(value, 100)
        if value < 1000 or 2000 <= value < 2010 or century % 10 == 0 and rest == 0:
            return self.cardinal(str(value))
        if rest == 0:
            return f"{self.cardinal(str(century))} hundred"
        if rest < 10:
            return f"{self.cardinal(str(century))} oh {_DIGIT_WORDS[rest]}"
        return f"{self.cardinal(str(century))} {self.cardinal(str(rest))}"

    @staticmethod
    def plural(words: str) -> str:
        """The plural of number words ("nineteen nineties", "two thirds", "halves"): only the last word changes."""
        head, _, last = words.rpartition(" ")
        if last == "half":
            last = "halves"
        elif last.endswith("y"):
            last = last[:-1] + "ies"
        else:
            last += "s"
        return f"{head} {last}".strip()

    @staticmethod
    def digits(text: str, zero: str = "zero") -> str:
        return " ".join(zero if d == "0" else _DIGIT_WORDS[int(d)] for d in text if d.isdigit())


_words = _Words()


def normalize_english(text: str) -> str:
    """Rewrite numbers, money, dates, times, units, abbreviations, URLs, e-mail addresses and symbols as words.

    Sentences keep their final punctuation; an abbreviation's full stop survives only where it ends the sentence
    ("…, etc." et cetera.). Whitespace is collapsed as `collapse_whitespace` does: line breaks stay; format
    characters and lone surrogates are dropped (`visible_text`). Never raises.
    """
    return read_english(Spoken.of(visible_text(text))).text


def read_english(spoken: Spoken) -> Spoken:
    """`spoken` with its English rewritten as `normalize_english` does, each token's words traced to the token. The
    text is a request's, cleaned already (`text.cleaning.clean_text`)."""
    text = spoken.text
    return spoken.edited(edit for start, end in sentence_spans(text) for edit in _sentence_edits(text, start, end))


def _sentence_edits(text: str, start: int, end: int) -> Iterator[Edit]:
    """The rewritten tokens of the sentence text[start:end]; readers look at the sentence around their token."""
    sentence = text[start:end]
    for match in _TOKEN.finditer(sentence):
        yield start + match.start(), start + match.end(), _spoken_token(sentence, match)


def _spoken_token(sentence: str, match: re.Match[str]) -> str:
    kind = match.lastgroup or ""
    token = match.group()
    try:
        spoken = _READERS[kind](match)
    except Exception:  # a reader's bug must not fail a request: the token is read as written
        log.exception("normalization of %r (%s) failed; kept as written", token[:40], kind)
        return token
    if token.endswith(".") and not sentence[match.end() :].strip(_AFTER_FINAL_STOP):
        spoken += "."  # the token's full stop also ended the sentence
    # Words must not run into their neighbours: "5G" five G, "a&b" a and b.
    before = " " if sentence[match.start() - 1 : match.start()].isalnum() else ""
    after = " " if sentence[match.end() : match.end() + 1].isalnum() else ""
    return before + spoken + after


_AFTER_FINAL_STOP = "\"'”’»)]} "


def _sign(match: re.Match[str], group: str) -> str:
    return "minus " if match.group(group) else ""


def _read_url(match: re.Match[str]) -> str:
    address = re.sub(r"^https?://", "", match.group())
    address = re.sub(r"^www\.", "w w w.", address)
    return _read_address(address)


def _read_address(address: str) -> str:
    spoken = []
    for part in re.findall(r"[A-Za-z]+|\d+|.", address):
        if part.isdigit():
            spoken.append(_words.digits(part))
        elif part.isalpha() or part.isspace():
            spoken.append(part)
        else:
            spoken.append(_URL_SYMBOLS.get(part, ""))
    return " ".join(p for p in spoken if p.strip())


def _read_date(month: str, day: str, year: str | None) -> str:
    name = MONTHS[int(month) - 1] if month.isdigit() else _MONTH_OF[month[:4].lower().rstrip("t")[:3]]
    spoken = f"{name} {_words.ordinal(str(int(day)))}"
    return f"{spoken}, {_words.year(int(year))}" if year else spoken


def _read_month_date(match: re.Match[str]) -> str:
    return _read_date(match.group("md_m"), match.group("md_d"), match.group("md_y"))


def _read_day_month(match: re.Match[str]) -> str:
    name = _read_date(match.group("dm_m"), "1", None).split()[0]
    spoken = f"the {_words.ordinal(str(int(match.group('dm_d'))))} of {name}"
    year = match.group("dm_y")
    return f"{spoken}, {_words.year(int(year))}" if year else spoken


def _ampm(letter: str | None) -> str:
    return f" {letter.upper()}M" if letter else ""


def _read_clock(match: re.Match[str]) -> str:
    """3:30 pm, 15:45, 9:05, 7.45 am (a full stop between hours and minutes only with am or pm)."""
    hour, second = int(match.group("hour")), match.group("second")
    minute = int(match.group("minute") or match.group("dot_minute"))
    ampm = _ampm(match.group("ampm") or match.group("dot_ampm"))
    if minute == 0 and not second:
        spoken = _words.cardinal(str(hour)) + ("" if ampm else " o'clock")
    elif minute < 10:
        spoken = f"{_words.cardinal(str(hour))} oh {_DIGIT_WORDS[minute]}"
    else:
        spoken = f"{_words.cardinal(str(hour))} {_words.cardinal(str(minute))}"
    if second:
        spoken += f" and {_words.cardinal(str(int(second)))} seconds"
    return spoken + ampm


def _read_hour_ampm(match: re.Match[str]) -> str:
    return _words.cardinal(str(int(match.group("hour_only")))) + _ampm(match.group("ampm2"))


def _read_phone(match: re.Match[str]) -> str:
    groups = re.findall(r"\d+", match.group())
    return ", ".join(_words.digits(group, zero="oh") for group in groups)


def _read_money(amount: str, symbol: str, scale: str | None, negative: bool) -> str:
    unit, units, cent, cents = _CURRENCIES[symbol]
    whole, _, fraction = amount.replace(",", "").partition(".")
    sign = "minus " if negative else ""
    if scale:
        return f"{sign}{_words.number(amount.replace(',', ''))} {_SCALES[scale]} {units}"
    if len(fraction) != 2 or not cent:
        return f"{sign}{_words.number(amount.replace(',', ''))} {unit if amount == '1' else units}"
    dollars, pennies = int(whole or "0"), int(fraction)
    parts = []
    if dollars or not pennies:
        parts.append(f"{_words.cardinal(whole or '0')} {unit if dollars == 1 else units}")
    if pennies:
        parts.append(f"{_words.cardinal(str(pennies))} {cent if pennies == 1 else cents}")
    return sign + " and ".join(parts)


def _read_money_before(match: re.Match[str]) -> str:
    return _read_money(match.group("amount"), match.group("cur"), match.group("scale"), bool(match.group("money_neg")))


def _read_money_after(match: re.Match[str]) -> str:
    return _read_money(match.group("amount2"), match.group("cur2"), None, False)


def _read_percent(match: re.Match[str]) -> str:
    return f"{_sign(match, 'pct_neg')}{_words.number(match.group('pct').replace(',', ''))} percent"


def _read_degrees(match: re.Match[str]) -> str:
    scale = {"C": " Celsius", "F": " Fahrenheit"}.get(match.group("scale_deg") or "", "")
    value = match.group("deg").replace(",", "")
    return f"{_sign(match, 'deg_neg')}{_words.number(value)} {'degree' if value == '1' else 'degrees'}{scale}"


def _read_unit(match: re.Match[str]) -> str:
    value = match.group("unit_n").replace(",", "")
    singular, plural = _UNITS[match.group("unit_sym")]
    return f"{_sign(match, 'unit_neg')}{_words.number(value)} {singular if value == '1' else plural}"


def _read_ordinal(match: re.Match[str]) -> str:
    return _words.ordinal(match.group("ord_n"))


def _read_decade(match: re.Match[str]) -> str:
    value = int(match.group("decade_n"))
    if value < 100:  # '80s
        return _words.plural(_words.cardinal(str(value)))
    spoken = _words.year(value) if value >= 1000 else _words.cardinal(str(value))
    return _words.plural(spoken)


def _read_range(match: re.Match[str]) -> str:
    return f"{_read_value(match.group('range_a'))} to {_read_value(match.group('range_b'))}"


def _read_fraction(match: re.Match[str]) -> str:
    numerator, denominator = int(match.group("num")), int(match.group("den"))
    if 0 < numerator < denominator <= 10 and len(match.group("num")) < 4:
        if denominator == 2:
            name = "half"
        elif denominator == 4:
            name = "quarter"
        else:
            name = _words.ordinal(str(denominator))
        spoken_den = name if numerator == 1 else _words.plural(name)
        return f"{_words.cardinal(str(numerator))} {spoken_den}"
    return f"{_words.cardinal(match.group('num'))} {_words.cardinal(match.group('den'))}"  # 24/7, 9/11, 50/50


def _read_version(match: re.Match[str]) -> str:
    return " point ".join(_words.cardinal(part) for part in match.group().split("."))


def _read_value(value: str) -> str:
    """A bare number: years are said as years, the rest as cardinals or decimals."""
    if "." not in value and "," not in value and len(value) == 4 and 1100 <= int(value) <= 2009:
        return _words.year(int(value))
    return _words.number(value)  # its commas, if any, group a number too long to say (`_Words.grouped`)


def _read_number(match: re.Match[str]) -> str:
    value = match.group("value")
    if "." not in value and "," not in value and len(value) == 4 and 2010 <= int(value) <= 2099:
        previous = match.string[: match.start()].split()[-1:]
        is_year = not previous or previous[0].lower().strip("(,") in _YEAR_CONTEXT or previous[0] in MONTHS
        following = match.string[match.end() :].lstrip()
        if is_year or not following or not following[0].isalpha():
            return _sign(match, "sign") + _words.year(int(value))
        return _sign(match, "sign") + _words.cardinal(value)
    return _sign(match, "sign") + _read_value(value)


def _read_abbreviation(match: re.Match[str]) -> str:
    return _ABBREVIATIONS[match.group("abbr_word").lower()]


def _read_title(match: re.Match[str]) -> str:
    return {"mr": "Mister", "mrs": "Missus", "ms": "Miz", "dr": "Doctor"}[match.group("title_word").lower()]


def _read_dr_st(match: re.Match[str]) -> str:
    """Dr. Doctor and St. Saint before a name; Drive and Street after one ("Elm St.")."""
    word = match.group("dr_st_word")
    previous = match.string[: match.start()].split()[-1:]
    following = match.string[match.end() :].lstrip()[:1]
    after_name = bool(previous) and previous[0][:1].isupper() and not following.isupper()
    if word == "Dr":
        return "Drive" if after_name else "Doctor"
    return "Street" if after_name or not following.isupper() else "Saint"


def _read_number_sign(match: re.Match[str]) -> str:
    return "number"


def _read_initialism(match: re.Match[str]) -> str:
    return match.group().replace(".", "")  # U.S. -> US: the G2P spells it out; its full stops would be pauses


def _read_symbol(match: re.Match[str]) -> str:
    return " ".join(_VULGAR_FRACTIONS.get(symbol) or _SYMBOLS[symbol] for symbol in match.group())


_READERS: dict[str, Callable[[re.Match[str]], str]] = {
    "url": _read_url,
    "email": lambda m: _read_address(m.group()),
    "domain": lambda m: _read_address(m.group()),
    "iso_date": lambda m: _read_date(m.group("iso_m"), m.group("iso_d"), m.group("iso_y")),
    "us_date": lambda m: _read_date(m.group("us_m"), m.group("us_d"), m.group("us_y")),
    "month_date": _read_month_date,
    "day_month": _read_day_month,
    "clock": _read_clock,
    "hour_ampm": _read_hour_ampm,
    "phone": _read_phone,
    "money": _read_money_before,
    "money_after": _read_money_after,
    "percent": _read_percent,
    "degrees": _read_degrees,
    "unit": _read_unit,
    "ordinal": _read_ordinal,
    "decade": _read_decade,
    "range": _read_range,
    "fraction": _read_fraction,
    "version": _read_version,
    "number": _read_number,
    "abbr": _read_abbreviation,
    "title": _read_title,
    "dr_st": _read_dr_st,
    "number_sign": _read_number_sign,
    "initialism": _read_initialism,
    "symbol": _read_symbol,
}
