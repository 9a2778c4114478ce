"""Probes of the small items of the hostile-probe issue: many distinct blends must not grow memory without bound,
OpenAI's voice object is looked up as a name is, a number field refuses `true`, a bundle import killed mid-write
leaves nothing after the next start, a FLAC from /tts reads back whole, and two errors say what they should (an
upload that is not audio shows no memory address, OpenAI's lone surrogate is `invalid_text`)."""

from __future__ import annotations

import io
import os
import random
import re
import signal
import tempfile
import threading
from pathlib import Path

import httpx
import numpy as np
import soundfile as sf

from bench.abuse.probing import Answer, ProbeFailed, Target, code_of, expect, short
from bench.common import local_server

BLENDS = 300
FILLED = 100
"""Blends after which the pack cache is full: 64 mixed packs of 0.52 MB (POLYTTS_KOKORO_MAX_PACKS_MEM's default)."""
MAX_BLEND_GROWTH_MB = 20
"""Growth allowed after FILLED blends (the allocator's slack). Unbounded, the landed version grew by 0.52 MB a blend:
161 MB over 300."""


def random_blends(target: Target, count: int = BLENDS) -> Answer:
    """`count` blends of two or three random stock voices with random weights, each spoken once. The pack cache fills
    over the first FILLED blends (and the engine's buffers settle); after that the server's memory must grow by at
    most MAX_BLEND_GROWTH_MB, however many more distinct blends come (where memory can be read)."""
    chooser = random.Random(21)
    with target.client() as client:
        voices = client.get("/voices").json()["voices"]
        stock = sorted(v["voice_id"] for v in voices if v.get("builtin") and v["voice_id"].startswith(("af_", "am_")))
        expect(len(stock) >= 3, f"only {len(stock)} American English stock voices to blend")
        before = target.memory(reset_peak=False)
        filled = None
        formulas = set()
        for index in range(count):
            if index == FILLED:
                filled = target.memory(reset_peak=False)
            parts = chooser.sample(stock, chooser.choice((2, 3)))
            formula = "+".join(f"{name}({chooser.randint(1, 999)})" for name in parts)
            formulas.add(formula)
            response = client.post("/tts", json={"text": "Hi.", "voice": formula, "language": "en", "format": "pcm"})
            expect(response.status_code == 200, f"blend {formula}: {short(response)}")
        after = target.memory(reset_peak=False)
    if before is None or filled is None or after is None:
        return Answer(f"200 x{count}", f"{len(formulas)} distinct blends; memory not readable here")
    first, rest = ((b["VmRSS"] - a["VmRSS"]) / 1024 for a, b in ((before, filled), (filled, after)))
    detail = f"memory {first:+.1f} MB over the first {FILLED} blends, {rest:+.1f} MB over the {count - FILLED} after"
    expect(rest <= MAX_BLEND_GROWTH_MB, detail)
    return Answer(f"200 x{count}", f"{len(formulas)} distinct blends; {detail}")


def voice_object(target: Target) -> Answer:
    """`voice: {"id": "alloy"}` speaks as `"alloy"` does (OpenAI's custom voice object, the same lookup)."""
    body = {"model": "tts-1", "input": "Hi there.", "response_format": "pcm"}
    with target.client() as client:
        named = client.post("/v1/audio/speech", json={**body, "voice": "alloy"})
        custom = client.post("/v1/audio/speech", json={**body, "voice": {"id": "alloy"}})
    expect(named.status_code == 200, f'"alloy": {short(named)}')
    expect(custom.status_code == 200, f'{{"id": "alloy"}}: {short(custom)} {custom.text[:120]}')
    same = custom.headers.get("x-voice-id") == named.headers.get("x-voice-id")
    expect(same and custom.content == named.content, "the object form speaks with another voice")
    return Answer("200, 200", f"both {named.headers.get('x-voice-id')}")


def numbers_not_true(target: Target) -> Answer:
    """`speed: true` (and `"1.5"`) is a 422 on the native and the OpenAI routes; a live query's text still reads."""
    refused = []
    with target.client() as client:
        for value in (True, "1.5"):
            native = client.post("/tts", json={"text": "Hi.", "speed": value})
            openai = client.post(
                "/v1/audio/speech", json={"model": "tts-1", "input": "Hi.", "voice": "alloy", "speed": value}
            )
            openai_code = openai.json().get("error", {}).get("code") if openai.status_code == 422 else ""
            expect(native.status_code == 422 and code_of(native) == "invalid_input", f"/tts {value!r}: {short(native)}")
            expect(openai_code == "invalid_input", f"/v1/audio/speech {value!r}: {openai.status_code} {openai_code}")
            refused.append(f"{value!r}")
        live = client.post(
            "/tts/live?speed=1.5", content=b'{"text": "Hi."}\n', headers={"Content-Type": "application/x-ndjson"}
        )
    expect(live.status_code == 200 and len(live.content) > 0, f"/tts/live?speed=1.5: {short(live)}")
    return Answer("422 x4, live 200", f"refused {', '.join(refused)} on both routes; speed=1.5 in a query speaks")


FLAC_TEXT = "A file of known length says how long it is, so that every decoder reads all of it."


