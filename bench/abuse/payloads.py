"""Hostile payloads and a raw HTTP client that keeps sending while it reads the answer."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import socket
import threading
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from bench.abuse.probing import MB, Target, expect
from engines.kokoro.voicepacks import PACK_SHAPE


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


def raw_connection(url: str, receive_buffer: int = 4096) -> socket.socket:
    """A plain socket to the server with a small receive buffer: a client that can stop reading for real (an HTTP
    library would go on filling its own buffers)."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.settimeout(60)
    sock.connect((host, int(port)))
    return sock


def http_head(method: str, path: str, headers: dict[str, str], length: int | None = None) -> bytes:
    """A request's head: with a Content-Length when `length` is given, else a chunked body follows."""
    framing = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    lines = [f"{method} {path} HTTP/1.1", "Host: polytts", framing, *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked request body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def websocket_handshake(path: str, headers: dict[str, str] | None = None) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    fields = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Key": key, "Sec-WebSocket-Version": "13"}
    lines = [f"GET {path} HTTP/1.1", "Host: polytts", *(f"{k}: {v}" for k, v in {**fields, **(headers or {})}.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def websocket_frame(payload: bytes, text: bool = True) -> bytes:
    """One masked client frame (text or binary), as RFC 6455 has a client send it."""
    mask = os.urandom(4)
    size = len(payload)
    head = bytes([0x81 if text else 0x82])
    if size < 126:
        head += bytes([0x80 | size])
    elif size < 1 << 16:
        head += bytes([0x80 | 126]) + size.to_bytes(2, "big")
    else:
        head += bytes([0x80 | 127]) + size.to_bytes(8, "big")
    return head + mask + bytes(byte ^ mask[index % 4] for index, byte in enumerate(payload))


def read_until(sock: socket.socket, marker: bytes, limit: int = 1 << 20) -> bytes:
    """Bytes from the socket up to and including `marker` (or what came before the connection ended)."""
    received = b""
    while marker not in received and len(received) < limit and (piece := sock.recv(4096)):
        received += piece
    return received


def reset_or_closed(sock: socket.socket, timeout: float = 30.0) -> str:
    """Read what the server still sends until the connection ends: `reset`, `closed`, or `open` if it goes on
    sending after `timeout`."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not sock.recv(65536):
                return "closed"
    except ConnectionResetError:
        return "reset"
    except TimeoutError:
        pass
    return "open"


def stalled_readers(url: str, text: str) -> tuple[socket.socket, socket.socket]:
    """A /tts/stream of `text` and a live WebSocket speaking it, whose clients then never read a byte: their
    sockets, to be checked and closed by the caller."""
    stream = raw_connection(url)
    body = json.dumps({"text": text, "language": "en"}).encode()
    stream.sendall(http_head("POST", "/tts/stream", {"Content-Type": "application/json"}, len(body)) + body)
    live = raw_connection(url)
    live.sendall(websocket_handshake("/tts/live/ws?voice=af_heart"))
    expect(b" 101 " in read_until(live, b"\r\n\r\n"), "the WebSocket handshake failed")
    for start in range(0, len(text), 300):
        live.sendall(websocket_frame(json.dumps({"text": text[start : start + 300]}).encode()))
    live.sendall(websocket_frame(b'{"end": true}'))
    return stream, live


def live_body_broken_after_audio(url: str) -> bytes:
    """A /tts/live body whose second message is not UTF-8, sent once audio has started: what the answer held after
    that message, up to the end of the connection (a body cut short has no closing chunk)."""
    sock = raw_connection(url, receive_buffer=1 << 20)
    try:
        sock.sendall(http_head("POST", "/tts/live?voice=af_heart", {"Content-Type": "application/x-ndjson"}))
        sock.sendall(chunk(json.dumps({"text": "The first sentence is spoken at once. "}).encode() + b"\n"))
        head = read_until(sock, b"\r\n\r\n")
        expect(head.startswith(b"HTTP/1.1 200"), f"answered {head[:40]!r}")
        sock.settimeout(120)
        expect(bool(sock.recv(4096)), "no audio")
        sock.sendall(chunk(b'{"text": "\xff\xfe not UTF-8"}\n'))
        rest = b""
        with contextlib.suppress(ConnectionResetError):
            while piece := sock.recv(65536):
                rest += piece
        return rest
    finally:
        sock.close()
