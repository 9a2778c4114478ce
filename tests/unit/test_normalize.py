"""English normalization before G2P: a table of cases with the spoken form people use, and hostile input."""

from __future__ import annotations

import threading

import pytest

from text.normalize import normalize_english

CASES = [
    # cardinals, decimals, negatives
    ("I have 3 cats.", "I have three cats."),
    ("There were 1,234 people.", "There were one thousand two hundred thirty-four people."),
    ("A crowd of 1500 people.", "A crowd of fifteen hundred people."),
    ("It holds 2048 bytes.", "It holds two thousand forty-eight bytes."),
    ("The rate is 3.14 today.", "The rate is three point one four today."),
    ("It is 0.5 or .5 of it.", "It is zero point five or point five of it."),
    ("It fell to -5 degrees.", "It fell to minus five degrees."),
    ("Agent 007 is here.", "Agent zero zero seven is here."),
    ("Chapter 11", "Chapter eleven"),
    ("COVID-19 spread.", "COVID-nineteen spread."),
    # ordinals
    ("He finished 1st and she was 22nd.", "He finished first and she was twenty-second."),
    ("It was the 12th century.", "It was the twelfth century."),
    ("The 101st time.", "The one hundred first time."),
    # money
    ("It costs $4.50.", "It costs four dollars and fifty cents."),
    ("Only $1 each.", "Only one dollar each."),
    ("Just $0.99 now.", "Just ninety-nine cents now."),
    ("Pay €12 now.", "Pay twelve euros now."),
    ("They raised £3m last year.", "They raised three million pounds last year."),
    ("A £2.50 ticket.", "A two pounds and fifty pence ticket."),
    ("It cost $1,000,000.", "It cost one million dollars."),
    ("A $5 billion deal.", "A five billion dollars deal."),
    ("Worth $1.5bn today.", "Worth one point five billion dollars today."),
    ("It is 25 EUR.", "It is twenty-five euros."),
    ("Costs ¥100.", "Costs one hundred yen."),
    ("A loss of -$20.", "A loss of minus twenty dollars."),
    # percentages
    ("Sales grew 45%.", "Sales grew forty-five percent."),
    ("Rates rose 2.5% to 10-20%.", "Rates rose two point five percent to ten to twenty percent."),
    # years, decades, dates
    ("Born in 1984.", "Born in nineteen eighty-four."),
    ("In 2005 it began.", "In two thousand five it began."),
    ("Since 2024 it grew.", "Since twenty twenty-four it grew."),
    ("Built in 1905, rebuilt in 1900.", "Built in nineteen oh five, rebuilt in nineteen hundred."),
    ("The 1990s were fun, the '80s too.", "The nineteen nineties were fun, the eighties too."),
    ("On March 3, 2024 we met.", "On March third, twenty twenty-four we met."),
    ("Due 2024-03-03.", "Due March third, twenty twenty-four."),
    ("Due 12/25/2024.", "Due December twenty-fifth, twenty twenty-four."),
    ("Jan. 5 is late.", "January fifth is late."),
    ("On 3 March 2024 it rained.", "On the third of March, twenty twenty-four it rained."),
    ("From 1990–2000 it grew.", "From nineteen ninety to two thousand it grew."),
    # times
    ("Meet at 3:30 pm.", "Meet at three thirty PM."),
    ("Open 10:00 am to 7 p.m. daily.", "Open ten AM to seven PM daily."),
    ("Leave at 9:05.", "Leave at nine oh five."),
    ("It starts at 15:45 and at 6 o'clock.", "It starts at fifteen forty-five and at six o'clock."),
    ("Lunch at 12:00.", "Lunch at twelve o'clock."),
    ("The 7.45 am train, not 7.45 kg.", "The seven forty-five AM train, not seven point four five kilograms."),
    ("We left at 5 p.m. Then we ate.", "We left at five PM. Then we ate."),
    # phone numbers
    ("Call 555-123-4567.", "Call five five five, one two three, four five six seven."),
    ("Call (555) 123-4567 now.", "Call five five five, one two three, four five six seven now."),
    ("Dial 555-0100.", "Dial five five five, oh one oh oh."),
    # units
    ("Run 5 km.", "Run five kilometers."),
    ("It weighs 12 kg.", "It weighs twelve kilograms."),
    ("Just 1 km away.", "Just one kilometer away."),
    ("It is 70°F outside.", "It is seventy degrees Fahrenheit outside."),
    ("Water boils at 100 °C.", "Water boils at one hundred degrees Celsius."),
    ("Limit 100 mph.", "Limit one hundred miles per hour."),
    ("A 6 ft fence and 2.5 GHz chip.", "A six feet fence and two point five gigahertz chip."),
    ("Download 500 MB in 3 min.", "Download five hundred megabytes in three minutes."),
    # abbreviations
    ("Dr. Smith lives on Elm St.", "Doctor Smith lives on Elm Street."),
    ("We drove to St. Louis.", "We drove to Saint Louis."),
    ("Mr. and Mrs. Smith met Ms Jones.", "Mister and Missus Smith met Miz Jones."),
    ("Fruits, e.g. apples.", "Fruits, for example apples."),
    ("That is, i.e. pears.", "That is, that is pears."),
    ("Apples, pears, etc.", "Apples, pears, et cetera."),
    ("Apples, pears, etc. are cheap.", "Apples, pears, et cetera are cheap."),
    ("Cats vs. dogs.", "Cats versus dogs."),
    ("The U.S. economy grew.", "The US economy grew."),
    ("It is No. 5 and #1.", "It is number five and number one."),
    ("Acme Inc. and Bob Jr. came.", "Acme Incorporated and Bob Junior came."),
    ("He climbed Mt. Everest.", "He climbed Mount Everest."),
    ("I live on 5th Ave.", "I live on fifth Avenue."),
    # URLs and e-mail
    ("Visit https://example.com/docs now.", "Visit example dot com slash docs now."),
    ("See www.example.org.", "See w w w dot example dot org."),
    ("Mail me at jane.doe@example.com.", "Mail me at jane dot doe at example dot com."),
    ("Go to example.com or docs.python.org today.", "Go to example dot com or docs dot python dot org today."),
    ("The file is notes.txt, see e.g. page 2.", "The file is notes.txt, see for example page two."),
    # symbols and fractions
    ("Tom & Jerry", "Tom and Jerry"),
    ("2 + 2 = 4", "two plus two equals four"),
    ("Meet @home", "Meet at home"),
    ("Add ½ cup.", "Add one half cup."),
    ("About 3/4 of them, 2/3 of us.", "About three quarters of them, two thirds of us."),
    ("Open 24/7.", "Open twenty-four seven."),
    ("Version 2.0.1 shipped.", "Version two point zero point one shipped."),
    ("He scored 3-2.", "He scored three to two."),
    ("We use C++ daily.", "We use C plus plus daily."),
    ("5G and 4K screens.", "five G and four K screens."),
    # text without anything to normalize keeps its words and punctuation
    ("Nothing to see here, really!", "Nothing to see here, really!"),
]


