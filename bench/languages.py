"""Every stock language by ear: a sentence or two per language, spoken by the service and by raw Kokoro, each
transcribed by Whisper base in that language, and the character error rate of both side by side.

    python -m bench.languages                          # starts server.py (caches off)
    python -m bench.languages --url URL
    python -m bench.languages --only es --only fr-fr   # some languages only

Service: `POST /tts` (WAV) with a stock voice of the language, which the request's language follows. Raw Kokoro: the
same text through the same G2P (engines/g2p.py) as it is written, straight into the int8 ONNX model in this process
(onnxruntime, the stock pack's row for the token count): no normalization, no chunking, no seams. Whisper base
(bench/asr.py, offline) transcribes both, told the language (and, for Hindi and Chinese, given a prompt in the script
to write in). Each transcript is compared with `said`, the text as a native speaker reads it, after both are brought
to one spelling (`comparable`): lower case, no punctuation or spaces, numbers, money and dates as the language's
words (what Whisper writes as "12,50 €" or "15/08/2025" read by text/localized_numbers.py, then digits spelt out by
num2words; Hindi has no speller here, so digits Whisper writes for it count as errors), Japanese as its kana reading
and Chinese as toneless pinyin (pyopenjtalk, pypinyin), so that Whisper's choice of script (kanji or kana, traditional
or simplified characters) is no error. The sentences carry numbers, money, dates and times written the way each
language writes them, so a language that reads them wrong shows here. Goal: the service's rate at most the raw
model's plus 0.05 in every language (the service must not lose what Kokoro says right) but Hindi, reported and not
judged: Whisper base writes poor Hindi (a character error rate about 0.6 on both sides), mixing words and digits.
Writes `bench/results/languages-<UTC time>.json` (or `--out`) and prints a table.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import soundfile as sf

from bench.asr import Transcriber, edit_distance
from bench.common import figure_main
from text.languages import Language, resolve_language
from text.localized_numbers import read_numbers
from text.normalize import normalize_english
from text.spoken import Spoken

MARGIN = 0.05
"""How much higher than raw Kokoro's the service's character error rate may be in a language."""
NOT_JUDGED = frozenset({"hi"})
"""Reported but not held to the goal: Whisper base's Hindi is too poor to judge (about 0.6 on both sides)."""


@dataclass(frozen=True)
class Sample:
    voice: str
    text: str
    """What is sent: numbers, money and dates as the language writes them."""
    said: str
    """How a native speaker reads `text` aloud."""
    whisper: str
    """Whisper's language code."""
    prompt: str | None = None
    """Text Whisper takes as what came before, for the script it writes in."""


