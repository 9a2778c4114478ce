"""lexicons/ and the text modules they use: PLS and JSON rules read (hostile XML refused fast), phonemes converted
and checked, the one-pass matcher, the atomic store, inline phoneme markup, phoneme spans through the G2P, and a
text pronounced with lexicons traced back to the text as written."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from engines import FAMILIES
from engines.base import Engine, SynthesisOptions
from errors import InvalidInput, NotFound, PayloadTooLarge
from lexicons.lexicon import Lexeme, Lexicon
from lexicons.matcher import Matcher
from lexicons.pls import read_pls, write_pls
from lexicons.rules import read_rules
from lexicons.store import LexiconStore
from lifecycle.pronunciation import Pronouncer
from settings import load_settings
from text.cleaning import clean_text
from text.inline_phonemes import inline_phonemes
from text.languages import resolve_language
from text.phoneme_spans import decoded, encode, holds_phonemes, phonemize_spans
from text.phonemes import KOKORO_SYMBOLS, to_kokoro
from text.safe_xml import XmlError, parse_xml
from text.spoken import Spoken

PLS = """<?xml version="1.0" encoding="UTF-8"?>
<lexicon version="1.0" xmlns="http://www.w3.org/2005/01/pronunciation-lexicon" alphabet="ipa" xml:lang="en-US">
  <meta name="author" content="tests"/>
  <lexeme><grapheme>Kokoro</grapheme><phoneme>kˈoʊkəɹoʊ</phoneme></lexeme>
  <lexeme><grapheme>W3C</grapheme><grapheme>W3.org</grapheme><alias>World Wide Web Consortium</alias></lexeme>
  <lexeme><grapheme>new york</grapheme><alias>the big apple</alias></lexeme>
  <lexeme><grapheme>new york city</grapheme><alias>gotham</alias></lexeme>
  <lexeme><grapheme>tomato</grapheme><phoneme alphabet="x-sampa">t@"mA:toU</phoneme></lexeme>
  <lexeme><grapheme>zebra</grapheme><phoneme alphabet="cmu-arpabet">Z IY1 B R AH0</phoneme></lexeme>
  <lexeme><grapheme>US</grapheme><alias>United States</alias></lexeme>
  <lexeme>
    <grapheme>route</grapheme><phoneme>ɹut</phoneme><phoneme prefer="true">ɹaʊt</phoneme>
    <example>Take the route.</example>
  </lexeme>
</lexicon>
""".encode()


def lexicon() -> Lexicon:
    return read_pls(PLS, "tests", 100)


def test_a_pls_document_is_read_with_its_aliases_phonemes_and_language() -> None:
    read = lexicon()
    assert read.language == "en-US" and len(read.lexemes) == 8
    by_word = {lexeme.graphemes[0]: lexeme for lexeme in read.lexemes}
    assert by_word["Kokoro"].phonemes == "kˈOkəɹO"  # IPA diphthongs as Kokoro's letters
    assert by_word["W3C"].graphemes == ("W3C", "W3.org") and by_word["W3C"].alias == "World Wide Web Consortium"
    assert by_word["tomato"].phonemes == "təˈmɑːtO"  # X-SAMPA converted
    assert by_word["zebra"].phonemes == "zˈibɹə"  # ARPAbet converted, stress before the vowel
    assert by_word["route"].phonemes == "ɹWt"  # the preferred pronunciation
    assert all(set(lexeme.phonemes or "") <= KOKORO_SYMBOLS for lexeme in read.lexemes)


def test_the_id_hashes_the_content_so_the_same_lexicon_has_the_same_id() -> None:
    assert lexicon().lexicon_id == lexicon().lexicon_id
    assert read_pls(write_pls(lexicon()), "tests", 100).lexicon_id == lexicon().lexicon_id  # a download reads back
    other = read_pls(PLS.replace(b"gotham", b"the city"), "tests", 100)
    assert other.lexicon_id != lexicon().lexicon_id


def test_json_rules_are_a_lexicon_too() -> None:
    rules = [
        {"grapheme": "Kokoro", "phoneme": "kˈoʊkəɹoʊ", "alphabet": "ipa"},
        {"grapheme": ["W3C", "W3.org"], "alias": "World Wide Web Consortium"},
    ]
    bare = read_rules(json.dumps(rules).encode(), "named", 100)
    assert bare.name == "named" and bare.lexemes[0].phonemes == "kˈOkəɹO" and bare.language is None
    wrapped = read_rules(json.dumps({"name": "n", "language": "en", "rules": rules}).encode(), "", 100)
    assert wrapped.language == "en" and wrapped.lexemes == bare.lexemes


@pytest.mark.parametrize(
    ("document", "code"),
    [
        (b"<lexicon xmlns='http://www.w3.org/2005/01/pronunciation-lexicon'><lexeme>", "malformed_xml"),
        (b"<speak/>", "invalid_lexicon"),
        (b"<lexicon><lexeme><grapheme>a</grapheme></lexeme></lexicon>", "invalid_lexicon"),
        (b"<lexicon><lexeme><grapheme>a</grapheme><bogus/></lexeme></lexicon>", "invalid_lexicon"),
        (b"<lexicon><word/></lexicon>", "invalid_lexicon"),
        (b"<lexicon alphabet='klingon'/>", "unknown_alphabet"),
        (
            b"<lexicon><lexeme><grapheme>a</grapheme><phoneme>\xe2\x98\x83</phoneme></lexeme></lexicon>",
            "unsayable_phonemes",
        ),
        (
            b"<lexicon><lexeme><grapheme>a</grapheme><phoneme alphabet='x-sampa'>a$</phoneme></lexeme></lexicon>",
            "unsayable_phonemes",
        ),
        (
            b"<lexicon><lexeme><grapheme>a</grapheme><phoneme alphabet='cmu-arpabet'>QQ1</phoneme></lexeme></lexicon>",
            "unsayable_phonemes",
        ),
        (b"<lexicon><lexeme><grapheme> , </grapheme><alias>x</alias></lexeme></lexicon>", "invalid_lexicon"),
        (b"<lexicon>&nope;</lexicon>", "malformed_xml"),
    ],
)
def test_a_bad_document_is_refused_with_a_code_that_says_why(document: bytes, code: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        read_pls(document, "", 100)
    assert refused.value.code == code


def test_unsayable_phonemes_are_named() -> None:
    with pytest.raises(InvalidInput, match="U\\+2603") as refused:
        to_kokoro("a☃", "ipa", " (for 'snow')")
    assert refused.value.detail["symbols"] == ["☃"]


def test_malformed_xml_says_where() -> None:
    with pytest.raises(XmlError) as refused:
        parse_xml(b"<a>\n  <b></c>\n</a>", "the document")
    assert refused.value.code == "malformed_xml" and refused.value.detail == {"line": 2, "column": 8}


BOMB = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
<!ENTITY lol9 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">]>
<lexicon>&lol9;</lexicon>"""
EXTERNAL = b"""<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]><lexicon>&e;</lexicon>"""


