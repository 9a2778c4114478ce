"""Numbers, money, dates and times in the stock languages other than English: a table of written forms and what the
G2P is given for them, the tokens left alone, and the words of each rewrite traced to the token as written."""

from __future__ import annotations

import pytest

from text.languages import resolve_language
from text.localized_numbers import read_numbers
from text.spoken import Spoken

CASES = [
    # Spanish: thousands with a point, decimal comma, euros after the amount, numeric dates, times, signs
    ("es", "Llegan 1.500 visitantes.", "Llegan 1500 visitantes."),
    ("es", "Cuesta 12,50 € al día.", "Cuesta 12 euros con 50 céntimos al día."),
    ("es", "Solo 1 € y 0,99 €.", "Solo un euro y 99 céntimos."),
    ("es", "Vale $4.50 o 20 EUR.", "Vale 4 dólares con 50 centavos o 20 euros."),
    ("es", "El 15/08/2025 a las 9:30.", "El 15 de agosto de 2025 a las 9 y 30."),
    ("es", "Desde el 2024-03-01 a las 10:00.", "Desde el 1 de marzo de 2024 a las 10 en punto."),
    ("es", "Hace -5 grados.", "Hace menos 5 grados."),
    ("es", "Pi es 3,14159 y sube un 1,5 %.", "Pi es 3 coma 1 4 1 5 9 y sube un 1 coma 5 %."),
    ("es", "Un 0,05 más.", "Un 0 coma 0 5 más."),
    ("es", "El 1.º de mayo.", "El 1º de mayo."),
    ("es", "Son 1.500.000 personas.", "Son 1500000 personas."),
    # French: a space between thousands, euros and centimes, "1er", "2e"
    ("fr-fr", "L'entrée coûte 12,50 € ou 0,50 €.", "L'entrée coûte 12 euros 50 ou 50 centimes."),
    ("fr-fr", "De 9h30 à 18 h, soit 3h de route.", "De 9 heures 30 à 18 heures, soit 3 heures de route."),
    ("fr-fr", "Il y a 1 500 visiteurs.", "Il y a 1500 visiteurs."),
    ("fr-fr", "Le 01/03/2024 à 9:30.", "Le 1er mars 2024 à 9 heures 30."),
    ("fr-fr", "À 1:00 ou 20:00.", "À 1 heure ou 20 heures."),
    ("fr-fr", "Le 2e jour, il faisait -3 degrés.", "Le 2ème jour, il faisait moins 3 degrés."),
    # Italian and Portuguese
    ("it", "Costa 12,50 € il 15/08/2023.", "Costa 12 euro e 50 centesimi il 15 agosto 2023."),
    ("it", "Il 1/5/2024 alle 9:30, 1.500 persone.", "Il 1º maggio 2024 alle 9 e 30, 1500 persone."),
    ("pt-br", "Custa R$ 12,50 e R$ 1,00.", "Custa 12 reais e 50 centavos e um real."),
    ("pt-br", "Em 15/08/2023 às 9:30 ou 10h15.", "Em 15 de agosto de 2023 às 9 e 30 ou 10 e 15."),
    # Hindi: Indian grouping, rupees, a decimal point
    ("hi", "कीमत ₹250 है।", "कीमत 250 रुपये है।"),
    ("hi", "₹12.50 और 1,50,000 लोग।", "12 रुपये 50 पैसे और 150000 लोग।"),
    ("hi", "4.5 और -5 डिग्री।", "4 दशमलव 5 और माइनस 5 डिग्री।"),
    ("hi", "15/08/2023 को 9:30", "15 अगस्त 2023 को 9 बजकर 30 मिनट"),
    # Japanese: no spaces, kanji digits after the point, the percent sign said
    ("ja", "入場料は1,500円です。", "入場料は1500円です。"),
    ("ja", "3.14と12.5%。", "3点一四と12点五パーセント。"),
    ("ja", "2024/03/03の9:30に-5度。", "2024年3月3日の9時30分にマイナス5度。"),
    ("ja", "$12.50と¥1,000。", "12ドル50セントと1000円。"),
    # Chinese: misaki reads decimals and percentages itself
    ("zh", "门票1,500元，涨了12.5%。", "门票1500元，涨了12.5%。"),
    ("zh", "2024-03-03和2024/03/03的9:30。", "2024年3月3日和2024年3月3日的9点30分。"),
    ("zh", "$12.50或¥50。", "12.50美元或50元。"),
]


def spoken(code: str, text: str) -> str:
    return read_numbers(Spoken.of(text), resolve_language(code)).text


@pytest.mark.parametrize(("code", "written", "said"), CASES)
def test_numbers_are_written_as_the_language_reads_them(code: str, written: str, said: str) -> None:
    assert spoken(code, written) == said


@pytest.mark.parametrize(
    ("code", "text"),
    [
        ("es", "En 2024 había 25 personas y el 3 % no vino."),  # plain numbers: the G2P reads them natively
        ("es", "Un A4, la COVID-19, del 10-20 y la versión 1.5.2."),
        ("es", "El 45/13/2024 no existe."),  # no such date: left as written
        ("fr-fr", "Le 3 mars 2024, un écran 4K à 25h."),
        ("it", "Le ore 25:99 e il 3:2."),
        ("ja", "東京は二〇二四年です。"),
        ("zh", "你好，世界。"),
        ("en-us", "It costs 12,50 € on 15/08/2025."),  # English is text/normalize.py's
    ],
)
def test_what_needs_no_rewrite_is_left_as_written(code: str, text: str) -> None:
    assert spoken(code, text) == text


def test_each_rewrite_is_traced_to_the_token_as_written() -> None:
    text = "Cuesta 12,50 € desde el 15/08/2025."
    rewritten = read_numbers(Spoken.of(text), resolve_language("es"))
    start = rewritten.text.index("12 euros")
    end = rewritten.text.index(" desde")
    assert rewritten.written_between(start, end) == "12,50 €"
    date = rewritten.text.index("15 de agosto")
    assert rewritten.written_between(date, len(rewritten.text) - 1) == "15/08/2025"


def test_hostile_input_is_read_in_linear_time_and_never_raises() -> None:
    for code in ("es", "fr-fr", "hi", "ja", "zh"):
        for text in ("1." * 20_000, "1 " * 20_000, "9:" * 20_000, "€" * 20_000 + "1", "-" * 20_000 + "5"):
            assert spoken(code, text)
