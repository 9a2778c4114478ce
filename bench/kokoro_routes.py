"""Kokoro-82M routes on this CPU against the int8 ONNX graph the node runs: same tokens, same style row, same threads.

Routes: `onnx_int8` (the shipped graph on ONNX Runtime, the reference), `onnx_fp32` (the same graph with its weights
dequantized, models/float_graph.py, on ONNX Runtime), and, when the `openvino` package is installed, that float
graph on OpenVINO's runtime with its inference precision hinted to `bf16` (which it runs on AVX512-BF16 or AMX) and to
`f32`, and the int8 graph itself on OpenVINO with the `bf16` hint. For each token count (`--tokens`, default 45,130,300, cut from an English paragraph's phonemes) each route is
timed `--runs` times, the routes interleaved so that load on a shared host falls on all of them alike, and the
median is reported with its ratio to `onnx_int8`. Equivalence: each route's durations against int8's, and the
correlation of its waveform with int8's (over the shorter of the two: a token one frame longer shifts all
that follows, so this is low unless the durations match), of its average log spectrum, and its loudness.

OpenVINO comes with requirements-dev.txt (requirements-openvino.txt); without it the OpenVINO routes are skipped.
The OpenVINO routes run the engine's own float graph (models/float_graph.py's IR, its sine generator kept in f32).

Run: `python -m bench.kokoro_routes [--threads 2] [--runs 5] [--routes openvino_bf16,...] [--out PATH]`; JSON in bench/results/ with the host's
processor flags and load average.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import SIXTY_WORDS, int_list, load_average, new_report, run_main

Infer = Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
"""tokens [1, n + 2] int64, style [1, 256] float32, speed [1] float32 → audio, durations."""

TEXT = SIXTY_WORDS * 3
"""Long enough for the largest token count."""


def onnx_route(path: Path, threads: int) -> Infer:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])

    def infer(tokens: np.ndarray, style: np.ndarray, speed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        audio, durations = session.run(["audio", "durations"], {"tokens": tokens, "style": style, "speed": speed})
        return np.asarray(audio).reshape(-1), np.asarray(durations).reshape(-1)

    return infer


def openvino_route(model: Path | Any, threads: int, precision: str) -> Infer:
    """`model`: a graph's path, or an `openvino.Model`."""
    import openvino as ov

    compiled = ov.Core().compile_model(
        str(model) if isinstance(model, Path) else model,
        "CPU",
        {"INFERENCE_PRECISION_HINT": precision, "INFERENCE_NUM_THREADS": threads},
    )
    request = compiled.create_infer_request()

    def infer(tokens: np.ndarray, style: np.ndarray, speed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        result = request.infer({"tokens": tokens, "style": style, "speed": speed})
        return np.asarray(result["audio"]).reshape(-1), np.asarray(result["durations"]).reshape(-1)

    return infer


def token_ids(count: int, vocab: dict[str, int]) -> list[int]:
    from engines.g2p import G2P, choose_english_route
    from text.languages import resolve_language

    phonemes = G2P(choose_english_route()).phonemize(TEXT, resolve_language("en-us"))
    ids = [vocab[p] for p in phonemes if p in vocab]
    if len(ids) < count:
        raise SystemExit(f"the text gives {len(ids)} tokens, fewer than {count}")
    return ids[:count]


def average_log_spectrum(audio: np.ndarray, frame: int = 1024) -> np.ndarray:
    """The log of the mean power spectrum over the utterance (Hann frames, half overlapping): the voice's timbre,
    which a one-frame shift of a duration does not change as it changes the waveform."""
    hop = frame // 2
    frames = np.lib.stride_tricks.sliding_window_view(audio, frame)[::hop] * np.hanning(frame)
    return np.log10(np.mean(np.abs(np.fft.rfft(frames, axis=1)) ** 2, axis=0) + 1e-10)


def equivalence(reference: tuple[np.ndarray, np.ndarray], other: tuple[np.ndarray, np.ndarray]) -> dict[str, Any]:
    (ref_audio, ref_durations), (audio, durations) = reference, other
    n = min(len(ref_audio), len(audio))
    return {
        "durations_equal": bool(np.array_equal(ref_durations, durations)),
        "durations_max_diff": int(np.max(np.abs(ref_durations - durations)))
        if len(ref_durations) == len(durations)
        else None,
        "samples": [len(ref_audio), len(audio)],
        "waveform_correlation": float(np.corrcoef(ref_audio[:n], audio[:n])[0, 1]),
        "log_spectrum_correlation": float(
            np.corrcoef(average_log_spectrum(ref_audio), average_log_spectrum(audio))[0, 1]
        ),
        "rms_ratio": float(np.sqrt(np.mean(audio**2)) / np.sqrt(np.mean(ref_audio**2))),
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import json

    import onnx

    from engines.kokoro.stock_voices import StockVoices
    from models.float_graph import dequantize

    folder: Path = args.model_dir
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))["vocab"]
    pack = StockVoices().pack(args.voice)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        fp32 = Path(tmp) / "model-fp32.onnx"
        onnx.save(dequantize(onnx.load(str(folder / "model.onnx"))), str(fp32))
        derive_s = time.perf_counter() - started
        wanted = ["onnx_fp32", "openvino_bf16", "openvino_f32", "openvino_int8_graph_bf16"]
        if args.routes:
            wanted = [name for name in wanted if name in args.routes]
        routes: dict[str, Infer] = {"onnx_int8": onnx_route(folder / "model.onnx", args.threads)}
        if "onnx_fp32" in wanted:
            routes["onnx_fp32"] = onnx_route(fp32, args.threads)
        skipped: dict[str, str] = {}
        try:
            import openvino

            from engines.kokoro.onnx_routes import read_float_graph

            graph = read_float_graph(folder / "model.onnx")  # the engine's own: its sine generator kept in f32
            for precision in ("bf16", "f32"):
                if f"openvino_{precision}" in wanted:
                    routes[f"openvino_{precision}"] = openvino_route(graph, args.threads, precision)
            if "openvino_int8_graph_bf16" in wanted:
                routes["openvino_int8_graph_bf16"] = openvino_route(folder / "model.onnx", args.threads, "bf16")
            openvino_version = openvino.__version__
        except ImportError as exc:
            skipped["openvino"] = str(exc)
            openvino_version = None
        rows: dict[str, Any] = {}
        for count in args.tokens:
            ids = token_ids(count, vocab)
            inputs = (
                np.array([[0, *ids, 0]], dtype=np.int64),
                np.asarray(pack[len(ids) - 1], dtype=np.float32).reshape(1, -1),
                np.array([1.0], dtype=np.float32),
            )
            outputs = {name: infer(*inputs) for name, infer in routes.items()}  # warm-up (shape compiles), and kept
            times: dict[str, list[float]] = {name: [] for name in routes}
            for run in range(args.runs):
                order = list(routes) if run % 2 == 0 else list(reversed(routes))
                for name in order:
                    time.sleep(args.pause)
                    started = time.perf_counter()
                    routes[name](*inputs)
                    times[name].append(time.perf_counter() - started)
            reference = statistics.median(times["onnx_int8"])
            rows[str(count)] = {
                name: {
                    "median_s": statistics.median(runs),
                    "ratio_to_int8": statistics.median(runs) / reference,
                    "runs_s": runs,
                    "audio_s": len(outputs[name][0]) / 24_000,
                    **({} if name == "onnx_int8" else equivalence(outputs["onnx_int8"], outputs[name])),
                }
                for name, runs in times.items()
            }
            sys.stderr.write(
                f"[kokoro_routes] {count} tokens: "
                + ", ".join(
                    f"{n} {r['median_s']:.2f}s ({r['ratio_to_int8']:.2f}x)" for n, r in rows[str(count)].items()
                )
                + f"; load {load_average()}\n"
            )
    return {
        "goal": "a route at 0.7x or less of the int8 ONNX graph's time, the same tokens, style row and threads",
        "derive_fp32_s": derive_s,
        "openvino_version": openvino_version,
        "skipped": skipped,
        "rows": rows,
    }


