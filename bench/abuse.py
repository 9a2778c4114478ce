"""Hostile clients and damaged disks: replay the adversarial probes and check each answer.

    python -m bench.abuse                        # three servers of its own (see below); about two minutes
    python -m bench.abuse --url URL [--api-key KEY] [--cache-dir DIR] [--pid PID]   # the probes that apply

Prints one line per probe: what the server answered, how long it took, and the server process's memory over the
probe (`rss`: VmRSS after minus before; `peak`: its VmHWM, reset before the probe, minus VmRSS before), then whether
the expectation held. Exits 1 when any did not, so it also serves as a check. Writes
`bench/results/abuse-<UTC time>.json` (or `--out`).

Its own servers: `plain` (no API keys, PCM cache on, in-memory cache off so that repeats read the disk), `keyed`
(API keys on, started on a voices folder holding a pack whose meta.json is damaged) and `one_slot`
(POLYTTS_MAX_INFLIGHT=1, so that one held stream makes every other request a rejection). Against `--url`, probes
that need a server's files or configuration are skipped with the reason: cache entries need `--cache-dir` (and a
server with POLYTTS_MEMORY_CACHE_BYTES=0), bodies refused before authentication need `--api-key` (keys on), random
fairness keys need keys off and POLYTTS_MAX_INFLIGHT=1, a damaged voices folder needs a server of its own; memory is
read from /proc when the server runs on this machine (its pid from `--pid` or `/health`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import socket
import sys
import tempfile
import threading
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.common import SIXTY_WORDS, local_server, new_report, run_main
from engines.kokoro.voicepacks import PACK_SHAPE, pack_id

MB = 1 << 20
API_KEY = "abuse-probe-key"
SENTENCE = "The cache entry is checked before it is served."
LONG_TEXT = " ".join([SIXTY_WORDS] * 3)
OTHER_CLIENT = "127.0.0.2"
"""Another loopback address: to the server, another client."""


class ProbeFailed(Exception):
    """An expectation that did not hold; its message says what was seen."""


@dataclass(frozen=True)
class Answer:
    status: str
    """What the server answered, in short (`401`, `413 x7, 503 x3`, `200 miss`)."""
    detail: str = ""


@dataclass
class Outcome:
    server: str
    probe: str
    status: str = "-"
    seconds: float = 0.0
    rss_mb: float | None = None
    peak_mb: float | None = None
    ok: bool | None = None
    """None: skipped."""
    detail: str = ""


@dataclass
class Target:
    """A server under probe: where it answers, its process (when on this machine) and its files (when known)."""

    name: str
    url: str
    pid: int | None
    api_key: str | None = None
    cache_dir: Path | None = None
    log_path: Path | None = None
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=120, headers=self.auth, **kwargs)

    def probe(
        self, name: str, run: Callable[[], Answer], skip: str | None = None, max_peak_mb: float | None = None
    ) -> None:
        """Run one probe, timed and with the server's memory read around it (its peak held to `max_peak_mb` where
        it can be read); print its line."""
        outcome = Outcome(self.name, name)
        if skip:
            outcome.detail = f"skipped: {skip}"
        else:
            before = self.memory(reset_peak=True)
            started = time.perf_counter()
            try:
                answer = run()
                outcome.status, outcome.detail, outcome.ok = answer.status, answer.detail, True
            except ProbeFailed as exc:
                outcome.ok, outcome.detail = False, str(exc)
            except (httpx.HTTPError, OSError, ValueError, KeyError) as exc:
                outcome.ok, outcome.detail = False, f"{type(exc).__name__}: {exc}"
            outcome.seconds = time.perf_counter() - started
            after = self.memory(reset_peak=False)
            if before and after:
                outcome.rss_mb = (after["VmRSS"] - before["VmRSS"]) / 1024
                outcome.peak_mb = (after["VmHWM"] - before["VmRSS"]) / 1024
                if outcome.ok and max_peak_mb is not None and outcome.peak_mb > max_peak_mb:
                    outcome.ok = False
                    outcome.detail += f"; memory peaked {outcome.peak_mb:.0f} MB up, over the {max_peak_mb:.0f} allowed"
        self.outcomes.append(outcome)
        sys.stderr.write(line(outcome) + "\n")

    def memory(self, reset_peak: bool) -> dict[str, int] | None:
        """VmRSS and VmHWM of the server process in kB; `reset_peak` first sets VmHWM back to VmRSS."""
        if self.pid is None:
            return None
        try:
            if reset_peak:
                with contextlib.suppress(OSError):
                    Path(f"/proc/{self.pid}/clear_refs").write_text("5")
            status = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return None
        found = {key: re.search(rf"{key}:\s+(\d+) kB", status) for key in ("VmRSS", "VmHWM")}
        return {key: int(match[1]) for key, match in found.items() if match}

    def log_says(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""


def expect(condition: bool, seen: str) -> None:
    if not condition:
        raise ProbeFailed(seen)


def code_of(response: httpx.Response) -> str:
    with contextlib.suppress(ValueError, AttributeError):
        return str(response.json().get("code", ""))
    return ""


def short(response: httpx.Response) -> str:
    return f"{response.status_code} {code_of(response)}".strip()


# --- payloads ---------------------------------------------------------------------------------------------------------


def npy(values: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, values)
    return out.getvalue()


def random_pack(seed: int) -> np.ndarray:
    return (0.1 * np.random.default_rng(seed).standard_normal(PACK_SHAPE)).astype(np.float32)


def multipart(fields: list[tuple[str, str | None, bytes]], boundary: str = "probe") -> bytes:
    """A multipart/form-data body of (name, file name or None, content) parts."""
    body = b""
    for name, filename, content in fields:
        disposition = f'form-data; name="{name}"' + ("" if filename is None else f'; filename="{filename}"')
        body += b"--%s\r\nContent-Disposition: %s\r\n\r\n%s\r\n" % (boundary.encode(), disposition.encode(), content)
    return body + b"--%s--\r\n" % boundary.encode()


def understated_npz(real_bytes: int) -> bytes:
    """An .npz whose one member is `real_bytes` of zeros after an .npy header, deflated, while its zip headers claim
    the size of a voice pack: a reader that trusts them allocates little and inflates much."""
    claimed = int(np.prod(PACK_SHAPE)) * 4 + 128
    header = npy(np.zeros(PACK_SHAPE, np.float32))[:128]
    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w", zipfile.ZIP_DEFLATED) as archive, archive.open("pack.npy", "w") as member:
        member.write(header)
        zeros = bytes(MB)
        for _ in range(real_bytes // MB):
            member.write(zeros)
    data = bytearray(packed.getvalue())
    # The uncompressed size sits 22 bytes into a local file header and 24 bytes into a central directory entry.
    for signature, size_at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        where = data.index(signature) + size_at
        data[where : where + 4] = claimed.to_bytes(4, "little")
    return bytes(data)


def json_text_body(size: int) -> Iterator[bytes]:
    """A JSON body of `size` bytes, `{"text": "aaa..."}`, in 1 MB blocks."""
    head, tail = b'{"text": "', b'"}'
    left = size - len(head) - len(tail)
    yield head
    while left > 0:
        yield b"a" * min(MB, left)
        left -= MB
    yield tail


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes
    """Empty when the connection was reset before it came."""
    seconds: float
    """Until the status line."""
    sent: int
    """Body bytes sent by then."""

    @property
    def code(self) -> str | None:
        with contextlib.suppress(ValueError, AttributeError):
            return str(json.loads(self.body).get("code"))
        return None


def send_while_reading(
    target: Target, path: str, headers: dict[str, str], blocks: Iterator[bytes], length: int | None
) -> Reply:
    """POST a body block by block (chunked without a `length`) from a thread while reading the answer; stop sending
    once it comes. Plain sockets: the answer stays readable after the server resets a connection it stopped reading
    (asyncio's streams would drop it)."""
    host, port = target.url.removeprefix("http://").split(":")
    framing = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{framing}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers.items()) + "\r\n"
    answered = threading.Event()
    sent = 0

    def pump() -> None:
        nonlocal sent
        with contextlib.suppress(OSError):
            for block in blocks:
                if answered.is_set():
                    return
                sock.sendall(block if length is not None else b"%x\r\n%s\r\n" % (len(block), block))
                sent += len(block)
            sock.sendall(b"" if length is not None else b"0\r\n\r\n")

    with socket.create_connection((host, int(port)), timeout=120) as sock:
        started = time.perf_counter()
        sock.sendall(head.encode("latin-1"))
        sender = threading.Thread(target=pump, daemon=True)
        sender.start()
        received = b""
        with contextlib.suppress(ConnectionResetError):
            while b"\r\n\r\n" not in received and (piece := sock.recv(65536)):
                received += piece
        seconds, sent_then = time.perf_counter() - started, sent
        answered.set()
        status_line, _, rest = received.partition(b"\r\n")
        expect(status_line.startswith(b"HTTP/1.1 "), f"no answer after {seconds:.1f} s ({sent_then} bytes sent)")
        fields, _, body = rest.partition(b"\r\n\r\n")
        found = dict(line.decode("latin-1").split(":", 1) for line in fields.split(b"\r\n") if b":" in line)
        found = {name.strip().lower(): value.strip() for name, value in found.items()}
        with contextlib.suppress(ConnectionResetError, TimeoutError):
            while len(body) < int(found.get("content-length", 0)) and (piece := sock.recv(65536)):
                body += piece
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)  # wakes the sender if it is blocked in sendall
        sender.join(30)
    return Reply(int(status_line.split()[1]), found, body, seconds, sent_then)