SAMPLES = {
    "en-us": Sample(
        "af_heart",
        "The museum opened on March 3, 2024. A ticket costs $12.50, and about 1,500 people visit each day.",
        "The museum opened on March third, twenty twenty-four. A ticket costs twelve dollars and fifty cents, and "
        "about one thousand five hundred people visit each day.",
        "en",
    ),
    "en-gb": Sample(
        "bf_emma",
        "The train leaves at 7:45 from platform 9. A return ticket costs £23.40.",
        "The train leaves at seven forty-five from platform nine. A return ticket costs twenty-three pounds and "
        "forty pence.",
        "en",
    ),
    "es": Sample(
        "ef_dora",
        "El museo abrió el 3 de marzo de 2024. La entrada cuesta 12,50 € y cada día llegan 1.500 visitantes. La "
        "próxima visita es el 15/08/2025 a las 9:30.",
        "El museo abrió el tres de marzo de dos mil veinticuatro. La entrada cuesta doce euros con cincuenta "
        "céntimos y cada día llegan mil quinientos visitantes. La próxima visita es el quince de agosto de dos mil "
        "veinticinco a las nueve y treinta.",
        "es",
    ),
    "fr-fr": Sample(
        "ff_siwis",
        "Le musée a ouvert le 3 mars 2024. L'entrée coûte 12,50 € et 1 500 visiteurs viennent chaque jour. La "
        "prochaine visite est le 15/08/2025 à 9:30.",
        "Le musée a ouvert le trois mars deux mille vingt-quatre. L'entrée coûte douze euros cinquante et mille cinq "
        "cents visiteurs viennent chaque jour. La prochaine visite est le quinze août deux mille "
        "vingt-cinq à neuf heures trente.",
        "fr",
    ),
    "it": Sample(
        "if_sara",
        "Il museo ha aperto il 3 marzo 2024. Il biglietto costa 12,50 € e ogni giorno arrivano 1.500 visitatori.",
        "Il museo ha aperto il tre marzo duemilaventiquattro. Il biglietto costa dodici euro e cinquanta centesimi "
        "e ogni giorno arrivano millecinquecento visitatori.",
        "it",
    ),
    "pt-br": Sample(
        "pf_dora",
        "O museu abriu em 3 de março de 2024. A entrada custa R$ 12,50 e 1.500 visitantes vêm todos os dias.",
        "O museu abriu em três de março de dois mil e vinte e quatro. A entrada custa doze reais e cinquenta "
        "centavos e mil e quinhentos visitantes vêm todos os dias.",
        "pt",
    ),
    "hi": Sample(
        "hf_alpha",
        "संग्रहालय 3 मार्च 2024 को खुला। टिकट की कीमत ₹250 है।",
        "संग्रहालय तीन मार्च दो हजार चौबीस को खुला। टिकट की कीमत दो सौ पचास रुपये है।",
        "hi",
        "नमस्ते, यह हिंदी में एक वाक्य है।",
    ),
    "ja": Sample(
        "jf_alpha",
        "東京の博物館は2024年3月3日に開館しました。入場料は1,500円です。",
        "東京の博物館は二千二十四年三月三日に開館しました。入場料は千五百円です。",
        "ja",
    ),
    "zh": Sample(
        "zf_xiaobei",
        "博物馆于2024年3月3日开放。门票价格是50元，每天有1,500名游客。",
        "博物馆于二零二四年三月三日开放。门票价格是五十元，每天有一千五百名游客。",
        "zh",
        "以下是普通话的句子。",
    ),
}
"""A stock voice and a sentence or two for each of Kokoro's nine stock languages."""

_NUM2WORDS = {"es": "es", "fr-fr": "fr", "it": "it", "pt-br": "pt_BR"}


def comparable(text: str, language: Language) -> str:
    """`text` in the one spelling both sides are compared in (see the module's docstring)."""
    text = unicodedata.normalize("NFKC", text)
    if language.code in ("en-us", "en-gb"):
        text = normalize_english(text)
    else:
        text = read_numbers(Spoken.of(text), language).text
    if language.code in _NUM2WORDS:
        from num2words import num2words

        text = re.sub(r"\d+", lambda m: str(num2words(int(m.group()), lang=_NUM2WORDS[language.code])), text)
    elif language.code == "ja":
        import pyopenjtalk

        text = str(pyopenjtalk.g2p(text, kana=True))
    elif language.code == "zh":
        import cn2an
        from pypinyin import lazy_pinyin

        text = " ".join(lazy_pinyin(cn2an.transform(text, "an2cn")))
    return "".join(ch for ch in text.lower() if unicodedata.category(ch)[0] in "LMN")


class RawKokoro:
    """Kokoro's int8 ONNX model driven directly, as its own examples do: the text's phonemes from the service's G2P,
    the token ids, the stock pack's row for their count, one inference."""

    def __init__(self, model_dir: Path) -> None:
        import onnxruntime as ort

        from engines.g2p import G2P, choose_english_route
        from engines.kokoro.stock_voices import StockVoices

        self.session = ort.InferenceSession(str(model_dir / "model.onnx"), providers=["CPUExecutionProvider"])
        self.vocab: dict[str, int] = json.loads((model_dir / "vocab.json").read_text(encoding="utf-8"))["vocab"]
        self.g2p = G2P(choose_english_route())
        self.stock = StockVoices()

    def speak(self, text: str, voice: str, language: Language) -> np.ndarray:
        from engines.kokoro.backend import MAX_TOKENS

        tokens = [self.vocab[p] for p in self.g2p.phonemize(text, language) if p in self.vocab]
        if len(tokens) > MAX_TOKENS:
            raise ValueError(f"{language.code}: {len(tokens)} tokens, more than one inference takes ({MAX_TOKENS})")
        inputs = {
            "tokens": np.array([[0, *tokens, 0]], dtype=np.int64),
            "style": np.asarray(self.stock.pack(voice)[len(tokens) - 1], dtype=np.float32).reshape(1, -1),
            "speed": np.array([1.0], dtype=np.float32),
        }
        return np.asarray(self.session.run(["audio"], inputs)[0], dtype=np.float32).reshape(-1)


