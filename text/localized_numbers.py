"""Numbers, money, dates and times as written in the stock languages other than English, rewritten so that their G2P
reads them in that language (English has text/normalize.py).

espeak-ng reads a plain whole number natively in Spanish, French, Italian, Portuguese and Hindi ("2024" dos mil
veinticuatro), but not the way numbers are written around it: it reads the thousands separator of "1.500" as a pause
("uno, quinientos"), a decimal comma as a pause ("12,50" doce, cincuenta), "12,50 €" as "doce, cincuenta euro",
"15/08/2023" as "quince barra cero ocho barra…", the French "9h30" as "neuf ache trente", and drops the sign of "-5"
(Spanish, French, Hindi) and the ₹ of "₹250".
pyopenjtalk reads "1,500円" as "ichi, gohyaku en" and drops the point of "3.14" and the "%" of "50%"; misaki's
Chinese reads "1,500元" as "yi, wubai yuan" and "2024/03/03" symbol by symbol. This module rewrites those tokens
into plain whole numbers and words ("12,50 €" → "12 euros con 50 céntimos", "15/08/2023" → "15 de agosto de 2023",
"3.14" → "3点一四") and leaves every whole number to the G2P, which knows the language's number words, genders and
agreements. Like text/normalize.py it never raises (a token it cannot read stays as written) and each rewritten token
is an edit of a `Spoken` text, so its words are traced back to the token as written.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from text.languages import Language
from text.spoken import Edit, Spoken

log = logging.getLogger("polytts.localized_numbers")


@dataclass(frozen=True)
class Currency:
    one: str
    """The whole phrase for one unit ("un euro", "1円")."""
    many: str
    """The unit after any other number ("euros")."""
    cent_one: str = ""
    cent_many: str = ""
    """The hundredth's phrases ("un céntimo", "céntimos"); "" where amounts are read as decimals instead."""


@dataclass(frozen=True)
class Conventions:
    """How one language writes and says numbers."""

    decimal_comma: bool
    """"12,50" and "1.500" (else "12.50" and "1,500")."""
    groups: str
    """A regular expression for one thousands group after the first digits ("[.\u00a0\u202f]\\d{3}")."""
    point: str
    """Between the whole part and the decimals, as said (" coma ", "点")."""
    minus: str
    months: tuple[str, ...]
    date: str
    """A date from `{d}`, `{month}`, `{m}`, `{y}`."""
    first_day: str
    """The first of the month in a date ("1er")."""
    clock: str
    """A time from `{h}` and `{m}`; `hour` when the minutes are 00 (`one_hour` at 1)."""
    hour: str
    one_hour: str
    money: str
    """Units and hundredths together, from `{units}`, `{cents}` (the hundredths' phrase) and `{c}` (their number)."""
    currencies: dict[str, Currency]
    decimals_digit_by_digit: bool = False
    """Decimals read digit by digit ("3.14" three point one four), else up to two as a number ("coma catorce")."""
    digits: str = ""
    """The digit characters decimals read digit by digit are written with ("〇一二…"; "": as they are)."""
    spaced: bool = True
    """Words are separated by spaces (not in Japanese and Chinese)."""
    ordinal: Callable[[str], str] | None = None
    """Rewrites an ordinal as written ("2e") into the form the G2P reads ("2ème"); its pattern is `ordinal_pattern`."""
    ordinal_pattern: str = ""
    extra: dict[str, str] = field(default_factory=dict)
    """Symbols after a number said as words ("%": パーセント)."""
    h_clock: bool = False
    """Times are also written "9h30" (espeak-ng says the letter: "neuf ache trente")."""


_SPANISH_MONTHS = "enero febrero marzo abril mayo junio julio agosto septiembre octubre noviembre diciembre"
_FRENCH_MONTHS = "janvier février mars avril mai juin juillet août septembre octobre novembre décembre"
_ITALIAN_MONTHS = "gennaio febbraio marzo aprile maggio giugno luglio agosto settembre ottobre novembre dicembre"
_PORTUGUESE_MONTHS = "janeiro fevereiro março abril maio junho julho agosto setembro outubro novembro dezembro"
_HINDI_MONTHS = "जनवरी फ़रवरी मार्च अप्रैल मई जून जुलाई अगस्त सितंबर अक्टूबर नवंबर दिसंबर"
_KANJI_DIGITS = "〇一二三四五六七八九"
_COMMA_DECIMAL_GROUPS = r"[.\u00a0\u202f]\d{3}"
"""A thousands group after a dot or a no-break space: "1.500", "1 500"."""