# --- probes on the plain server ------------------------------------------------------------------------------------


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


class SlowReader(threading.Thread):
    """A `/tts/stream` client with a small receive buffer that reads 1 KB a second."""

    def __init__(self, target: Target, text: str) -> None:
        super().__init__(daemon=True)
        self.target, self.text = target, text
        self.status = 0
        self.answered = threading.Event()
        self.halt = threading.Event()

    def run(self) -> None:
        host, port = self.target.url.removeprefix("http://").split(":")
        body = json.dumps({"text": self.text, "language": "en"}).encode()
        try:
            with socket.socket() as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
                sock.connect((host, int(port)))
                auth = "".join(f"{name}: {value}\r\n" for name, value in self.target.auth.items()).encode()
                sock.sendall(
                    b"POST /tts/stream HTTP/1.1\r\nHost: polytts\r\nContent-Type: application/json\r\n"
                    b"%sContent-Length: %d\r\n\r\n%s" % (auth, len(body), body)
                )
                head = sock.recv(1024)
                self.status = int(head.split()[1]) if head.startswith(b"HTTP/") else -1
                self.answered.set()
                while self.status == 200 and not self.halt.wait(1.0) and sock.recv(1024):
                    pass
        except OSError:
            pass
        finally:
            self.answered.set()