@pytest.mark.parametrize(
    "document",
    [
        BOMB,
        EXTERNAL,
        b'<!DOCTYPE lexicon SYSTEM "http://example.com/x.dtd"><lexicon/>',
        b"<lexicon>" + b"<lexeme>" * 10_000 + b"</lexeme>" * 10_000 + b"</lexicon>",
        b"<a>" * 200_000,
    ],
    ids=["entity-bomb", "external-entity", "external-dtd", "deep-nesting", "deep-unclosed"],
)
def test_hostile_xml_is_refused_in_milliseconds(document: bytes) -> None:
    started = time.perf_counter()
    with pytest.raises(XmlError) as refused:
        read_pls(document, "", 100)
    assert refused.value.code == "xml_unsafe"
    assert time.perf_counter() - started < 0.5


def test_a_lexicon_past_its_entry_bound_is_413() -> None:
    entries = "".join(f"<lexeme><grapheme>w{i}</grapheme><alias>x</alias></lexeme>" for i in range(11))
    with pytest.raises(PayloadTooLarge) as refused:
        read_pls(f"<lexicon>{entries}</lexicon>".encode(), "", 10)
    assert refused.value.code == "lexicon_too_large"


def test_the_matcher_takes_whole_words_the_longest_grapheme_and_case_as_written() -> None:
    matcher = Matcher([lexicon()], "en-us")
    text = "Kokoro's Kokoro in New York City, new  york, W3C, USA, US and us. KOKORO? tomatoes"
    found = [(text[start:end], entry.alias or entry.phonemes) for start, end, entry in matcher.matches(text)]
    assert found == [
        ("Kokoro's", "kˈOkəɹOz"),  # a possessive is the entry and its 's
        ("Kokoro", "kˈOkəɹO"),
        ("New York City", "gotham"),
        ("new  york", "the big apple"),
        ("W3C", "World Wide Web Consortium"),
        ("US", "United States"),
    ]
    lower = Lexicon("l", None, (Lexeme(("kokoro",), alias="ko ko ro"),))
    assert [(text[s:e], entry.alias) for s, e, entry in Matcher([lower], "en-us").matches(text)] == [
        ("Kokoro's", "ko ko ro's"),
        ("Kokoro", "ko ko ro"),
        ("KOKORO", "ko ko ro"),
    ]
    said = {
        word: Matcher([Lexicon("p", None, (Lexeme((word,), phonemes=ph),))], "en-us").matches(f"{word}’s")[0][2]
        for word, ph in (("Liz", "lˈɪz"), ("Kate", "kˈAt"), ("Bob", "bˈɑb"))
    }
    assert [entry.phonemes for entry in said.values()] == ["lˈɪzɪz", "kˈAts", "bˈɑbz"]
    assert not Matcher([lower], "en-us").matches("Kokoros")