def _currencies(**by_symbol: Currency) -> dict[str, Currency]:
    """Each currency under its symbols and ISO code ("euro" under € and EUR)."""
    aliases = {"euro": ("€", "EUR"), "dollar": ("$", "US$", "USD"), "pound": ("£", "GBP"), "rupee": ("₹", "INR")}
    aliases |= {"yen": ("JPY",), "real": ("R$", "BRL"), "yuan": ("CNY", "RMB")}
    return {symbol: currency for name, currency in by_symbol.items() for symbol in aliases[name]}


SPANISH = Conventions(
    decimal_comma=True,
    groups=_COMMA_DECIMAL_GROUPS,
    point=" coma ",
    minus="menos ",
    months=tuple(_SPANISH_MONTHS.split()),
    date="{d} de {month} de {y}",
    first_day="1",
    clock="{h} y {m}",
    hour="{h} en punto",
    one_hour="1 en punto",
    money="{units} con {cents}",
    currencies=_currencies(
        euro=Currency("un euro", "euros", "un céntimo", "céntimos"),
        dollar=Currency("un dólar", "dólares", "un centavo", "centavos"),
        pound=Currency("una libra", "libras", "un penique", "peniques"),
        rupee=Currency("una rupia", "rupias", "un paisa", "paisas"),
        yen=Currency("un yen", "yenes"),
        real=Currency("un real", "reales", "un centavo", "centavos"),
        yuan=Currency("un yuan", "yuanes"),
    )
    | {"¥": Currency("un yen", "yenes")},
    ordinal=lambda token: token.replace(".", ""),  # "1.º" primero: espeak-ng reads "1º", and the point as a pause
    ordinal_pattern=r"\d+\.[ºª]",
)
FRENCH = Conventions(
    decimal_comma=True,
    groups=r"[ .\u00a0\u202f]\d{3}",  # "1 500" with an ordinary space too: the French way to write it
    point=" virgule ",
    minus="moins ",
    months=tuple(_FRENCH_MONTHS.split()),
    date="{d} {month} {y}",
    first_day="1er",
    clock="{h} heures {m}",
    hour="{h} heures",
    one_hour="1 heure",
    money="{units} {c}",  # douze euros cinquante
    currencies=_currencies(
        euro=Currency("un euro", "euros", "un centime", "centimes"),
        dollar=Currency("un dollar", "dollars", "un cent", "cents"),
        pound=Currency("une livre", "livres", "un penny", "pence"),
        rupee=Currency("une roupie", "roupies"),
        yen=Currency("un yen", "yens"),
        real=Currency("un réal", "réaux", "un centavo", "centavos"),
        yuan=Currency("un yuan", "yuans"),
    )
    | {"¥": Currency("un yen", "yens")},
    ordinal=lambda token: token[:-1] + "ème",  # "2e" deuxième: espeak-ng says "deux e"
    ordinal_pattern=r"(?<!\d)(?:[2-9]|\d{2,})e(?![\w'’])",
    h_clock=True,
)
ITALIAN = Conventions(
    decimal_comma=True,
    groups=_COMMA_DECIMAL_GROUPS,
    point=" virgola ",
    minus="meno ",
    months=tuple(_ITALIAN_MONTHS.split()),
    date="{d} {month} {y}",
    first_day="1º",
    clock="{h} e {m}",
    hour="{h} in punto",
    one_hour="1 in punto",
    money="{units} e {cents}",
    currencies=_currencies(
        euro=Currency("un euro", "euro", "un centesimo", "centesimi"),
        dollar=Currency("un dollaro", "dollari", "un centesimo", "centesimi"),
        pound=Currency("una sterlina", "sterline", "un penny", "pence"),
        rupee=Currency("una rupia", "rupie"),
        yen=Currency("uno yen", "yen"),
        real=Currency("un real", "reais", "un centavo", "centavos"),
        yuan=Currency("uno yuan", "yuan"),
    )
    | {"¥": Currency("uno yen", "yen")},
)
PORTUGUESE = Conventions(
    decimal_comma=True,
    groups=_COMMA_DECIMAL_GROUPS,
    point=" vírgula ",
    minus="menos ",
    months=tuple(_PORTUGUESE_MONTHS.split()),
    date="{d} de {month} de {y}",
    first_day="1º",
    clock="{h} e {m}",
    hour="{h} horas",
    one_hour="1 hora",
    money="{units} e {cents}",
    h_clock=True,
    currencies=_currencies(
        euro=Currency("um euro", "euros", "um centavo", "centavos"),
        dollar=Currency("um dólar", "dólares", "um centavo", "centavos"),
        pound=Currency("uma libra", "libras", "um pêni", "pence"),
        rupee=Currency("uma rupia", "rupias"),
        yen=Currency("um iene", "ienes"),
        real=Currency("um real", "reais", "um centavo", "centavos"),
        yuan=Currency("um iuane", "iuanes"),
    )
    | {"¥": Currency("um iene", "ienes")},
)
HINDI = Conventions(
    decimal_comma=False,
    groups=r",\d{2,3}",  # "1,500" and the Indian "1,50,000"
    point=" दशमलव ",
    minus="माइनस ",
    months=tuple(_HINDI_MONTHS.split()),
    date="{d} {month} {y}",
    first_day="1",
    clock="{h} बजकर {m} मिनट",
    hour="{h} बजे",
    one_hour="1 बजे",
    money="{units} {cents}",
    currencies=_currencies(
        rupee=Currency("1 रुपया", "रुपये", "1 पैसा", "पैसे"),
        dollar=Currency("1 डॉलर", "डॉलर", "1 सेंट", "सेंट"),
        euro=Currency("1 यूरो", "यूरो", "1 सेंट", "सेंट"),
        pound=Currency("1 पाउंड", "पाउंड", "1 पेंस", "पेंस"),
        yen=Currency("1 येन", "येन"),
        real=Currency("1 रियाल", "रियाल"),
        yuan=Currency("1 युआन", "युआन"),
    )
    | {"¥": Currency("1 येन", "येन")},
    decimals_digit_by_digit=True,
)
JAPANESE = Conventions(
    decimal_comma=False,
    groups=r",\d{3}",
    point="点",
    minus="マイナス",
    months=tuple(f"{m}月" for m in range(1, 13)),
    date="{y}年{m}月{d}日",
    first_day="1",
    clock="{h}時{m}分",
    hour="{h}時",
    one_hour="1時",
    money="{units}{cents}",
    currencies=_currencies(
        yen=Currency("1円", "円"),
        dollar=Currency("1ドル", "ドル", "1セント", "セント"),
        euro=Currency("1ユーロ", "ユーロ", "1セント", "セント"),
        pound=Currency("1ポンド", "ポンド", "1ペンス", "ペンス"),
        rupee=Currency("1ルピー", "ルピー"),
        real=Currency("1レアル", "レアル"),
        yuan=Currency("1元", "元"),
    )
    | {"¥": Currency("1円", "円")},
    decimals_digit_by_digit=True,
    digits=_KANJI_DIGITS,
    spaced=False,
    extra={"%": "パーセント", "％": "パーセント"},
)
CHINESE = Conventions(
    decimal_comma=False,
    groups=r",\d{3}",
    point=".",  # misaki reads "12.5" itself (十二点五)
    minus="负",
    months=tuple(f"{m}月" for m in range(1, 13)),
    date="{y}年{m}月{d}日",
    first_day="1",
    clock="{h}点{m}分",
    hour="{h}点",
    one_hour="1点",
    money="{units}",
    currencies=_currencies(
        yuan=Currency("1元", "元"),
        dollar=Currency("1美元", "美元"),
        euro=Currency("1欧元", "欧元"),
        pound=Currency("1英镑", "英镑"),
        rupee=Currency("1卢比", "卢比"),
        yen=Currency("1日元", "日元"),
        real=Currency("1雷亚尔", "雷亚尔"),
    )
    | {"¥": Currency("1元", "元")},
    spaced=False,
)
CONVENTIONS = {
    "es": SPANISH,
    "fr-fr": FRENCH,
    "it": ITALIAN,
    "pt-br": PORTUGUESE,
    "hi": HINDI,
    "ja": JAPANESE,
    "zh": CHINESE,
}
"""By `Language.code`: every stock language but English."""


