"""Text: language mapping, the sentence splitter, chunking (whole texts and streamed ones)."""

from __future__ import annotations

import random
import re

import pytest

from errors import InvalidInput
from text.chunking import Chunk, PhraseSegmenter, chunk_text, collapse_whitespace, split_sentences
from text.languages import LANGUAGES, resolve_language, voice_gender, voice_language

# --- sentences ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        ("One. Two!  Three?\nFour", ["One.", "Two!", "Three?", "Four"]),
        ("今日は晴れ。明日は雨！", ["今日は晴れ。", "明日は雨！"]),
        ("「行こう。」と言った。次だ。", ["「行こう。」", "と言った。", "次だ。"]),
        ("Dr.Who is 3.5 m tall.", ["Dr.Who is 3.5 m tall."]),  # no space after the stop: never a boundary
        ("Dr. Smith paid $3.50. He left.", ["Dr. Smith paid $3.50.", "He left."]),
        ("Mr. and Mrs. Jones met Prof. Lee.", ["Mr. and Mrs. Jones met Prof. Lee."]),
        ("Bring fruit, e.g. apples. Or i.e. pears.", ["Bring fruit, e.g. apples.", "Or i.e. pears."]),
        ("Apples, pears, etc. are fine.", ["Apples, pears, etc. are fine."]),
        ("Apples, pears, etc. Then we left.", ["Apples, pears, etc.", "Then we left."]),
        (
            "The U.S. economy grew. So did the U.K. Then it fell.",
            ["The U.S. economy grew.", "So did the U.K.", "Then it fell."],
        ),
        ("J. R. R. Tolkien wrote it.", ["J. R. R. Tolkien wrote it."]),
        ("He joined the U.S. Army in the U.S. Northwest.", ["He joined the U.S. Army in the U.S. Northwest."]),
        (
            "It was 5 p.m. Everyone left at 6 p.m. We stayed.",
            ["It was 5 p.m.", "Everyone left at 6 p.m.", "We stayed."],
        ),
        ("Meet at 5 p.m. and bring food. Fine.", ["Meet at 5 p.m. and bring food.", "Fine."]),
        ("It is No. 5 on the list. I said no. Then left.", ["It is No. 5 on the list.", "I said no.", "Then left."]),
        ("He lives on Elm St. Then he moved to St. Louis.", ["He lives on Elm St.", "Then he moved to St. Louis."]),
        ("Apple Inc. shares rose. Acme Inc. The end.", ["Apple Inc. shares rose.", "Acme Inc.", "The end."]),
        ("Due Jan. 5 this year.", ["Due Jan. 5 this year."]),
        ("Wait... what? Well… Maybe.", ["Wait... what?", "Well…", "Maybe."]),
        ('"Stop." Then he ran. (Really.) Yes.', ['"Stop."', "Then he ran.", "(Really.)", "Yes."]),
        ('"Why?" she asked. "Go!" he said.', ['"Why?" she asked.', '"Go!" he said.']),
        ("Pi is 3.14159. Version 2.0.1 shipped.", ["Pi is 3.14159.", "Version 2.0.1 shipped."]),
        ("Hello world", ["Hello world"]),
        ("  \n ", []),
    ],
)
def test_sentence_splitter(text: str, sentences: list[str]) -> None:
    assert split_sentences(text) == sentences


def test_normalize_collapses_spaces_and_keeps_lines_and_paragraphs() -> None:
    assert collapse_whitespace("  a \t b \n c  ") == "a b\nc"
    assert collapse_whitespace("a\n\n\n \n b\r\n\r\nc\rd") == "a\n\nb\n\nc\nd"
    assert collapse_whitespace(" \n\t ") == ""


# --- chunks -------------------------------------------------------------------------------------------------------

LONG_FIRST = (
    "When the morning light finally reached the old farmhouse on the hill the children ran down to the kitchen and "
    "found the cards on the kitchen shelf, each card written in their grandmother's careful hand. Then they ate."
)
PARAGRAPHS = (
    "Dr. Smith paid $3.50 for the tickets, and the show began at 7 p.m. sharp. Everyone cheered.\n\n"
    "The second act was longer; it ran past ten — nobody minded. We left at midnight.\n"
    "Then we slept."
)


def spoken(chunks: list[Chunk]) -> list[str]:
    return " ".join(c.text for c in chunks).split()


def unspaced(text: str) -> str:
    return re.sub(r"\s+", "", text)


