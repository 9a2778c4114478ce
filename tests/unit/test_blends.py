"""Voice blends: formulas parsed, refused with the part they name, spelled canonically, and mixed."""

from __future__ import annotations

import numpy as np
import pytest

from engines.blends import BlendPart, canonical_blend, is_blend, parse_blend
from engines.kokoro.voicepacks import PACK_SHAPE, mix
from errors import InvalidInput


def weights(formula: str) -> list[tuple[str, float]]:
    return [(p.name, p.weight) for p in parse_blend(formula)]


def test_parse_blend() -> None:
    assert weights("af_bella(2)+af_sky(1)") == [("af_bella", pytest.approx(2 / 3)), ("af_sky", pytest.approx(1 / 3))]
    assert weights("a+b") == [("a", 0.5), ("b", 0.5)]
    assert weights(" a (1) + b (3) ") == [("a", 0.25), ("b", 0.75)]
    assert weights("a(2)") == [("a", 1.0)]
    assert weights("a(0.5)+b(1e-1)+c") == [
        ("a", pytest.approx(0.5 / 1.6)),
        ("b", pytest.approx(0.1 / 1.6)),
        ("c", pytest.approx(1 / 1.6)),
    ]
    assert weights("x.y-1(1e+1)+z_2(10)") == [("x.y-1", 0.5), ("z_2", 0.5)]
    assert weights("a(1e300)+b(1e300)") == [("a", 0.5), ("b", 0.5)]
    assert sum(p.weight for p in parse_blend("+".join(f"v{i}({i + 1})" for i in range(8)))) == pytest.approx(1)


@pytest.mark.parametrize(
    ("formula", "part", "index"),
    [
        ("", "", 0),
        ("   ", "", 0),
        ("a++b", "", 1),
        ("+a", "", 0),
        ("a+", "", 1),
        ("a+b c", "b c", 1),
        ("a+" + "n" * 65, "n" * 65, 1),
        ("a+b/c", "b/c", 1),
        ("a(x)", "a(x)", 0),
        ("a(2", "a(2", 0),
        ("a()", "a()", 0),
        ("a(2)b", "a(2)b", 0),
        ("b+a(2))", "a(2))", 1),
        ("a((2))", "a((2))", 0),
        ("(2)", "(2)", 0),
        ("a(inf)", "a(inf)", 0),
        ("a(1e999)", "a(1e999)", 0),
        ("a(nan)", "a(nan)", 0),
        ("a(0)", "a(0)", 0),
        ("b+a(-1)", "a(-1)", 1),
        ("a(1)+b+a(2)", "a(2)", 2),
        ("+".join(f"v{i}" for i in range(9)), "v8", 8),
    ],
)
def test_malformed_blends(formula: str, part: str, index: int) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_blend(formula)
    error = caught.value
    assert error.code == "invalid_blend" and error.status == 422
    assert error.detail == {"part": part, "index": index}
    assert f"'{part}'" in error.message


def test_is_blend() -> None:
    assert is_blend("af_bella+af_sky") and is_blend("af_bella(2)") and is_blend("a (1) + b")
    assert not is_blend("af_bella") and not is_blend("0123456789abcdef")


def test_mix_weights_constant_packs() -> None:
    ones = np.ones(PACK_SHAPE, np.float32)
    mixed = mix([(ones * 3, 2 / 3), (ones * 6, 1 / 3)])
    assert mixed.dtype == np.float32 and mixed.shape == PACK_SHAPE
    np.testing.assert_allclose(mixed, 4.0, rtol=1e-6)
    pack = np.random.default_rng(0).standard_normal(PACK_SHAPE).astype(np.float32)
    np.testing.assert_array_equal(mix([(pack, 1.0)]), pack)


def test_canonical_blend() -> None:
    assert canonical_blend(parse_blend("af_bella(2)+af_sky(1)")) == "af_bella(0.6667)+af_sky(0.3333)"
    assert canonical_blend(parse_blend(" af_bella (4) + af_sky (2) ")) == "af_bella(0.6667)+af_sky(0.3333)"
    assert canonical_blend([BlendPart("b", 3), BlendPart("a", 1)]) == "b(0.7500)+a(0.2500)"
    assert canonical_blend(parse_blend("a(7)")) == "a(1.0000)"


def test_blend_messages_number_parts_as_detail_index_does() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_blend("a+b c")
    assert caught.value.detail["index"] == 1 and "part at index 1 'b c'" in caught.value.message


def test_a_huge_blend_part_is_quoted_by_its_start_only() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_blend("a+" + "n" * 1_000_000)
    assert len(caught.value.message) < 400 and "1000000 characters" in caught.value.message
    assert len(caught.value.detail["part"]) < 200
