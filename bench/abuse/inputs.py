"""Probes of hostile input and damaged disks: cache entries, forms, uploads, bodies, ids, a damaged voices folder."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.abuse.admission import slow_readers
from bench.abuse.payloads import json_text_body, multipart, npy, random_pack, send_while_reading, understated_npz
from bench.abuse.probing import MB, SENTENCE, Answer, Target, code_of, expect, no_tracebacks, short
from engines.kokoro.voicepacks import pack_id

CACHE_DAMAGE: dict[str, Callable[[Path], object]] = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "emptied": lambda p: p.write_bytes(b""),
    "odd length": lambda p: p.write_bytes(p.read_bytes()[:-1]),
    "random bytes": lambda p: p.write_bytes(os.urandom(p.stat().st_size)),
}


def cache_probes(target: Target, skip: str | None) -> None:
    # A sentence of its own, so that a server probed before holds no entry for it yet.
    body = {"text": f"{SENTENCE} Its number is {uuid.uuid4().int % 10_000}.", "language": "en"}
    state: dict[str, Any] = {}

    def prepare() -> Answer:
        assert target.cache_dir is not None
        with target.client() as client:
            before = set((target.cache_dir / "pcm").glob("*.pcm"))
            first = client.post("/tts/stream", json=body)
            expect(first.status_code == 200 and first.headers.get("x-cache") == "miss", f"first: {short(first)}")
            again = client.post("/tts/stream", json=body)
            expect(again.headers.get("x-cache") == "hit" and again.content == first.content, "the repeat is no hit")
        (entry,) = set((target.cache_dir / "pcm").glob("*.pcm")) - before
        state.update(entry=entry, audio=first.content)
        return Answer("200 miss, 200 hit", f"entry {entry.name[:12]}…, {len(first.content)} bytes")

    target.probe("cache entry written and hit", prepare, skip)
    for damage_name, damage in CACHE_DAMAGE.items():

        def damaged(damage: Callable[[Path], object] = damage) -> Answer:
            expect("entry" in state, "no cache entry to damage")
            damage(state["entry"])
            with target.client() as client:
                repaired = client.post("/tts/stream", json=body)
                cache = repaired.headers.get("x-cache")
                expect(repaired.status_code == 200 and cache == "miss", f"{short(repaired)} X-Cache {cache}")
                expect(repaired.content == state["audio"], "the audio differs from the first answer's")
                hit = client.post("/tts/stream", json=body).headers.get("x-cache")
                expect(hit == "hit", f"the entry was not written again (X-Cache {hit} next)")
            return Answer(f"200 {cache}", "right audio; a hit again after")

        target.probe(f"cache entry {damage_name}, same request", damaged, skip)
    target.probe("/tts with timestamps repeated: a hit", lambda: timed_repeat(target), skip)


def timed_repeat(target: Target) -> Answer:
    """A /tts request with `"timestamps": true` (as Pipecat's ElevenLabs HTTP service always asks), then the same
    again: the second is a cache hit (X-Cache), with the same audio and the same words (landed: every request with
    timestamps missed the caches)."""
    body = {
        "text": f"Word timings are cached with their audio, number {uuid.uuid4().int % 10_000}.",
        "timestamps": True,
    }
    with target.client() as client:
        first = client.post("/tts", json=body)
        expect(first.status_code == 200, f"first: {short(first)}")
        again = client.post("/tts", json=body)
    cache = first.headers.get("x-cache"), again.headers.get("x-cache")
    seen = f"X-Cache {cache[0]}, then {short(again)} {cache[1]}"
    expect(cache[0] == "miss" and again.status_code == 200 and cache[1] == "hit", seen)
    words = [word["word"] for word in first.json()["words"]]
    expect(again.json()["words"] == first.json()["words"], "the hit carries other words or times")
    expect(again.json()["audio"] == first.json()["audio"], "the hit carries other audio")
    return Answer(f"200 {cache[0]}, 200 {cache[1]}", f"the same {len(words)} words and audio")


def refused_form(target: Target, body: bytes, status: int, code: str, boundary: str = "probe") -> Callable[[], Answer]:
    def run() -> Answer:
        with target.client() as client:
            headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
            response = client.post("/voices", content=body, headers=headers)
        expect(response.status_code == status and code_of(response) == code, f"{short(response)}, not {status} {code}")
        return Answer(short(response))

    return run


def parallel_uploads(target: Target, count: int = 10, size: int = 25 * MB) -> Answer:
    """`count` uploads of `size` at once, chunked (no Content-Length: the server counts them as they arrive)."""
    head = multipart([("engine", None, b"qwen"), ("ref_text", None, b"hello")])[: -len(b"--probe--\r\n")]
    head += b'--probe\r\nContent-Disposition: form-data; name="audio"; filename="a.wav"\r\n\r\n'
    block = bytes(256 * 1024)

    def blocks() -> Iterator[bytes]:
        yield head
        for _ in range(size // len(block)):
            yield block
        yield b"\r\n--probe--\r\n"

    headers = {**target.auth, "Content-Type": "multipart/form-data; boundary=probe"}
    with ThreadPoolExecutor(count) as pool:
        replies = list(pool.map(lambda _: send_while_reading(target, "/voices", headers, blocks(), None), range(count)))
    statuses = sorted(reply.status for reply in replies)
    expect(all(status in (413, 503) for status in statuses), f"statuses {statuses}")
    expect(all("retry-after" in r.headers for r in replies if r.status == 503), "a 503 without Retry-After")
    counts = ", ".join(f"{status} x{statuses.count(status)}" for status in sorted(set(statuses)))
    return Answer(counts, f"largest sent before its answer {max(r.sent for r in replies) / MB:.1f} MB")


def trailing_newline(target: Target) -> Answer:
    with target.client() as client:
        pack = {"voice_pack": ("v.npy", npy(random_pack(1)))}
        created = client.post("/voices", files=pack, data={"engine": "kokoro"})
        expect(created.status_code in (200, 201), f"registering a pack: {short(created)}")
        voice_id = created.json()["voice_id"]
        answers = [
            client.get(f"/voices/{voice_id}%0A"),
            client.delete(f"/voices/{voice_id}%0A"),
            client.post("/tts", json={"text": "Hi.", "voice_id": voice_id + "\n"}),
        ]
        seen = [response.status_code for response in answers]
        expect(all(status in (404, 422) for status in seen), f"GET, DELETE, /tts answered {seen}")
        expect(client.get(f"/voices/{voice_id}").status_code == 200, "the voice itself is gone")
    return Answer(" ".join(map(str, seen)), "GET, DELETE /voices/{id}%0A and /tts with the id and a newline")


def pack_bomb(target: Target) -> Answer:
    bomb = understated_npz(200 * MB)
    with target.client() as client:
        response = client.post("/voices", files={"voice_pack": ("v.npz", bomb)}, data={"engine": "kokoro"})
    expect(400 <= response.status_code < 500, f"{short(response)}")
    return Answer(short(response), f"{len(bomb) / 1024:.0f} KB inflating to 200 MB")


def tts_body(
    target: Target, content: bytes, status: int, code: str, max_chars: int | None = None
) -> Callable[[], Answer]:
    def run() -> Answer:
        with target.client() as client:
            response = client.post("/tts", content=content, headers={"Content-Type": "application/json"})
        expect(response.status_code == status and code_of(response) == code, f"{short(response)}, not {status} {code}")
        expect(max_chars is None or len(response.text) <= max_chars, f"a {len(response.text)}-character answer")
        return Answer(short(response), f"{len(response.text)} characters")

    return run


def plain_probes(target: Target, own: bool) -> None:
    cache_probes(target, None if target.cache_dir else "needs --cache-dir (a server with POLYTTS_MEMORY_CACHE_BYTES=0)")
    target.probe("16 slow readers (1 KB/s), then a fresh client", lambda: slow_readers(target))
    garbage = os.urandom(3000)
    target.probe(
        "multipart boundary mismatch",
        refused_form(target, multipart([("engine", None, b"qwen")], "other"), 400, "malformed_multipart"),
    )
    target.probe("multipart garbage", refused_form(target, garbage, 400, "malformed_multipart"))
    long_name = multipart([("engine", None, b"qwen"), ("audio", "a" * 10_000 + ".wav", b"RIFF")])
    target.probe("upload file name of 10,000 characters", refused_form(target, long_name, 400, "filename_too_long"))
    twice = multipart([("engine", None, b"qwen"), ("engine", None, b"kokoro"), ("audio", "a.wav", b"RIFF")])
    target.probe("duplicate form fields", refused_form(target, twice, 422, "duplicate_field"))
    # The upload budget is 64 MB by default; the landed version rose by 684 MB.
    target.probe("ten parallel 25 MB uploads", lambda: parallel_uploads(target), max_peak_mb=3 * 64)
    target.probe("voice id with a trailing newline", lambda: trailing_newline(target))
    target.probe("zip-bomb .npz voice pack", lambda: pack_bomb(target), max_peak_mb=100)  # landed: +2.3 GB
    target.probe("lone surrogate text", tts_body(target, b'{"text": "lone \\ud800 surrogate"}', 422, "invalid_text"))
    zero_width = '{"text": "\u200b\u200c\u200d\u2060\ufeff"}'.encode()
    target.probe("zero-width-only text", tts_body(target, zero_width, 422, "empty_text"))
    huge_id = json.dumps({"text": "Hi.", "voice_id": "v" * 1_000_000}).encode()
    target.probe("1 MB voice_id", tts_body(target, huge_id, 404, "voice_not_found", max_chars=1000))
    target.probe("no traceback logged", lambda: no_tracebacks(target), None if own else "the log is the server's own")


# --- probes on the keyed server


def damaged_voices(folder: Path) -> tuple[str, str]:
    """A voices folder with one good pack and one whose meta.json has a non-numeric created_at; their ids."""
    ids = []
    for seed, created_at in ((2, 1.0), (3, "yesterday")):
        values = random_pack(seed)
        voice = folder / pack_id(values)
        voice.mkdir(parents=True)
        (voice / "voice_pack.npy").write_bytes(npy(values))
        (voice / "meta.json").write_text(json.dumps({"engine": "kokoro", "kind": "pack", "created_at": created_at}))
        ids.append(voice.name)
    return ids[0], ids[1]


def started_on_damaged_folder(target: Target, good: str, damaged: str, start_s: float) -> Answer:
    with target.client() as client:
        listed = {voice["voice_id"] for voice in client.get("/voices").json()["voices"]}
    expect(
        good in listed and damaged not in listed,
        f"listed {sorted(listed - {good, damaged})[:3]}…, good {good in listed}, damaged {damaged in listed}",
    )
    lines = [text for text in target.log_says().splitlines() if damaged in text]
    expect(len(lines) == 1 and "WARNING" in lines[0], f"{len(lines)} log lines name the damaged voice: {lines[:2]}")
    return Answer("ready", f"in {start_s:.1f} s; the damaged pack skipped with one warning, the good one listed")


def large_body(target: Target, authenticated: bool, declared: bool, size: int = 200 * MB) -> Callable[[], Answer]:
    """A `size` JSON body to /tts, with or without the key, with a Content-Length or chunked."""
    want, code = (413, "body_too_large") if authenticated else (401, "unauthorized")

    def run() -> Answer:
        headers = {"Content-Type": "application/json", **(target.auth if authenticated else {})}
        reply = send_while_reading(target, "/tts", headers, json_text_body(size), size if declared else None)
        expect(reply.status == want and reply.code == code, f"{reply.status} {reply.code}, not {want} {code}")
        expect(reply.seconds < 5, f"answered after {reply.seconds:.1f} s")
        expect(reply.sent < size // 2, f"{reply.sent / MB:.0f} MB sent before the answer")
        return Answer(f"{reply.status} {reply.code}", f"{reply.sent / MB:.1f} MB sent before the answer")

    return run


def keyed_probes(target: Target, damaged: tuple[str, str, float] | None) -> None:
    target.probe(
        "damaged pack meta.json at start",
        lambda: started_on_damaged_folder(target, *damaged) if damaged else Answer("-"),
        None if damaged else "needs a server of its own",
    )
    no_keys = None if target.api_key else "needs a server with API keys (--api-key)"
    # The landed version read and parsed such a body whole: +566 MB.
    target.probe("200 MB JSON body without a key", large_body(target, False, True), no_keys, max_peak_mb=50)
    target.probe("200 MB JSON body with a key, Content-Length", large_body(target, True, True), no_keys, max_peak_mb=50)
    target.probe("200 MB JSON body with a key, chunked", large_body(target, True, False), no_keys, max_peak_mb=50)