def test_chunks_say_which_pause_ends_them() -> None:
    chunks = chunk_text(PARAGRAPHS, 60, 120)
    assert chunks == [
        Chunk("Dr. Smith paid $3.50 for the tickets,", "clause"),
        Chunk("and the show began at 7 p.m. sharp. Everyone cheered.", "paragraph"),
        Chunk(
            "The second act was longer; it ran past ten — nobody minded. We left at midnight. Then we slept.",
            "sentence",
        ),
    ]


def test_last_chunk_pause_follows_its_punctuation() -> None:
    assert chunk_text("Hello there", 60, 120) == [Chunk("Hello there", "none")]
    assert chunk_text("Hello there,", 60, 120) == [Chunk("Hello there,", "clause")]
    assert chunk_text("Hello there!", 60, 120) == [Chunk("Hello there!", "sentence")]


def test_first_chunk_is_the_first_sentence_when_it_fits() -> None:
    chunks = chunk_text("Short one. " + " ".join(f"Sentence {i} is here." for i in range(30)), 40, 120)
    assert chunks[0] == Chunk("Short one.", "sentence")
    assert all(len(c.text) <= 120 for c in chunks)


def test_long_first_sentence_splits_at_clauses_that_fit() -> None:
    text = "Hello there, this first sentence runs on for quite a while, and it keeps going well past the cap. Done."
    chunks = chunk_text(text, 40, 120)
    assert chunks[0] == Chunk("Hello there,", "clause")
    assert chunks[1] == Chunk(
        "this first sentence runs on for quite a while, and it keeps going well past the cap. Done.", "sentence"
    )


def test_first_clause_longer_than_the_cap_stays_whole_below_the_hard_cap() -> None:
    # 74 characters without punctuation: over the first cap (60) but within its hard cap (120): not broken.
    text = "The old man walked slowly along the narrow road toward the distant village. It was late."
    assert chunk_text(text, 60, 120)[0] == Chunk(
        "The old man walked slowly along the narrow road toward the distant village.", "sentence"
    )
    text = "The old man walked slowly along the narrow road toward the distant village, then he sat down."
    assert chunk_text(text, 60, 120)[0] == Chunk(
        "The old man walked slowly along the narrow road toward the distant village,", "clause"
    )


def test_phrase_over_the_hard_cap_is_cut_at_a_natural_gap() -> None:
    chunks = chunk_text(LONG_FIRST, 60, 120)
    assert chunks[0] == Chunk("When the morning light finally reached the old farmhouse", "none")
    assert chunks[1].text.startswith("on the hill")  # before a preposition, not after "the"
    assert spoken(chunks) == LONG_FIRST.split()
    text = (
        "The quick brown fox jumps over the lazy dog and then runs away into the forest where nobody can find him "
        "because he is very fast and clever and never stops running until the sun goes down."
    )
    chunks = chunk_text(text, 60, 120)
    assert chunks[0].text == "The quick brown fox jumps over the lazy dog"
    assert chunks[1].text.startswith("and then")
    assert all(len(c.text) <= 120 for c in chunks) and spoken(chunks) == text.split()


def test_later_long_clauses_are_cut_into_near_equal_parts() -> None:
    clause = " ".join(["word"] * 60)  # 299 characters, no punctuation
    chunks = chunk_text("Hi. " + clause + ".", 60, 120)
    lengths = [len(c.text) for c in chunks[1:]]
    assert max(lengths) <= 120 and max(lengths) - min(lengths) <= 10
    assert [c.pause for c in chunks] == ["sentence", "none", "none", "sentence"]


def test_a_cut_never_strands_an_article() -> None:
    # Gaps after "the" score worst: the cut goes elsewhere even where "the" is nearer the target.
    text = "Bring " + "the red box and the blue box and " * 6 + "the end."
    for chunk in chunk_text(text, 30, 60):
        assert not chunk.text.endswith((" the", " and"))


NO_BREAK_CASES = [
    "The committee decided to postpone the annual meeting until the new building was finished.",
    "Dr. Smith paid $3.50 for a ticket to the late show at the St. James theatre downtown.",
    "She found the letters from her grandmother in a box under the stairs of the old house.",
    "Please remember to bring your passport and the printed confirmation to the airport counter.",
    "Our quarterly revenue grew by 3.5 percent compared with the same period of the previous year.",
    "The U.S. team arrived at 5 p.m. on Friday after a long flight from the other side of the world.",
]


