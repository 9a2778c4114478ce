"""text/live_ssml.py and SSML in text/live_text.py: SSML that arrives in pieces, its tags split across messages,
read whole; the segmenter never cuts inside one (the native live WebSocket: tests/http/test_live_ssml.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from errors import InvalidInput
from text.chunking import Chunk, PhraseSegmenter
from text.live_ssml import LiveSsml, Mark
from text.live_text import LiveText
from text.spoken import Edit, Spoken
from text.ssml import with_cartesia_tags

DOCUMENT = (
    '<speak>Say <sub alias="World Wide Web">W3C</sub>, then wait.<break time="700ms"/>'
    '<prosody rate="slow">Slowly, now.</prosody> <!-- a comment --> Tom &amp; Jerry.</speak>'
)


def pronounce(text: str, edits: list[Edit], language: str | None, rate: float | None) -> Spoken:
    return Spoken.of(text).edited(edits) if edits else Spoken.of(text)


def chunks_of(pieces: list[str], ssml: bool | None = None, voice: Callable[[str], None] | None = None) -> list[Chunk]:
    text = LiveText(PhraseSegmenter(60, 120), 10_000, lambda: None, pronounce=pronounce, ssml=ssml, voice=voice)
    for piece in pieces:
        text.add(piece)
    text.close()
    chunks = []
    while (taken := text.take()) is not None:
        chunks.append(taken[0])
    return chunks


def test_ssml_split_anywhere_gives_the_chunks_it_gives_whole() -> None:
    whole = chunks_of([DOCUMENT])
    assert [(chunk.text, chunk.written, chunk.silence, chunk.rate) for chunk in whole] == [
        # The clauses queued before a step are one step, up to its break (`LiveText.take`).
        ("Say World Wide Web, then wait.", "Say W3C, then wait.", 0.7, None),
        ("Slowly, now.", None, None, 0.8),  # another rate: a step of its own
        ("Tom & Jerry.", None, None, None),
    ]
    for size in (1, 3, 7):  # every tag, entity and comment cut across messages somewhere
        assert chunks_of([DOCUMENT[i : i + size] for i in range(0, len(DOCUMENT), size)]) == whole


def test_a_break_before_any_text_or_after_a_phrase_already_taken_comes_before_the_next() -> None:
    text = LiveText(PhraseSegmenter(60, 120), 10_000, lambda: None, pronounce=pronounce)
    text.add('<speak><break time="1s"/>Hello there. ')
    text.flush()
    first = text.take()
    assert first is not None and first[0].lead == 1.0
    text.add('<break time="500ms"/>Bye now.</speak>')
    text.close()
    second = text.take()
    assert second is not None and second[0].lead == 0.5 and second[0].text == "Bye now."


def test_a_break_after_the_last_phrase_was_taken_is_a_silence_of_its_own_at_the_end() -> None:
    text = LiveText(PhraseSegmenter(60, 120), 10_000, lambda: None, pronounce=pronounce)
    text.add("<speak>Hello there. ")
    text.flush()
    first = text.take()
    assert first is not None and first[0].text == "Hello there." and first[1] is False
    text.add('<break time="800ms"/></speak>')
    text.close()
    assert text.take() == (Chunk("", "none", lead=0.8), True)
    assert text.take() is None


def test_a_break_with_no_phrase_before_it_adds_no_silence_at_the_end() -> None:
    assert chunks_of(['<speak><break time="1s"/></speak>']) == []


def test_plain_live_text_is_never_read_as_ssml() -> None:
    assert [chunk.text for chunk in chunks_of(["<spe", "ech> is a word.", " 3 < 4."])] == ["<speech> is a word. 3 < 4."]


def test_vendor_tags_without_speak_are_read_when_asked() -> None:
    chunks = chunks_of(['One.<break time="1s"/>', "Two."], ssml=True)
    assert [(chunk.text, chunk.silence) for chunk in chunks] == [("One.", 1.0), ("Two.", None)]


def test_a_bare_less_than_sign_in_tag_reading_text_is_text() -> None:
    # Cartesia's socket reads its tags in every transcript: "3 < 4" and "<3" are words, not the start of a tag.
    chunks = chunks_of(["3 <", " 4, I <3 it.", '<break time="1s"/>Done.'], ssml=True)
    assert [(chunk.text, chunk.silence) for chunk in chunks] == [("3 < 4, I <3 it.", 1.0), ("Done.", None)]


def test_an_element_opening_a_placeholder_is_spoken_once() -> None:
    reader = LiveSsml(english=True)
    pieces = reader.feed('<say-as interpret-as="characters">AB</say-as> and <break time="1s"/>')
    assert isinstance(pieces[0], str) and pieces[1:] == [" and ", Mark(1.0)]
    assert reader.expand(pieces[0] + " and") == ("AB and", [(0, 2, "ay bee")])


@pytest.mark.parametrize(
    ("pieces", "code"),
    [
        (["<speak>Hi <audio src='x'/>"], "invalid_ssml"),
        (["<speak>Hi <lexicon uri='x'/>"], "invalid_ssml"),
        (["<speak>Hi <!DOCTYPE x>"], "xml_unsafe"),
        (["<speak>Hi </p>"], "malformed_xml"),
        (["<speak>Hi <sub alias='x'>there"], "malformed_xml"),
        (["<speak>Hi <break time='1"], "malformed_xml"),
        (["<speak>Hi <break time='forever'/>"], "invalid_ssml"),
        (["<speak>Hi \ue000"], "invalid_text"),
    ],
)
def test_what_cannot_be_read_is_a_422_naming_it(pieces: list[str], code: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        chunks_of(pieces)
    assert refused.value.code == code, refused.value.message


def test_cartesia_tags_are_read_live_and_whole() -> None:
    chunks = chunks_of(['<speed ratio="1.5"/>Fast, <spe', "ll>AB</spell> now."], ssml=True)
    assert [(chunk.text, chunk.written, chunk.rate) for chunk in chunks] == [
        ("Fast, ay bee now.", "Fast, AB now.", 1.5)
    ]
    assert with_cartesia_tags('A &<speed ratio="0.8"/> <spell>AB</spell><speed ratio="1.2"/>.') == (
        '<speak>A &amp;<prosody rate="80%"> <say-as interpret-as="characters">AB</say-as></prosody>'
        '<prosody rate="120%">.</prosody></speak>'
    )
    with pytest.raises(InvalidInput):
        with_cartesia_tags('<speed ratio="fast"/>Hi.')


def voiced_chunks(pieces: list[str], stock: frozenset[str] = frozenset({"am_adam", "bf_emma"})) -> list[Chunk]:
    checked: list[str] = []

    def check(name: str) -> None:
        if name not in stock:
            raise InvalidInput(f"no stock voice {name!r}", code="invalid_ssml")
        checked.append(name)

    chunks = chunks_of(pieces, voice=check)
    assert list(dict.fromkeys(checked)) == list(dict.fromkeys(chunk.voice for chunk in chunks if chunk.voice))
    return chunks


VOICES = (
    '<speak>Hello there. <voice name="am_adam">General Kenobi, <prosody rate="fast">you are'
    '</prosody> bold.<voice name="bf_emma">Quite.</voice> Back.</voice> Mine again.</speak>'
)


def test_a_voice_split_across_messages_says_the_phrases_after_it() -> None:
    whole = voiced_chunks([VOICES])
    assert [(chunk.text, chunk.voice, chunk.rate) for chunk in whole] == [
        ("Hello there.", None, None),
        ("General Kenobi,", "am_adam", None),
        ("you are", "am_adam", 1.25),
        ("bold.", "am_adam", None),
        ("Quite.", "bf_emma", None),
        ("Back.", "am_adam", None),
        ("Mine again.", None, None),
    ]
    for size in (1, 4, 9):  # the tags cut across messages somewhere
        assert voiced_chunks([VOICES[i : i + size] for i in range(0, len(VOICES), size)]) == whole


def test_an_unknown_voice_is_refused_as_its_tag_arrives_before_a_phrase_of_it_is_cut() -> None:
    def nobody(name: str) -> None:
        raise InvalidInput(f"no stock voice {name!r}", code="invalid_ssml")

    text = LiveText(PhraseSegmenter(60, 120), 10_000, lambda: None, pronounce=pronounce, voice=nobody)
    text.add("<speak>Hi. <voice na")
    with pytest.raises(InvalidInput) as refused:
        text.add('me="nobody_here">Bye now.')
    assert refused.value.code == "invalid_ssml" and "nobody_here" in refused.value.message
    assert text.cut == 0 and text.take() is None  # refused before anything after it is cut (or what came before)
    with pytest.raises(InvalidInput) as nameless:
        voiced_chunks(["<speak>Hi. <voice>Bye.</voice></speak>"])
    assert nameless.value.code == "invalid_ssml" and "name" in nameless.value.message
    with pytest.raises(InvalidInput) as unchecked:  # a LiveText told of no voices switches to none
        chunks_of(['<speak>Hi. <voice name="am_adam">Bye.</voice></speak>'])
    assert unchecked.value.code == "invalid_ssml" and "am_adam" in unchecked.value.message
