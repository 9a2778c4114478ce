"""Probes of admission: slow readers must not hold slots, rejected keys must not grow state."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid

import httpx

from bench.abuse.probing import LONG_TEXT, OTHER_CLIENT, SENTENCE, Answer, Target, expect, short


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