@pytest.mark.parametrize("sentence", NO_BREAK_CASES)
def test_no_split_inside_an_unpunctuated_phrase_below_the_hard_cap(sentence: str) -> None:
    assert len(sentence) <= 120
    chunks = chunk_text(sentence + " And then some more words follow here.", 60, 120)
    assert chunks[0] == Chunk(sentence, "sentence")


def test_chunks_end_only_at_punctuation_unless_a_phrase_exceeds_the_hard_cap() -> None:
    text = " ".join([PARAGRAPHS, LONG_FIRST, *NO_BREAK_CASES])
    for chunk in chunk_text(text, 60, 120):
        if chunk.pause == "none":
            phrase = chunk.text  # a cut phrase: the text around the cut had no punctuation for over the cap
            assert len(phrase) <= 120 and not re.search(r"[,;:.!?—]$", phrase)
        else:
            assert re.search(r"[,;:.!?—…\"')]$", chunk.text)


def test_paragraphs_are_never_packed_together() -> None:
    chunks = chunk_text("One.\n\nTwo.\n\nThree. Four.", 0, 100)
    assert chunks == [Chunk("One.", "paragraph"), Chunk("Two.", "paragraph"), Chunk("Three. Four.", "sentence")]


def test_sentences_are_packed_up_to_the_cap() -> None:
    chunks = chunk_text("One. Two. Six. Ten. Yes.", 10, 9)
    assert [c.text for c in chunks] == ["One.", "Two. Six.", "Ten. Yes."]


def test_sentence_cap_and_unlimited_caps() -> None:
    text = "One. Two. Three. Four. Five. Six. Seven."
    texts = lambda chunks: [c.text for c in chunks]  # noqa: E731
    assert texts(chunk_text(text, 100, 100, max_sentences=3)) == ["One.", "Two. Three. Four.", "Five. Six. Seven."]
    assert texts(chunk_text(text, 0, 0, max_sentences=0)) == ["One.", "Two. Three. Four. Five. Six. Seven."]
    assert texts(chunk_text(text, 0, 12, max_sentences=0)) == ["One.", "Two. Three.", "Four. Five.", "Six. Seven."]
    long = "word " * 100
    assert texts(chunk_text(long, 0, 0)) == [long.strip()]


def test_long_words_and_unspaced_text_are_cut_hard() -> None:
    chunks = chunk_text("x" * 25, 10, 10)
    assert "".join(c.text for c in chunks) == "x" * 25 and all(len(c.text) <= 10 for c in chunks)
    japanese = "あ" * 30 + "。"
    chunks = chunk_text(japanese, 8, 12)
    assert "".join(c.text for c in chunks) == japanese and max(len(c.text) for c in chunks) <= 12
    assert len(chunks[0].text) <= 8
    assert (
        "".join(c.text for c in chunk_text("今日は、とても良い天気です。明日も晴れ。", 5, 20))
        == "今日は、とても良い天気です。明日も晴れ。"
    )


def test_clause_marks_are_preferred_to_spaces_and_numbers_are_not_clauses() -> None:
    assert chunk_text("one two three, four five six seven eight nine", 20, 100)[0].text == "one two three,"
    chunks = chunk_text("We sold 1,234 units at 3:30 in the years 1990–2000 and moved on, finally.", 40, 100)
    assert chunks[0].text == "We sold 1,234 units at 3:30 in the years 1990–2000 and moved on,"


def test_empty_text_has_no_chunks() -> None:
    assert chunk_text(" \n ", 10, 20) == []


def random_text(rng: random.Random, words: int) -> str:
    vocabulary = [
        "the",
        "cat",
        "sat",
        "on",
        "a",
        "mat",
        "Dr.",
        "Smith",
        "paid",
        "$3.50",
        "e.g.",
        "U.S.",
        "and",
        "which",
        "running",
        "extraordinarily",
        "3.14",
        "St.",
        "Louis",
        "etc.",
        "No.",
        "5",
        "J.",
        "x" * 40,
        "今日は",
        "晴れ。",
    ]
    marks = ["", "", "", "", ",", ";", ":", " —", ".", "!", "?", "...", '."', "\n", "\n\n"]
    parts = []
    for _ in range(words):
        parts.append(rng.choice(vocabulary) + rng.choice(marks))
    return " ".join(parts)