def test_the_first_lexicon_says_a_word_and_a_lexicon_of_another_language_says_nothing() -> None:
    first = Lexicon("a", "en", (Lexeme(("word",), alias="first"),))
    second = Lexicon("b", None, (Lexeme(("word",), alias="second"),))
    assert Matcher([first, second], "en-gb").matches("word")[0][2].alias == "first"
    assert Matcher([first, second], "fr").matches("word")[0][2].alias == "second"
    assert not Matcher([first], "ja")


def test_ten_thousand_entries_match_in_one_pass() -> None:
    entries = tuple(Lexeme((f"word{i}", f"two words{i}"), alias=f"alias {i}") for i in range(10_000))
    matcher = Matcher([Lexicon("big", None, entries)], "en-us")
    text = " ".join(f"word{i} plain two words{i}" for i in range(0, 1000, 7))
    assert len(matcher.matches(text)) == 2 * len(range(0, 1000, 7))


def test_the_store_writes_atomically_reads_back_and_removes(tmp_path: Path) -> None:
    store = LexiconStore(tmp_path / "lexicons")
    assert store.put(lexicon()) and not store.put(lexicon())
    lexicon_id = lexicon().lexicon_id
    assert sorted(path.name for path in (tmp_path / "lexicons").iterdir()) == [f"{lexicon_id}.json"]
    (tmp_path / "lexicons" / "0123456789abcdef.json").write_text("{broken")  # damaged: skipped, never served
    again = LexiconStore(tmp_path / "lexicons")
    assert again.get(lexicon_id) == lexicon() and [lx.lexicon_id for lx in again.list()] == [lexicon_id]
    again.remove(lexicon_id)
    with pytest.raises(NotFound):
        again.get(lexicon_id)
    with pytest.raises(InvalidInput):
        again.get("../etc/passwd")
    assert LexiconStore(tmp_path / "lexicons").list() == []


def test_inline_phonemes_keep_the_word_as_written_and_carry_its_phonemes() -> None:
    written, edits = inline_phonemes("Say [Kokoro](/kˈOkəɹO/) twice, [not this](https://x.org).")
    assert written == "Say Kokoro twice, [not this](https://x.org)."
    assert [(written[s:e], decoded(said)) for s, e, said in edits] == [("Kokoro", "kˈOkəɹO")]
    with pytest.raises(InvalidInput) as refused:
        inline_phonemes("[x](/k☃/)")
    assert refused.value.code == "unsayable_phonemes"


def test_phoneme_spans_reach_the_g2p_as_they_are_and_a_client_cannot_forge_them() -> None:
    text = f"I like {encode('kˈOkəɹO')}, a lot {encode('ə lˈɑt')}."
    assert holds_phonemes(text)
    said = phonemize_spans(text, lambda plain: f"<{plain}>")
    assert said == "<I like> kˈOkəɹO<, a lot> ə lˈɑt."
    with pytest.raises(InvalidInput) as refused:
        clean_text(text)
    assert refused.value.code == "invalid_phoneme_text"


def test_a_rewrite_of_a_rewrite_is_traced_to_the_text_as_written() -> None:
    first = Spoken.of("Call W3C at 5.").edited([(5, 8, "World Wide Web Consortium")])
    second = Spoken.of(first.text).edited([(len(first.text) - 2, len(first.text) - 1, "five")])
    both = first.then(second)
    assert both.text == "Call World Wide Web Consortium at five."
    assert both.written == "Call W3C at 5."
    assert both.written_between(0, both.text.index(" at")) == "Call W3C"


def engine(family: str) -> Engine:
    """A family's engine as the node builds it (not loaded: pronouncing reads no weights)."""
    settings = load_settings()
    spec = FAMILIES[family]
    built = spec.build(spec.own_settings(settings), settings.engine_context())
    assert built is not None
    return built


def test_a_cloning_engine_gets_the_aliases_and_a_clear_422_for_phonemes(tmp_path: Path) -> None:
    pronouncer = Pronouncer()
    voxcpm = engine("voxcpm")
    options = SynthesisOptions(language=resolve_language("en"), params={})
    said = pronouncer.spoken("The W3C met.", [lexicon()], voxcpm, options)
    assert said.text == "The World Wide Web Consortium met." and said.written == "The W3C met."
    for text in ("Kokoro met.", "[Kokoro](/kˈOkəɹO/) met."):
        with pytest.raises(InvalidInput, match="voxcpm") as refused:
            pronouncer.spoken(text, [lexicon()], voxcpm, options)
        assert refused.value.code == "phonemes_unsupported" and refused.value.detail == {"engine": "voxcpm"}


def test_kokoro_gets_phoneme_spans_and_its_normalization_still_runs_on_aliases(tmp_path: Path) -> None:
    numbers = Lexicon("n", None, (Lexeme(("Zorblax",), alias="3 apples"),))
    options = SynthesisOptions(language=resolve_language("en"), params={})
    said = Pronouncer().spoken("Zorblax and Kokoro.", [numbers, lexicon()], engine("kokoro"), options)
    assert said.text == f"three apples and {encode('kˈOkəɹO')}."
    assert said.written == "Zorblax and Kokoro." and said.written_between(0, len("three apples")) == "Zorblax"