def slow_readers(target: Target) -> Answer:
    """Sixteen slow readers of long streams from one address; once every one admitted is detached (it holds no slot
    now), a client from another address must be admitted."""
    readers = [SlowReader(target, LONG_TEXT) for _ in range(16)]
    try:
        for reader in readers:
            reader.start()
        for reader in readers:
            expect(reader.answered.wait(120), "a slow reader got no answer in 120 s")
        admitted = sum(reader.status == 200 for reader in readers)
        started = time.perf_counter()
        with target.client() as client:
            while (detached := client.get("/health").json()["inflight"].get("detached", 0)) < admitted:
                expect(time.perf_counter() - started < 120, f"{detached} of {admitted} readers detached after 120 s")
                time.sleep(0.5)
        waited = time.perf_counter() - started
        transport = httpx.HTTPTransport(local_address=OTHER_CLIENT)
        with target.client(transport=transport) as fresh:
            answer = fresh.post("/tts/stream", json={"text": SENTENCE, "language": "en"})
        expect(answer.status_code == 200 and len(answer.content) > 0, f"the fresh client got {short(answer)}")
        alive = sum(reader.is_alive() for reader in readers)
        return Answer(
            short(answer),
            f"{admitted} readers admitted, {16 - admitted} refused; all admitted detached "
            f"{waited:.1f} s later; {alive} still connected",
        )
    finally:
        for reader in readers:
            reader.halt.set()


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


def no_tracebacks(target: Target) -> Answer:
    said = target.log_says()
    expect("Traceback" not in said, "a traceback in the server's log: " + said[said.find("Traceback") :][:300])
    return Answer("-", f"{len(said.splitlines())} lines logged at warning and above")


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


# --- probes on the keyed server ------------------------------------------------------------------------------------


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


# --- probes on the one-slot server ---------------------------------------------------------------------------------