def read_numbers(spoken: Spoken, language: Language) -> Spoken:
    """`spoken` with the numbers, money, dates and times of `language` rewritten as its G2P reads them right; the
    text unchanged for a language without conventions here (English: text/normalize.py)."""
    conventions = CONVENTIONS.get(language.code)
    if conventions is None:
        return spoken
    text = spoken.text
    return spoken.edited(_edits(text, conventions, _pattern(language.code)))


def _edits(text: str, conventions: Conventions, pattern: re.Pattern[str]) -> Iterator[Edit]:
    for match in pattern.finditer(text):
        try:
            said = _READERS[match.lastgroup or ""](match, conventions)
        except Exception:  # a reader's bug must not fail a request: the token is read as written
            log.exception("reading %r (%s) failed; kept as written", match.group()[:40], match.lastgroup)
            continue
        if said is None or said == match.group():
            continue
        if conventions.spaced:  # the words must not run into their neighbours ("a12,5" a 12 coma 5)
            said = (" " if text[match.start() - 1 : match.start()].isalnum() else "") + said
            said += " " if text[match.end() : match.end() + 1].isalnum() else ""
        yield match.start(), match.end(), said


@functools.cache
def _pattern(code: str) -> re.Pattern[str]:
    """One regular expression for every token a language's conventions rewrite, compiled once."""
    conventions = CONVENTIONS[code]
    decimal = "," if conventions.decimal_comma else r"\."
    # A number's edges are digits, separators and Latin letters ("A4", "v1.5", "COVID-19"), not CJK characters.
    before, after = r"(?<![\dA-Za-z.,])", r"(?![\dA-Za-z]|[.,]\d)"
    number = rf"(?:\d{{1,3}}(?:{conventions.groups})+|\d+)(?:{decimal}\d+)?"
    # An amount may also carry the other convention's two decimals ("$4.50" in a Spanish text).
    amount = rf"(?:\d+[.,]\d{{2}}(?![\d.,])|{number})"
    sign = r"(?<![\dA-Za-z\u00c0-\u024f.,_-])[-−]"
    symbols = sorted((s for s in conventions.currencies if not s.isalpha()), key=len, reverse=True)
    codes = sorted(s for s in conventions.currencies if s.isalpha())
    currency_before = "|".join(map(re.escape, symbols + codes))
    currency_after = "|".join(map(re.escape, symbols)) + rf"|(?:{'|'.join(codes)})(?![A-Za-z])"
    parts = [
        r"(?P<iso_date>(?<!\d)(?P<iso_y>\d{4})-(?P<iso_m>\d{1,2})-(?P<iso_d>\d{1,2})(?!\d|-\d))",
        r"(?P<dmy_date>(?<![\d/.-])(?P<dmy_d>\d{1,2})(?P<dmy_sep>[/.-])(?P<dmy_m>\d{1,2})(?P=dmy_sep)"
        r"(?P<dmy_y>\d{4})(?!\d|[/.-]\d))",
        r"(?P<ymd_date>(?<![\d/])(?P<ymd_y>\d{4})/(?P<ymd_m>\d{1,2})/(?P<ymd_d>\d{1,2})(?!\d|/\d))",
        r"(?P<clock>(?<![\d:.,])(?P<hour>[01]?\d|2[0-3]):(?P<minute>[0-5]\d)(?![\d:]|[.,]\d))",
        rf"(?P<money>(?P<money_sign>{sign})?(?P<cur>{currency_before})\s?(?P<amount>{amount}){after})",
        rf"(?P<money_after>(?P<money_after_sign>{sign})?{before}(?P<amount_after>{amount})\s?(?P<cur_after>{currency_after}))",
    ]
    if conventions.h_clock:  # before whole numbers, which would take the hour of "18 h"
        parts.append(
            r"(?P<h_clock>(?<![\dA-Za-z:])(?P<h_hour>[01]?\d|2[0-3])\s?h\s?(?P<h_minute>[0-5]\d)?(?![\dA-Za-z]))"
        )
    parts.append(rf"(?P<number>(?P<number_sign>{sign})?{before}(?P<value>{number}){after})")
    if conventions.ordinal_pattern:
        parts.insert(0, rf"(?P<ordinal>{conventions.ordinal_pattern})")
    if conventions.extra:
        parts.append(rf"(?P<extra>(?<=\d)\s?(?:{'|'.join(map(re.escape, conventions.extra))}))")
    return re.compile("|".join(parts))