def heard(transcriber: Transcriber, wav: bytes, sample: Sample, language: Language) -> dict[str, Any]:
    started = time.perf_counter()
    hypothesis = transcriber.transcribe(wav, sample.whisper, sample.prompt).text
    reference, spelt = comparable(sample.said, language), comparable(hypothesis, language)
    errors = edit_distance(list(reference), list(spelt))
    return {
        "hypothesis": hypothesis,
        "compared": spelt,
        "character_errors": errors,
        "reference_chars": len(reference),
        "cer": round(errors / len(reference), 4),
        "transcribe_s": round(time.perf_counter() - started, 3),
    }


def languages(url: str, args: argparse.Namespace) -> dict[str, Any]:
    from settings import load_settings

    settings = load_settings()
    model_dir = settings.onnx_path(settings.models_dir)
    raw = RawKokoro(model_dir)
    transcriber = Transcriber()
    results: dict[str, Any] = {}
    with httpx.Client(base_url=url, timeout=600) as client:
        for code in args.only or SAMPLES:
            sample, language = SAMPLES[code], resolve_language(code)
            started = time.perf_counter()
            response = client.post("/tts", json={"text": sample.text, "voice": sample.voice})
            response.raise_for_status()
            synth_s = time.perf_counter() - started
            samples, rate = sf.read(io.BytesIO(response.content), dtype="float32")
            service = heard(transcriber, response.content, sample, language)
            service |= {"audio_s": round(len(samples) / rate, 3), "synth_s": round(synth_s, 3)}
            started = time.perf_counter()
            audio = raw.speak(sample.text, sample.voice, language)
            synth_s = time.perf_counter() - started
            wav = io.BytesIO()
            sf.write(wav, audio, 24_000, format="WAV", subtype="PCM_16")
            direct = heard(transcriber, wav.getvalue(), sample, language)
            direct |= {"audio_s": round(len(audio) / 24_000, 3), "synth_s": round(synth_s, 3)}
            results[code] = {
                "voice": sample.voice,
                "text": sample.text,
                "said": sample.said,
                "reference": comparable(sample.said, language),
                "service": service,
                "raw_kokoro": direct,
            }
            sys.stderr.write(f"[languages] {code}: CER service {service['cer']:.3f}, raw {direct['cer']:.3f}\n")
    failed = [
        code
        for code, r in results.items()
        if code not in NOT_JUDGED and r["service"]["cer"] > r["raw_kokoro"]["cer"] + MARGIN
    ]
    return {
        "goal": {"service_cer_at_most_raw_plus": MARGIN, "not_judged": sorted(NOT_JUDGED)},
        "met": not failed,
        "failed": failed,
        "setup": {
            "service": "POST /tts (WAV), the voice's language, caches off unless --url says otherwise",
            "raw_kokoro": f"engines/g2p.py phonemes of the text as written into {model_dir / 'model.onnx'} directly",
            "asr": "Whisper base (faster-whisper, CTranslate2 int8, CPU), beam 5, told the language",
            "g2p": raw.g2p.describe(),
        },
        "languages": results,
    }


def summary(fig: dict[str, Any]) -> str:
    lines = [f"{'language':<9} {'voice':<11} {'service CER':>11} {'raw CER':>8} {'chars':>6} {'audio s':>8}"]
    for code, r in fig["languages"].items():
        service, direct = r["service"], r["raw_kokoro"]
        mark = "  <- worse than raw" if code in fig["failed"] else "  (not judged)" if code in NOT_JUDGED else ""
        lines.append(
            f"{code:<9} {r['voice']:<11} {service['cer']:11.3f} {direct['cer']:8.3f} "
            f"{service['reference_chars']:6d} {service['audio_s']:8.2f}{mark}"
        )
    verdict = "met" if fig["met"] else f"not met in {', '.join(fig['failed'])}"
    lines.append(f"goal: the service's CER at most raw Kokoro's + {MARGIN} in every judged language: {verdict}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running server (caches off); default: start one")
    parser.add_argument("--only", action="append", choices=sorted(SAMPLES), help="run only these languages")
    return figure_main("languages", parser, languages, summary)


if __name__ == "__main__":
    sys.exit(main())
