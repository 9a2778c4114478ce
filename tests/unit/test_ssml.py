"""text/ssml.py: a `<speak>` document read into segments (text as written, how spans are said, exact breaks, rate and
language), unknown elements and bad values refused naming them, hostile XML refused fast."""

from __future__ import annotations

import time

import pytest

from errors import InvalidInput
from text.normalize import normalize_english
from text.phoneme_spans import decoded
from text.ssml import is_ssml, parse_ssml, with_vendor_tags


def said(document: str) -> list[tuple[str, list[tuple[str, str]], float | None, float | None, str | None]]:
    return [
        (s.text, [(s.text[a:b], spoken) for a, b, spoken in s.edits], s.silence, s.rate, s.language)
        for s in parse_ssml(document).segments
    ]


def test_a_document_is_ssml_when_it_begins_with_speak() -> None:
    assert is_ssml("<speak>hi</speak>") and is_ssml('<?xml version="1.0"?>\n<speak version="1.1">hi</speak>')
    assert not is_ssml("<speaker> said hi") and not is_ssml("I <speak>")
    assert is_ssml("<!DOCTYPE speak [<!ENTITY a 'a'>]><speak>&a;</speak>")  # refused by the parser, never said


def test_breaks_cut_segments_with_exact_silences_that_add_up() -> None:
    document = '<speak>One. <break time="700ms"/> Two.<break time="1.5s"/><break strength="weak"/>Three.</speak>'
    assert said(document) == [
        ("One.", [], 0.7, None, None),
        ("Two.", [], 1.75, None, None),
        ("Three.", [], None, None, None),
    ]
    assert said('<speak>A<break strength="none"/>B</speak>') == [("AB", [], None, None, None)]


def test_sub_phoneme_and_say_as_say_spans_their_way_and_keep_the_words_as_written() -> None:
    document = (
        '<speak>The <sub alias="World Wide Web Consortium">W3C</sub>, code '
        '<say-as interpret-as="characters">AB7</say-as>, pin <say-as interpret-as="digits">123</say-as>, the '
        '<say-as interpret-as="ordinal">2</say-as> <phoneme alphabet="x-sampa" ph="t@&quot;mA:toU">tomato</phoneme>.</speak>'
    )
    ((text, edits, *_),) = said(document)
    assert text == "The W3C, code AB7, pin 123, the 2 tomato."
    assert edits[:4] == [
        ("W3C", "World Wide Web Consortium"),
        ("AB7", "ay bee seven"),
        ("123", "1 2 3"),
        ("2", "2nd"),
    ]
    assert edits[4][0] == "tomato" and decoded(edits[4][1]) == "təˈmɑːtO"


def test_say_as_reads_numbers_phones_dates_and_times_as_they_are_meant() -> None:
    document = (
        '<speak><say-as interpret-as="cardinal">1430</say-as>; <say-as interpret-as="telephone">+44 20 7946 0958'
        '</say-as>; <say-as interpret-as="date" format="dmy">31/12/2024</say-as>; <say-as interpret-as="date">'
        '12/31/24</say-as>; <say-as interpret-as="date">2024-02-29</say-as>; <say-as interpret-as="date" format="md">'
        '12-31</say-as>; <say-as interpret-as="date" format="my">03/1999</say-as>; <say-as interpret-as="time">1430'
        '</say-as>; <say-as interpret-as="time">9:05 pm</say-as>; <say-as interpret-as="cardinal">-1,000.5</say-as>'
        "</speak>"
    )
    ((text, edits, *_),) = said(document)
    assert [spoken for _, spoken in edits] == [
        "1,430",  # grouped: a cardinal, never the year "fourteen thirty"
        "plus 4 4, 2 0, 7 9 4 6, 0 9 5 8",
        "2024-12-31",
        "2024-12-31",
        "2024-02-29",
        "December 31st",
        "March 1999",
        "14:30",
        "9:05 pm",
        "-1,000.5",
    ]
    assert [written for written, _ in edits][:3] == ["1430", "+44 20 7946 0958", "31/12/2024"]
    french = parse_ssml('<speak><say-as interpret-as="date">31/12/2024</say-as></speak>', english=False)
    assert french.segments[0].edits == [(0, 10, "2024-12-31")]  # day first outside English