def _whole(digits: str) -> str:
    """A whole number as the G2P reads it: its group separators gone ("1.500" 1500)."""
    return re.sub(r"\D", "", digits)


def _decimals(fraction: str, conventions: Conventions) -> str:
    """The digits after the point as said: up to two as a number, "05" as "0 5", longer ones (and in languages that
    read every decimal digit by digit) one digit at a time."""
    if conventions.decimals_digit_by_digit or len(fraction) > 2 or fraction.startswith("0"):
        if conventions.digits:
            return "".join(conventions.digits[int(d)] for d in fraction)
        return " ".join(fraction)
    return fraction


def _number(value: str, conventions: Conventions) -> str:
    """A number as written ("1.500,25") as said ("1500 coma 25")."""
    decimal = "," if conventions.decimal_comma else "."
    whole, separator, fraction = value.rpartition(decimal) if decimal in value else (value, "", "")
    if not separator:
        return _whole(value)
    if conventions.point == ".":  # the G2P reads decimals itself
        return f"{_whole(whole)}.{fraction}"
    return f"{_whole(whole)}{conventions.point}{_decimals(fraction, conventions)}"


def _minus(match: re.Match[str], group: str, conventions: Conventions) -> str:
    return conventions.minus if match.group(group) else ""


def _read_number(match: re.Match[str], conventions: Conventions) -> str:
    return _minus(match, "number_sign", conventions) + _number(match.group("value"), conventions)