def random_keys(target: Target, count: int = 2000) -> Answer:
    with target.client() as client:
        sizes = [len(client.get(path).content) for path in ("/metrics", "/health")]
        with client.stream("POST", "/tts/stream", json={"text": LONG_TEXT, "language": "en"}) as held:
            expect(held.status_code == 200, f"the held stream: {held.status_code}")
            pieces = held.iter_raw()  # kept: a dropped iterator would close the stream and free the slot
            next(pieces)
            before = target.memory(reset_peak=True)
            latencies, statuses = [], set()
            for _ in range(count):
                started = time.perf_counter()
                response = client.post("/tts", json={"text": SENTENCE}, headers={"X-Fairness-Key": uuid.uuid4().hex})
                latencies.append(time.perf_counter() - started)
                statuses.add(short(response))
                expect(response.status_code == 429, f"request {len(latencies)} was answered {short(response)}")
            after = target.memory(reset_peak=False)
            grown = [len(client.get(path).content) - size for path, size in zip(("/metrics", "/health"), sizes)]
    expect(max(grown) < 10_000, f"/metrics grew by {grown[0]} bytes, /health by {grown[1]}")
    half = count // 2
    p50 = [sorted(part)[len(part) // 2] * 1000 for part in (latencies[:half], latencies[half:])]
    rss = ""
    if before and after:
        rss = f"; rss over the rejections alone {(after['VmRSS'] - before['VmRSS']) / 1024:+.1f} MB"
    return Answer(
        " ".join(sorted(statuses)),
        f"/metrics {sizes[0]} B {grown[0]:+d}, /health {sizes[1]} B "
        f"{grown[1]:+d}; p50 {p50[0]:.1f} ms first half, {p50[1]:.1f} ms second{rss}",
    )


# --- running ------------------------------------------------------------------------------------------------------


def line(outcome: Outcome) -> str:
    verdict = {True: "ok", False: "FAIL", None: "skip"}[outcome.ok]
    rss = "" if outcome.rss_mb is None else f"rss {outcome.rss_mb:+7.1f} MB  peak {outcome.peak_mb:+7.1f} MB"
    return (
        f"{verdict:<4} {outcome.server:<8} {outcome.probe:<46} {outcome.status:<22} {outcome.seconds:6.2f} s  "
        f"{rss:<34} {outcome.detail}"
    )


def own_servers() -> list[Target]:
    targets = []
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        env = {"POLYTTS_MEMORY_CACHE_BYTES": "0"}
        with local_server(env, caches=True, log_path=logs / "plain.log") as server:
            plain = Target("plain", server.url, server.pid, cache_dir=server.cache_dir, log_path=server.log_path)
            plain_probes(plain, own=True)
            targets.append(plain)
        voices = logs / "voices"
        good, damaged = damaged_voices(voices)
        env = {"POLYTTS_API_KEYS": json.dumps({API_KEY: "prober"}), "POLYTTS_VOICES_DIR": str(voices)}
        started = time.perf_counter()
        with local_server(env, log_path=logs / "keyed.log") as server:
            keyed = Target("keyed", server.url, server.pid, API_KEY, log_path=server.log_path)
            keyed_probes(keyed, (good, damaged, time.perf_counter() - started))
            keyed.probe("no traceback logged", lambda: no_tracebacks(keyed))
            targets.append(keyed)
        env = {"POLYTTS_MAX_INFLIGHT": "1", "POLYTTS_SLOW_READER_LAG_S": "600", "POLYTTS_READER_IDLE_LIMIT_S": "600"}
        with local_server(env, log_path=logs / "one_slot.log") as server:
            one_slot = Target("one_slot", server.url, server.pid, log_path=server.log_path)
            with one_slot.client() as client:  # the engine's first run allocates its arenas: not the probe's memory
                client.post("/tts", json={"text": SENTENCE}).raise_for_status()
            one_slot.probe("2,000 rejected requests with random keys", lambda: random_keys(one_slot))
            one_slot.probe("no traceback logged", lambda: no_tracebacks(one_slot))
            targets.append(one_slot)
    return targets


def given_server(args: argparse.Namespace) -> Target:
    with httpx.Client(
        base_url=args.url, timeout=30, headers={"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    ) as client:
        health = client.get("/health").json()
    pid = args.pid or health.get("pid")
    target = Target(
        "given", args.url, pid if pid and Path(f"/proc/{pid}/status").exists() else None, args.api_key, args.cache_dir
    )
    plain_probes(target, own=False)
    keyed_probes(target, None)
    one_slot = health.get("limits", {}).get("max_inflight") == 1 and not args.api_key
    target.probe(
        "2,000 rejected requests with random keys",
        lambda: random_keys(target),
        None if one_slot else "needs a server without keys and with POLYTTS_MAX_INFLIGHT=1",
    )
    return target


def run(args: argparse.Namespace) -> dict[str, Any]:
    report = new_report("abuse", args)
    targets = [given_server(args)] if args.url else own_servers()
    outcomes = [outcome for target in targets for outcome in target.outcomes]
    report["figures"]["probes"] = [asdict(outcome) for outcome in outcomes]
    report["failed"] = [f"{o.server}: {o.probe}" for o in outcomes if o.ok is False]
    return report


def summary(report: dict[str, Any]) -> str:
    outcomes = [Outcome(**probe) for probe in report["figures"]["probes"]]
    counts = {verdict: sum(o.ok is verdict for o in outcomes) for verdict in (True, False, None)}
    tail = f"{counts[True]} probes held, {counts[False]} failed, {counts[None]} skipped"
    return "\n".join([*map(line, outcomes), tail])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running server; default: start three of its own")
    parser.add_argument("--api-key", help="the running server's API key, if it has keys")
    parser.add_argument("--cache-dir", type=Path, help="the running server's POLYTTS_CACHE_DIR (for the cache probes)")
    parser.add_argument("--pid", type=int, help="the running server's pid (default: from /health)")
    parser.add_argument("--out", type=Path, help="JSON output path")
    args = parser.parse_args()
    return run_main("abuse", lambda: run(args), args.out, summary)


if __name__ == "__main__":
    sys.exit(main())