def flac_reads_whole(target: Target) -> Answer:
    """A FLAC from /tts (its length known before it is written): python-soundfile reads it whole, as many frames as
    its header says, as long as the same text's PCM (landed: its STREAMINFO said 0 samples; soundfile made that
    384,307,168,202,282 s and `sf.read` raised)."""
    with target.client() as client:
        flac = client.post("/tts", json={"text": FLAC_TEXT, "format": "flac"})
        pcm = client.post("/tts", json={"text": FLAC_TEXT, "format": "pcm"})
    expect(flac.status_code == 200 and pcm.status_code == 200, f"flac {short(flac)}, pcm {short(pcm)}")
    info = sf.info(io.BytesIO(flac.content))
    try:
        samples, rate = sf.read(io.BytesIO(flac.content), dtype="int16")
    except (sf.LibsndfileError, RuntimeError) as exc:
        raise ProbeFailed(
            f"sf.read raised {exc}; its header says {info.frames} frames ({info.duration:,.0f} s)"
        ) from exc
    said = f"{samples.shape[0]} frames read, {info.frames} in its header, {len(pcm.content) // 2} in the PCM"
    expect(samples.shape[0] == info.frames == len(pcm.content) // 2 and info.frames > 0, said)
    return Answer("200 flac", f"{said}: {info.frames / rate:.2f} s at {rate} Hz")


MEMORY_ADDRESS = re.compile(r"BytesIO|0x[0-9a-fA-F]{6,}")


def errors_say_what_they_should(target: Target) -> Answer:
    """An upload to POST /voices that is not audio: a 4xx `invalid_audio` whose message shows no in-memory file's
    repr (landed: `<_io.BytesIO object at 0x...>`); and the OpenAI route's lone surrogate in `input`: 422
    `invalid_text`, as on the native routes (landed: `invalid_input`)."""
    garbage = random.Random(9).randbytes(3000)
    form = {"engine": "voxcpm", "ref_text": "Not a clip at all."}
    surrogate = b'{"model":"tts-1","voice":"alloy","input":"a \\ud800 b"}'
    with target.client() as client:
        upload = client.post("/voices", data=form, files={"audio": ("garbage", garbage)})
        speech = client.post("/v1/audio/speech", content=surrogate, headers={"Content-Type": "application/json"})
    try:
        message = str(upload.json().get("message", ""))
    except ValueError:
        message = upload.text
    expect(400 <= upload.status_code < 500 and code_of(upload) == "invalid_audio", f"the upload: {short(upload)}")
    expect(not MEMORY_ADDRESS.search(message), f"the upload's message shows a memory address: {message[:160]!r}")
    openai_code = speech.json().get("error", {}).get("code") if speech.status_code == 422 else ""
    expect(openai_code == "invalid_text", f"OpenAI's lone surrogate: {speech.status_code} {openai_code}")
    return Answer(f"{short(upload)}, 422 invalid_text", f"the upload said {message[:100]!r}")


def _stereo_clip(seconds: float, seed: int) -> bytes:
    """A WAV clip that does not compress (noise), so that its bundle takes a while to write."""
    noise = 0.1 * np.random.default_rng(seed).standard_normal((int(seconds * 48_000), 2))
    out = io.BytesIO()
    sf.write(out, noise.astype(np.float32), 48_000, format="WAV", subtype="PCM_16")
    return out.getvalue()


def _kill_when_writing(voices: Path, pid: int, done: threading.Event) -> None:
    """Kill the server (-9) as soon as a temporary folder appears in its voices folder."""
    while not done.is_set():
        if any(name.startswith(".tmp-") for name in os.listdir(voices)):
            os.kill(pid, signal.SIGKILL)
            return


def killed_bundle_import(attempts: int = 5) -> Answer:
    """A server killed while it writes an imported bundle (`POST /voices/bundle`), then started again on the same
    voices folder: once it is ready, the import's `.tmp-` folder is gone (not an hour later)."""
    with tempfile.TemporaryDirectory() as tmp:
        voices = Path(tmp) / "voices"
        voices.mkdir()
        for attempt in range(1, attempts + 1):
            env = {"POLYTTS_VOICES_DIR": str(voices)}
            with local_server(env) as server, httpx.Client(base_url=server.url, timeout=120) as client:
                form = {"engine": "qwen", "ref_text": "A clip to carry in a bundle."}
                files = {"audio": ("clip.wav", _stereo_clip(55.0, attempt), "audio/wav")}
                created = client.post("/voices", data=form, files=files)
                expect(created.status_code == 201, f"registering the clip: {short(created)}")
                voice_id = created.json()["voice_id"]
                bundle = client.get(f"/voices/{voice_id}/bundle").content
                expect(client.delete(f"/voices/{voice_id}").status_code in (200, 204), "deleting the clip")
                done = threading.Event()
                watcher = threading.Thread(target=_kill_when_writing, args=(voices, server.pid, done))
                watcher.start()
                try:
                    client.post("/voices/bundle", content=bundle, headers={"Content-Type": "application/zip"})
                except httpx.TransportError:
                    pass  # the server died under the request
                finally:
                    done.set()
                    watcher.join()
            left = [name for name in os.listdir(voices) if name.startswith(".tmp-")]
            if not left:
                continue  # killed too late: the folder was renamed in already
            with local_server(env):
                after = [name for name in os.listdir(voices) if name.startswith(".tmp-")]
            expect(not after, f"temporary folder(s) left after the next start: {', '.join(after)[:80]}")
            return Answer("swept", f"killed mid-write on attempt {attempt}; {left[0][:28]}… gone at the next start")
    raise ProbeFailed(f"the server could not be killed mid-write in {attempts} attempts")


def probes(target: Target, own: bool) -> None:
    target.probe(f"{BLENDS} random blends, memory after", lambda: random_blends(target))
    target.probe('OpenAI voice {"id": "alloy"}', lambda: voice_object(target))
    target.probe("speed true or text, native and OpenAI", lambda: numbers_not_true(target))
    target.probe("FLAC from /tts read whole by soundfile", lambda: flac_reads_whole(target))
    target.probe("invalid_audio message; OpenAI lone surrogate", lambda: errors_say_what_they_should(target))
    target.probe(
        "bundle import killed mid-write, restart",
        killed_bundle_import,
        None if own else "starts servers of its own on a voices folder of its own",
    )
