"""Voice ids: the hash existing clients hold, fixed by test vectors, and the check that keeps ids from naming paths."""

from __future__ import annotations

import pytest

from errors import InvalidInput
from voicebank.ids import check_voice_id, compute_voice_id


def test_id_vectors() -> None:
    audio = b"polytts-test-audio"
    assert compute_voice_id(audio, "voxcpm") == "9098c2fdb65b4935"
    assert compute_voice_id(audio, "voxcpm", x_vector_only_mode=True) == "da699e4ad886b591"
    assert compute_voice_id(audio, "voxcpm", seed_audio=b"seed-bytes", seed_text="你好") == "a48a6c59468e9aa5"


def test_empty_seed_text_does_not_change_the_id() -> None:
    assert compute_voice_id(b"a", "voxcpm", seed_text="") == compute_voice_id(b"a", "voxcpm")


@pytest.mark.parametrize("bad", ["../etc", "ABCDEF0123456789", "0" * 15, "0" * 17, "", "0123456789abcdeg"])
def test_check_voice_id_rejects(bad: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        check_voice_id(bad)
    assert exc.value.code == "invalid_voice_id"


def test_check_voice_id_returns_a_good_id() -> None:
    assert check_voice_id("0123456789abcdef") == "0123456789abcdef"


def test_a_huge_id_is_quoted_by_its_start_only() -> None:
    with pytest.raises(InvalidInput) as exc:
        check_voice_id("x" * 1_000_000)
    assert len(exc.value.message) < 200 and "1000000 characters" in exc.value.message
