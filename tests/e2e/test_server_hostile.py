"""End to end against the real server process: hostile clients that only a process shows the harm of (its memory,
raw sockets held open) get clear answers, the server stays up, and no client error logs a traceback. (The rest of
the damaged disks and hostile clients is in tests/http/test_hostile.py.)"""

from __future__ import annotations

import io
import json
import re
import socket
import zipfile
from pathlib import Path

import httpx

from tests.support.clips import wav_clip
from tests.support.polling import wait_until
from tests.support.servers import ServerProcess, no_tracebacks
from tests.support.voices import npy, pack_values


def peak_rss_kb(server: ServerProcess) -> int:
    assert server.proc is not None
    status = Path(f"/proc/{server.proc.pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status)[1])  # type: ignore[index]


# --- hostile uploads -------------------------------------------------------------------------------------------


def test_a_pack_bomb_is_refused_without_a_memory_spike(server: ServerProcess, client: httpx.Client) -> None:
    """An .npz whose zip header understates its member: 200 MB of zeros claimed to be a pack's size."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive, archive.open("v.npy", "w") as f:
        f.write(npy(pack_values(4))[:128])
        for _ in range(200):
            f.write(b"\0" * (1 << 20))
    bomb = bytearray(out.getvalue())
    for signature, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        at = bomb.index(signature) + offset
        bomb[at : at + 4] = (510 * 256 * 4 + 128).to_bytes(4, "little")
    before = peak_rss_kb(server)
    reply = client.post("/voices", files={"voice_pack": ("v.npz", bytes(bomb))}, data={"engine": "kokoro"})
    assert reply.status_code == 422 and reply.json()["code"] == "pack_unreadable"
    assert peak_rss_kb(server) - before < 100 * 1024  # the landed version rose by more than 2 GB
    no_tracebacks(server)


# --- bodies: auth first, bounded as they arrive, uploads within a budget ----------------------------------------


def send_head(port: int, path: str, headers: dict[str, str], first: bytes = b"") -> socket.socket:
    """A request whose head (and the start of its body) is sent, the rest of the body not yet."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items()), "", ""]
    sock.sendall("\r\n".join(lines).encode() + first)
    return sock


def status_of(sock: socket.socket) -> tuple[int, str]:
    reply = b""
    while b"\r\n\r\n" not in reply:
        chunk = sock.recv(65_536)
        if not chunk:
            break
        reply += chunk
    head = reply.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    return int(head.split()[1]), head


def test_a_huge_body_is_refused_before_it_is_read(tmp_path: Path, assembled_model: Path) -> None:
    keyed = ServerProcess(tmp_path, POLYTTS_API_KEYS=json.dumps({"s3cret": "k"})).start()
    try:
        before = peak_rss_kb(keyed)
        declared = {"Content-Type": "application/json", "Content-Length": str(200 * 1024 * 1024)}
        megabyte = b'{"text": "' + b"x" * (1024 * 1024)
        # No key: 401 after one megabyte of a 200 MB body, nothing parsed.
        with send_head(keyed.port, "/tts", declared, megabyte) as sock:
            assert status_of(sock)[0] == 401
        # A key, but the body declares more than the bound: 413 at once.
        with send_head(keyed.port, "/tts", {**declared, "Authorization": "Bearer s3cret"}, megabyte) as sock:
            status, head = status_of(sock)
            assert status == 413
        # A chunked body that grows past the bound is refused as it arrives.
        chunked = {"Content-Type": "application/json", "Transfer-Encoding": "chunked", "Authorization": "Bearer s3cret"}
        with send_head(keyed.port, "/tts", chunked) as sock:
            piece = b"x" * 65_536
            try:
                for _ in range(40):  # 2.5 MB, past the 1 MiB bound
                    sock.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            except OSError:  # the server answered and closed while we were still sending: that is the point
                pass
            assert status_of(sock)[0] == 413
        assert peak_rss_kb(keyed) - before < 64 * 1024  # never held the body
        no_tracebacks(keyed)
    finally:
        keyed.stop()


def test_uploads_beyond_the_budget_are_told_to_retry(tmp_path: Path, assembled_model: Path) -> None:
    node = ServerProcess(tmp_path, POLYTTS_UPLOAD_BUDGET_BYTES=str(1024 * 1024), POLYTTS_WARM_ON_START="false").start()
    try:
        clip = wav_clip(40.0, 300)  # about 1.3 MB of 16 kHz PCM
        boundary = "b0undary"
        body = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="engine"\r\n\r\nvoxcpm\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="ref_text"\r\n\r\nheld open\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="audio"; filename="a.wav"\r\n\r\n'
        ).encode()
        body += clip + f"\r\n--{boundary}--\r\n".encode()
        headers = {"Content-Type": f"multipart/form-data; boundary={boundary}", "Content-Length": str(len(body))}
        with send_head(node.port, "/voices", headers, body[: len(body) - 1000]) as held:  # almost all, held open
            with node.client() as client:

                def refused() -> httpx.Response | None:
                    other = client.post(
                        "/voices", files={"audio": ("b.wav", clip)}, data={"engine": "voxcpm", "ref_text": "the other"}
                    )
                    return other if other.status_code == 503 else None

                other = wait_until(refused, 30, "the held upload to reserve its bytes")
                assert other.status_code == 503 and other.json()["code"] == "uploads_busy"
                assert "retry-after" in other.headers
            held.sendall(body[len(body) - 1000 :])
            assert status_of(held)[0] == 201  # the held upload completes: the budget it held comes back
        with node.client() as client:
            other_clip = wav_clip(40.0, 500)  # the held clip is registered now; the same bytes again would be a 409
            again = client.post(
                "/voices", files={"audio": ("c.wav", other_clip)}, data={"engine": "voxcpm", "ref_text": "x"}
            )
            assert again.status_code == 201, again.text
        no_tracebacks(node)
    finally:
        node.stop()