def test_every_character_is_spoken_exactly_once_and_caps_hold() -> None:
    rng = random.Random(7)
    for case in range(300):
        text = random_text(rng, rng.randint(1, 80))
        first, cap = rng.choice([(10, 20), (20, 40), (60, 120), (40, 40), (0, 50), (0, 0)])
        chunks = chunk_text(text, first, cap, rng.choice([0, 1, 3]))
        assert unspaced("".join(c.text for c in chunks)) == unspaced(collapse_whitespace(text)), (case, text)
        assert all(c.text and c.text == c.text.strip() for c in chunks)
        if cap:
            assert all(len(c.text) <= cap for c in chunks), (case, text)
            assert len(chunks[0].text) <= min(2 * (first or cap), cap), (case, text)


# --- streamed text ------------------------------------------------------------------------------------------------


def segment(parts: list[str], first: int = 60, cap: int = 120) -> list[Chunk]:
    segmenter = PhraseSegmenter(first, cap)
    chunks = [chunk for part in parts for chunk in segmenter.feed(part)]
    return chunks + segmenter.flush()


STREAMED = [
    LONG_FIRST,
    PARAGRAPHS,
    'Dr. Smith paid $3.50. He left at 5 p.m. and said: "Bye." Wait... really? Yes!\n\nNew one, here; there.',
    "x" * 130 + " yy, z. " + "あ" * 70 + "。今日は、晴れ。",
    "Fruits, e.g. apples, pears, etc. are good. Then we went to the U.S. The end. He lives on Elm St. Then "
    "he moved to St. Louis.",
    "Sure! Here is the plan for your trip to Rome, which starts on Monday: first the Colosseum, then lunch.",
    "They moved to the U.S. Northwest in 1990 and joined the U.S. Army. Then Acme Inc. Shares fell, etc. The end.",
]


@pytest.mark.parametrize("text", STREAMED)
def test_streamed_chunks_do_not_depend_on_how_the_text_was_split(text: str) -> None:
    whole = segment([text])
    assert unspaced("".join(c.text for c in whole)) == unspaced(text)
    for cut in range(len(text) + 1):
        assert segment([text[:cut], text[cut:]]) == whole, cut
    assert segment(list(text)) == whole
    assert segment(re.findall(r"\S+\s*", text)) == whole
    assert segment([text[i : i + 7] for i in range(0, len(text), 7)]) == whole


def test_streamed_chunks_are_split_invariant_on_random_texts() -> None:
    rng = random.Random(11)
    for case in range(60):
        text = random_text(rng, rng.randint(1, 40))
        first, cap = rng.choice([(10, 20), (20, 40), (60, 120), (30, 30)])
        whole = segment([text], first, cap)
        assert unspaced("".join(c.text for c in whole)) == unspaced(text), (case, text)
        assert all(len(c.text) <= cap for c in whole), (case, text)
        pieces, pos = [], 0
        while pos < len(text):
            step = rng.randint(1, 9)
            pieces.append(text[pos : pos + step])
            pos += step
        assert segment(pieces, first, cap) == whole, (case, text)
        assert segment(list(text), first, cap) == whole, (case, text)


def test_segmenter_emits_a_sentence_as_soon_as_it_is_decided() -> None:
    segmenter = PhraseSegmenter(60, 120)
    assert segmenter.feed("Hello there.") == []  # "Hello there." could still be "Hello there.com" or go on
    assert segmenter.pending == "Hello there."
    assert segmenter.feed(" How") == [Chunk("Hello there.", "sentence")]
    assert segmenter.pending == "How"
    assert segmenter.feed(" are you") == []
    assert segmenter.flush() == [Chunk("How are you", "none")]
    assert segmenter.pending == ""


def test_segmenter_cuts_a_long_open_sentence_at_its_clauses() -> None:
    segmenter = PhraseSegmenter(40, 120)
    assert segmenter.feed("Well, since you asked so nicely") == []  # 31 characters: the sentence may end soon
    # Past the first cap (40) the sentence must be cut; "Well," is the only whole clause that fits.
    assert segmenter.feed(" about the weather, I will") == [Chunk("Well,", "clause")]
    assert segmenter.pending.startswith("since you asked")
    assert segmenter.feed(" tell you everything I know about the coming storm") == []  # later cap: 120
    assert segmenter.feed(" and the rain that will follow it tomorrow morning") == [
        Chunk("since you asked so nicely about the weather,", "clause")
    ]