def _read_amount(amount: str, currency: Currency, conventions: Conventions) -> str:
    """An amount in a currency: "12,50" euros as "12 euros con 50 céntimos", "1" as "un euro"."""
    space = " " if conventions.spaced else ""
    decimal = "," if conventions.decimal_comma else "."
    # Two decimals after the language's separator, or after a point anywhere ("$4.50" in a Spanish text).
    split = re.fullmatch(rf"(.*?)([{re.escape(decimal)}.])(\d{{2}})", amount)
    if split is None or not currency.cent_many:
        value = _number(f"{split[1]}{decimal}{split[3]}" if split else amount, conventions)
        return currency.one if value == "1" else f"{value}{space}{currency.many}"
    units_value, cents_value = _whole(split[1]) or "0", int(split[3])
    units = currency.one if units_value == "1" else f"{units_value}{space}{currency.many}"
    cents = currency.cent_one if cents_value == 1 else f"{cents_value}{space}{currency.cent_many}"
    if not cents_value:
        return units
    if units_value == "0":
        return cents
    return conventions.money.format(units=units, cents=cents, c=cents_value)


def _read_money(match: re.Match[str], conventions: Conventions) -> str:
    currency = conventions.currencies[match.group("cur")]
    return _minus(match, "money_sign", conventions) + _read_amount(match.group("amount"), currency, conventions)


def _read_money_after(match: re.Match[str], conventions: Conventions) -> str:
    currency = conventions.currencies[match.group("cur_after")]
    said = _read_amount(match.group("amount_after"), currency, conventions)
    return _minus(match, "money_after_sign", conventions) + said


def _read_date(year: str, month: str, day: str, conventions: Conventions) -> str | None:
    """A date as said; None (read as written) when it is no date ("31/02/2024" is, "45/13/2024" is not)."""
    m, d = int(month), int(day)
    if not (1 <= m <= 12 and 1 <= d <= 31):
        return None
    spoken_day = conventions.first_day if d == 1 else str(d)
    return conventions.date.format(d=spoken_day, month=conventions.months[m - 1], m=m, y=year)


def _read_iso_date(match: re.Match[str], conventions: Conventions) -> str | None:
    return _read_date(match.group("iso_y"), match.group("iso_m"), match.group("iso_d"), conventions)


def _read_dmy_date(match: re.Match[str], conventions: Conventions) -> str | None:
    return _read_date(match.group("dmy_y"), match.group("dmy_m"), match.group("dmy_d"), conventions)


def _read_ymd_date(match: re.Match[str], conventions: Conventions) -> str | None:
    return _read_date(match.group("ymd_y"), match.group("ymd_m"), match.group("ymd_d"), conventions)


def _time(hour: int, minute: int, conventions: Conventions) -> str:
    if minute == 0:
        return conventions.one_hour if hour == 1 else conventions.hour.format(h=hour)
    return conventions.clock.format(h=hour, m=minute)


def _read_clock(match: re.Match[str], conventions: Conventions) -> str:
    return _time(int(match.group("hour")), int(match.group("minute")), conventions)


def _read_h_clock(match: re.Match[str], conventions: Conventions) -> str:
    return _time(int(match.group("h_hour")), int(match.group("h_minute") or 0), conventions)


def _read_ordinal(match: re.Match[str], conventions: Conventions) -> str:
    assert conventions.ordinal is not None
    return conventions.ordinal(match.group())


def _read_extra(match: re.Match[str], conventions: Conventions) -> str:
    return conventions.extra[match.group().strip()]


_READERS: dict[str, Callable[[re.Match[str], Conventions], str | None]] = {
    "iso_date": _read_iso_date,
    "dmy_date": _read_dmy_date,
    "ymd_date": _read_ymd_date,
    "clock": _read_clock,
    "h_clock": _read_h_clock,
    "money": _read_money,
    "money_after": _read_money_after,
    "number": _read_number,
    "ordinal": _read_ordinal,
    "extra": _read_extra,
}
