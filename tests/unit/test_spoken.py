"""text/spoken.py, text/scripts.py and text/symbols.py: a text as it is spoken, traced to the text as written; chunk
caps and the limit counting spoken characters; runs of a script the language does not read, and emoji, skipped."""

from __future__ import annotations

import random

import pytest

from errors import PayloadTooLarge
from text.chunking import collapse_whitespace
from text.cleaning import clean_text
from text.languages import resolve_language
from text.normalize import read_english
from text.scripts import script_of, skip_unreadable, unreadable_scripts
from text.spoken import Spoken, check_spoken_length
from text.symbols import holds_pictographs, skip_pictographs

MONEY = "$999,999,999,999.99 "
ENGLISH = resolve_language("en")


def english(text: str) -> Spoken:
    return read_english(Spoken.of(collapse_whitespace(text)))


def test_a_text_spoken_as_written_has_its_whitespace_normalized_and_nothing_else() -> None:
    rng = random.Random(7)
    alphabet = "ab. 1\n\r\t\x0b\x0c\x1c\u2028\u00a0"
    for _ in range(500):
        written = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        spoken = Spoken.of(written)
        assert spoken.text == collapse_whitespace(written)
        if spoken.origin is not None:  # every character traced to one as written, in order
            assert list(spoken.origin) == sorted(spoken.origin)
            assert all(char.isspace() or written[at] == char for char, at in zip(spoken.text, spoken.origin))
    assert Spoken.of("Already normal.").origin is None


def test_rewritten_tokens_are_traced_to_the_text_as_written() -> None:
    spoken = english("Dr. Smith paid $123.45 for 3 tickets.")
    assert spoken.text == "Doctor Smith paid one hundred twenty-three dollars and forty-five cents for three tickets."
    start = spoken.text.index("one hundred")
    end = spoken.text.index(" for")
    assert spoken.written_between(start, end) == "$123.45"
    assert spoken.written_between(0, len(spoken.text)) == spoken.written
    # a part beginning inside a token's words speaks none of it: the token belongs to the part its words begin in
    assert spoken.written_between(start + 4, end) == ""
    assert spoken.written_between(start + 4, len(spoken.text)) == " for 3 tickets."


def test_chunk_caps_count_spoken_characters_and_each_chunk_knows_its_written_text() -> None:
    written = collapse_whitespace(MONEY * 60 + "That is all.")
    spoken = english(written)
    assert len(written) == 1_212 and len(spoken.text) == 9_312  # 7.7 times longer as spoken
    chunks = spoken.chunks(60, 120)
    assert max(len(chunk.text) for chunk in chunks[1:]) <= 120 and len(chunks[0].text) <= 120
    assert " ".join(chunk.text for chunk in chunks) == spoken.text
    # every word as written is in exactly one chunk, in order: the word timings of each chunk name them
    as_written = [chunk.text if chunk.written is None else chunk.written for chunk in chunks]
    assert " ".join(as_written).split() == written.split()
    assert "" in as_written  # a chunk inside one amount's words: the amount is its first chunk's


def test_text_as_written_that_needs_no_rewriting_chunks_as_before() -> None:
    text = "First sentence here. A second one, with a clause, follows it."
    spoken = english(text)
    assert spoken.text == text
    assert all(chunk.written is None for chunk in spoken.chunks(20, 40))


def test_the_spoken_limit_names_itself_and_both_counts() -> None:
    check_spoken_length(5_000, 10_000, 10_000)
    with pytest.raises(PayloadTooLarge) as refused:
        check_spoken_length(5_000, 38_749, 10_000)
    error = refused.value
    assert error.code == "spoken_too_long" and error.status == 413
    assert "5000 characters as written and 38749 as spoken" in error.message
    assert "POLYTTS_MAX_SPOKEN_CHARS" in error.message and "10000" in error.message
    assert error.detail == {"limit": 10_000, "written_chars": 5_000, "spoken_chars": 38_749}