@pytest.mark.parametrize(("text", "spoken"), CASES, ids=[c[0] for c in CASES])
def test_spoken_form(text: str, spoken: str) -> None:
    assert normalize_english(text) == spoken


def test_the_table_is_large_enough() -> None:
    assert len(CASES) >= 40


def test_sentences_and_their_final_punctuation_survive() -> None:
    text = "Dr. Smith paid $3.50. He left at 5 p.m.\n\nThen it rained, etc. The end"
    assert normalize_english(text) == (
        "Doctor Smith paid three dollars and fifty cents. He left at five PM.\n\nThen it rained, et cetera. The end"
    )  # the paragraph break stays: it is a longer pause, and no chunk runs across it


@pytest.mark.parametrize(
    "hostile",
    [
        "\ud800 lone \udfff surrogates 5",
        "9" * 10_000,
        "a" + "9" * 10_000,
        "1," * 5_000,
        ".5" * 3_000,
        "$" * 5_000 + "5",
        "1.2." * 3_000,
        "1:1:1:1" * 1_000,
        "@" * 3_000,
        "a@" * 3_000 + ".com",
        "x" * 10_000,
        "-" * 5_000 + "5",
        "\x00\x01\x7f control",
        "%" * 100 + "°" * 100,
        "",
        "   \n\n ",
    ],
)
def test_hostile_input_never_raises(hostile: str) -> None:
    spoken = normalize_english(hostile)
    assert isinstance(spoken, str)
    spoken.encode("utf-8")  # no lone surrogate is left for the G2P to choke on


def test_invisible_characters_are_dropped() -> None:
    assert normalize_english("hel\u200blo\u200d wor\ufeffld 1\u00ad2") == "hello world twelve"


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        (
            "Order 12345678901234567890.",
            "Order one two three four, five six seven eight, nine zero one two, three four five six, seven eight nine "
            "zero.",
        ),
        # near-equal groups of at most four: 17 digits are 4, 4, 3, 3, 3
        (
            "Id 12345678901234567",
            "Id one two three four, five six seven eight, nine zero one, two three four, five six seven",
        ),
        # written separators make the groups
        (
            "1,234,567,890,123,456,789",
            "one, two three four, five six seven, eight nine zero, one two three, four five six, seven eight nine",
        ),
        # fifteen digits are still a number; a leading zero is still read digit by digit, ungrouped
        (
            "999999999999999",
            "nine hundred ninety-nine trillion nine hundred ninety-nine billion nine hundred ninety-nine million nine hundred ninety-nine thousand nine hundred ninety-nine",
        ),
        ("007", "zero zero seven"),
    ],
)
def test_long_digit_runs_are_read_in_groups(text: str, spoken: str) -> None:
    assert normalize_english(text) == spoken


def test_a_long_digit_run_is_bounded_by_its_groups() -> None:
    """What 5,000 digits become is about five spoken characters a digit, with a pause every four digits at most:
    a chunker can cut it anywhere between groups, and the spoken limit bounds the whole."""
    spoken = normalize_english("9" * 5_000)
    groups = spoken.split(", ")
    assert len(groups) == 1_250 and set(groups) == {"nine nine nine nine"}
    assert len(spoken) < 5.5 * 5_000


def test_usable_from_several_threads_at_once() -> None:
    results: list[str] = []
    texts = [f"It costs ${n}.{n % 100:02d} on March {n % 28 + 1}, {1900 + n}." for n in range(1, 200)]

    def work() -> None:
        results.extend(normalize_english(t) for t in texts)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    expected = [normalize_english(t) for t in texts]
    assert sorted(results) == sorted(expected * 4)