def test_release_speaks_complete_clauses_of_an_open_sentence_now() -> None:
    segmenter = PhraseSegmenter(60, 120)
    assert segmenter.feed("The service splits the text into sentences,") == []
    assert segmenter.release() == []  # the comma is decided by what follows it
    assert segmenter.feed(" keeps the first") == []  # 59 characters known: packing would wait for more
    assert segmenter.release() == [Chunk("The service splits the text into sentences,", "clause")]
    assert segmenter.feed(" piece short, and sends it. Next") == [
        Chunk("keeps the first piece short, and sends it.", "sentence")
    ]
    assert segmenter.release() == [] and segmenter.pending == "Next"  # an open clause stays until it is complete
    assert segmenter.flush() == [Chunk("Next", "none")]


def test_release_packs_what_is_complete_up_to_the_cap() -> None:
    segmenter = PhraseSegmenter(20, 120)
    assert segmenter.feed("One, two, three and four, five and six, seven") == [Chunk("One, two,", "clause")]
    # Past the first cap the sentence waits to pack up to 120; released, the complete clauses go in one chunk.
    assert segmenter.release() == [Chunk("three and four, five and six,", "clause")]
    assert segmenter.pending == "seven"


def test_segmenter_waits_for_an_abbreviation_to_be_decided() -> None:
    segmenter = PhraseSegmenter(60, 120)
    assert segmenter.feed("Ask Dr. ") == []
    assert segmenter.feed("Smith. He") == [Chunk("Ask Dr. Smith.", "sentence")]
    segmenter = PhraseSegmenter(60, 120)
    assert segmenter.feed("Go to the U.S. The") == []  # "The" or "Theatre"? The next word decides.
    assert segmenter.feed(" end") == [Chunk("Go to the U.S.", "sentence")]


def test_segmenter_paragraph_pause_and_long_runs_without_punctuation() -> None:
    assert segment(["One.\n\nTwo"]) == [Chunk("One.", "paragraph"), Chunk("Two", "none")]
    segmenter = PhraseSegmenter(20, 40)
    chunks = [c for word in ("lorem ipsum dolor " * 20).split(" ") for c in segmenter.feed(word + " ")]
    assert chunks and all(len(c.text) <= 40 for c in chunks)
    assert len(segmenter.pending) < 80  # a long unpunctuated stream does not pile up


# --- languages ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (None, "en-us"),
        ("en", "en-us"),
        ("EN_us", "en-us"),
        ("English", "en-us"),
        ("a", "en-us"),
        ("en-GB", "en-gb"),
        ("British English", "en-gb"),
        ("es", "es"),
        ("French", "fr-fr"),
        ("pt", "pt-br"),
        ("hi", "hi"),
        ("it", "it"),
    ],
)
def test_language_codes_map_to_one_language(code: str | None, expected: str) -> None:
    assert resolve_language(code).code == expected


@pytest.mark.parametrize(
    ("voice", "language", "gender"),
    [
        ("af_heart", "en-us", "female"),
        ("am_michael", "en-us", "male"),
        ("bf_emma", "en-gb", "female"),
        ("bm_george", "en-gb", "male"),
        ("ef_dora", "es", "female"),
        ("ff_siwis", "fr-fr", "female"),
        ("hf_alpha", "hi", "female"),
        ("im_nicola", "it", "male"),
        ("jf_alpha", "ja", "female"),
        ("pm_alex", "pt-br", "male"),
        ("zf_xiaobei", "zh", "female"),
        ("zm_yunjian", "zh", "male"),
        ("xf_unknown", None, None),
        ("heart", None, None),
        ("af", None, None),
        ("aq_heart", None, None),
        ("Af_heart", None, None),
        ("", None, None),
    ],
)
def test_kokoro_voice_names_give_language_and_gender(voice: str, language: str | None, gender: str | None) -> None:
    found = voice_language(voice)
    assert (found.code if found else None) == language
    assert voice_gender(voice) == gender


def test_every_language_has_a_kokoro_prefix_that_resolves_to_it() -> None:
    for prefix in "abefhijpz":
        assert LANGUAGES[prefix] == voice_language(f"{prefix}f_test")


def test_unknown_language_lists_what_is_accepted() -> None:
    with pytest.raises(InvalidInput) as err:
        resolve_language("klingon")
    assert err.value.code == "unsupported_language" and "en-us" in err.value.message


def test_language_without_its_g2p_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyopenjtalk" else real(name, *a))
    with pytest.raises(InvalidInput) as err:
        resolve_language("Japanese")
    assert err.value.status == 422 and err.value.code == "language_not_installed"
    assert "pip install pyopenjtalk-plus" in err.value.message