def table(report: dict[str, Any]) -> str:
    figure = report["figures"]["kokoro_routes"]
    if "error" in figure:
        return f"kokoro_routes failed: {figure['error']}"
    host = report["host"]
    lines = [f"{host.get('cpu_model')}, {host.get('cpus')} CPUs, flags {' '.join(host.get('cpu_flags', []))}"]
    names = list(next(iter(figure["rows"].values())))
    lines.append("| tokens | " + " | ".join(names) + " |")
    lines.append("|---" * (len(names) + 1) + "|")
    for count, row in figure["rows"].items():
        cells = [f"{row[n]['median_s']:.2f} s ({row[n]['ratio_to_int8']:.2f}x)" for n in names]
        lines.append(f"| {count} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    from settings import load_settings

    settings = load_settings()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int_list, default=[45, 130, 300])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--pause", type=float, default=0.2, help="seconds between runs (spinning threads settle)")
    parser.add_argument(
        "--routes", type=lambda text: text.split(","), help="only these routes besides onnx_int8 (comma-separated)"
    )
    parser.add_argument("--voice", default="af_heart")
    parser.add_argument("--model-dir", type=Path, default=settings.onnx_path(settings.models_dir))
    parser.add_argument("--out", type=Path, help="JSON output path")
    args = parser.parse_args()

    def run() -> dict[str, Any]:
        report = new_report("kokoro_routes", args)
        report["figures"]["kokoro_routes"] = measure(args)
        report["failed"] = []
        return report

    with contextlib.suppress(KeyboardInterrupt):
        return run_main("kokoro_routes", run, args.out, table)
    return 130


if __name__ == "__main__":
    sys.exit(main())