def test_say_as_speaks_in_words_through_the_language_normalization() -> None:
    ((text, edits, *_),) = said(
        '<speak>Call <say-as interpret-as="telephone">555 123 4567</say-as> by <say-as interpret-as="date" '
        'format="dmy">31/12/2024</say-as>, room <say-as interpret-as="cardinal">1430</say-as>.</speak>'
    )
    spoken = text
    for start, end, value in reversed([(text.index(w), text.index(w) + len(w), v) for w, v in edits]):
        spoken = spoken[:start] + value + spoken[end:]
    assert normalize_english(spoken) == (
        "Call five five five, one two three, four five six seven by December thirty-first, twenty twenty-four, room "
        "one thousand four hundred thirty."
    )


def test_paragraphs_sentences_prosody_and_lang_shape_the_segments() -> None:
    document = (
        "<speak><p><s>First one</s><s>second</s></p><p>Next <emphasis>now</emphasis></p>"
        '<prosody rate="slow">slow <prosody rate="200%">fast</prosody></prosody><lang xml:lang="fr-FR">Bonjour</lang>'
        '<lexicon uri="https://node/lexicons/0123456789abcdef"/></speak>'
    )
    assert said(document) == [
        ("First one\nsecond\n\nNext now", [], None, None, None),
        ("slow", [], None, 0.8, None),
        ("fast", [], None, 1.6, None),
        ("Bonjour", [], None, None, "fr-FR"),
    ]
    assert parse_ssml(document).lexicons == ["0123456789abcdef"]


@pytest.mark.parametrize(
    ("document", "code", "named"),
    [
        ("<speak>Hi <audio src='x.wav'/></speak>", "invalid_ssml", "<audio>"),
        ("<speak>Hi <break time='forever'/></speak>", "invalid_ssml", "forever"),
        ("<speak>Hi <break time='30s'/></speak>", "invalid_ssml", "at most"),
        ("<speak><say-as interpret-as='klingon'>x</say-as></speak>", "invalid_ssml", "klingon"),
        ("<speak><prosody rate='warp'>x</prosody></speak>", "invalid_ssml", "warp"),
        ("<speak><say-as interpret-as='cardinal'>many</say-as></speak>", "invalid_ssml", "not a number"),
        ("<speak><say-as interpret-as='telephone'>none</say-as></speak>", "invalid_ssml", "no digits"),
        ("<speak><say-as interpret-as='date' format='dmy'>31/13/2024</say-as></speak>", "invalid_ssml", "no date"),
        ("<speak><say-as interpret-as='date' format='ddy'>1/2/3</say-as></speak>", "invalid_ssml", "format"),
        ("<speak><say-as interpret-as='date' format='ymd'>2024-12</say-as></speak>", "invalid_ssml", "format"),
        ("<speak><phoneme ph='☃'>x</phoneme></speak>", "unsayable_phonemes", "U\\+2603"),
        ("<speak>Hi\n  <b>there</speak>", "malformed_xml", "line 2, column"),
        ("<notspeak/>", "invalid_ssml", "<notspeak>"),
    ],
)
def test_what_cannot_be_honoured_is_a_422_naming_it(document: str, code: str, named: str) -> None:
    with pytest.raises(InvalidInput, match=named) as refused:
        parse_ssml(document)
    assert refused.value.code == code


def test_hostile_ssml_is_refused_fast() -> None:
    bomb = '<?xml version="1.0"?><!DOCTYPE s [<!ENTITY a "aaaa">]><speak>&a;</speak>'
    deep = "<speak>" + "<emphasis>" * 10_000 + "x"
    for document in (bomb, deep):
        started = time.perf_counter()
        with pytest.raises(InvalidInput) as refused:
            parse_ssml(document)
        assert refused.value.code == "xml_unsafe" and time.perf_counter() - started < 0.5


def test_the_tags_elevenlabs_clients_write_bare_become_a_document() -> None:
    bare = 'AT&T says hi <break time="1.5s" /> then &amp; bye.'
    assert said(with_vendor_tags(bare)) == [
        ("AT&T says hi", [], 1.5, None, None),
        ("then & bye.", [], None, None, None),
    ]
    assert with_vendor_tags("a < b & c") == "a < b & c"  # no tag: plain text stays plain