@pytest.mark.parametrize(
    ("letter", "script"),
    [
        ("a", "Latin"),
        ("é", "Latin"),
        ("ß", "Latin"),
        ("ﬁ", "Latin"),
        ("Ａ", "Latin"),
        ("ש", "Hebrew"),
        ("ﬠ", "Hebrew"),
        ("م", "Arabic"),
        ("ж", "Cyrillic"),
        ("λ", "Greek"),
        ("中", "Han"),
        ("々", "Han"),
        ("𠀋", "Han"),
        ("か", "Hiragana"),
        ("カ", "Katakana"),
        ("ｶ", "Katakana"),
        ("한", "Hangul"),
        ("न", "Devanagari"),
        ("ก", "Thai"),
        ("ሀ", "Ethiopic"),
        ("𞤀", "Adlam"),  # not in the table: named by its Unicode name
    ],
)
def test_each_letter_has_its_script(letter: str, script: str) -> None:
    assert script_of(letter) == script


@pytest.mark.parametrize(
    ("language", "written", "spoken"),
    [
        # English reads Latin only; a run of another script goes, with the spaces and punctuation inside it
        ("en", "Say שלום, עולם to David.", "Say to David."),
        ("en", "Hello 你好世界 world", "Hello world"),
        ("en", "Привет, мир! 123 ok", "! 123 ok"),
        ("en", "مرحبا بالعالم", ""),
        ("en", "naïve café, ﬁne Ångström", "naïve café, ﬁne Ångström"),
        ("en", "e\u0301 and ב\u05bcא", "e\u0301 and"),  # a combining mark goes with its letter
        ("en", "שלום 42 עולם", "42"),  # a digit ends a run: it is read
        ("es", "Hola Κόσμε", "Hola"),
        # Hindi reads Devanagari and Latin; Chinese reads Han and Latin, not kana; Japanese all three
        ("hi", "नमस्ते world שלום", "नमस्ते world"),
        ("zh", "你好 hello こんにちは", "你好 hello"),
    ],
)
def test_runs_of_a_script_the_language_does_not_read_are_skipped(language: str, written: str, spoken: str) -> None:
    lang = resolve_language(language)
    assert skip_unreadable(Spoken.of(written), lang).text == spoken


def test_skipped_runs_are_named_and_keep_their_place_in_the_written_text() -> None:
    written = "Peace is שלום ושלום, or سلام."
    spoken = skip_unreadable(Spoken.of(written), ENGLISH)
    assert spoken.text == "Peace is , or ."
    assert unreadable_scripts(written, ENGLISH) == ["Hebrew", "Arabic"]
    assert spoken.written_between(0, len(spoken.text)) == written
    assert unreadable_scripts("Plain English.", ENGLISH) == []


def test_skipping_is_cheap_on_long_text() -> None:
    text = ("שלום עולם ומלואו " * 300)[:5000] + "Hello."
    spoken = skip_unreadable(Spoken.of(text), ENGLISH)
    assert spoken.text == "Hello."
    assert unreadable_scripts(text, ENGLISH) == ["Hebrew"]


@pytest.mark.parametrize(
    ("written", "spoken"),
    [
        ("Done ✅ see you 👋🏽 soon!", "Done see you soon!"),
        ("I ❤️ it 😀😀😀.", "I it ."),
        ("Press 1️⃣ now 🇫🇷", "Press 1 now"),
        ("Family: 👨‍👩‍👧 ok", "Family: ok"),  # the joiners are gone already (text.cleaning); the rest here
        ("Stars ★★★ and ⭐", "Stars and"),
        ("Items ❶ and 🄰 stay", "Items ❶ and 🄰 stay"),  # dingbat digits and squared letters are read
        ("A → B costs 5 € at 20 °C, © 2025 ™", "A → B costs 5 € at 20 °C, © 2025 ™"),  # symbols that say something
    ],
)
def test_emoji_and_pictographs_are_left_out_of_the_text_as_spoken(written: str, spoken: str) -> None:
    said = skip_pictographs(Spoken.of(clean_text(written)))
    assert said.text == spoken
    assert said.written_between(0, len(said.text)).split()[0] == written.split()[0]


def test_three_hundred_emoji_count_as_nothing_spoken() -> None:
    said = skip_pictographs(Spoken.of("😀" * 300))
    assert said.text == "" and holds_pictographs("😀" * 300) and not holds_pictographs("A → B © ❶")
    beside = skip_pictographs(Spoken.of("Hello " + "🎉" * 300 + " world."))
    assert beside.text == "Hello world." and beside.written_between(6, 12) == "world."
