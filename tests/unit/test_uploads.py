"""The multipart reader and the upload budget over real HTTP: a small app served by uvicorn in this process, so the
test can hold uploads open and look at the budget (the service's own route is tested in test_server_hostile.py)."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request

from bench.common import PROBE
from tests.support.polling import wait_until
from tests.support.servers import free_port
from voicebank.uploads import MAX_FILENAME_CHARS, UploadBudget, read_form
from web.fronts import FRONTS
from web.http_errors import install_error_handlers

FILE_LIMIT = 1024 * 1024
BOUNDARY = "xyzzy"


class FormApp:
    """`POST /form` reads the body with `read_form` under `budget`, then waits for `gate` while it holds the parts
    (as a registration does) and answers what it read."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget = UploadBudget(budget_bytes)
        self.gate = threading.Event()
        self.gate.set()
        self.peak = 0
        app = FastAPI()
        install_error_handlers(app, retry_after=1.0, fronts=FRONTS)

        @app.post("/form")
        async def form(request: Request) -> dict[str, object]:
            with self.budget.reservation() as held:
                parts = await read_form(request, file_limit=FILE_LIMIT, reservation=held)
                self.peak = max(self.peak, self.budget.held)
                await asyncio.to_thread(self.gate.wait)
            return {name: [part.filename, len(part.data)] for name, part in parts.items()}

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> FormApp:
        self.thread.start()
        wait_until(lambda: self.server.started, 30, "the test app to start", interval=0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.gate.set()
        self.server.should_exit = True
        self.thread.join(30)

    def wait_held(self, size: int) -> None:
        wait_until(
            lambda: self.budget.held >= size,
            30,
            f"{size} bytes held",
            interval=0.01,
            detail=lambda: f"held {self.budget.held} bytes",
        )


@pytest.fixture
def app() -> Iterator[FormApp]:
    with FormApp(budget_bytes=3 * FILE_LIMIT) as running:
        yield running


def multipart(*parts: tuple[str, str | None, bytes], boundary: str = BOUNDARY) -> bytes:
    out = b""
    for name, filename, data in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename is not None else "")
        out += f"--{boundary}\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + data + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


def post(app: FormApp, body: bytes, boundary: str = BOUNDARY) -> httpx.Response:
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    return PROBE.post(app.url + "/form", content=body, headers=headers, timeout=60)


@pytest.fixture
def no_tracebacks(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    with caplog.at_level(logging.INFO):
        yield
    assert not [r for r in caplog.records if r.exc_info], "a client error logged a traceback"


def test_a_well_formed_form_is_read(app: FormApp, no_tracebacks: None) -> None:
    reply = post(app, multipart(("engine", None, b"voxcpm"), ("audio", "a.wav", b"RIFF" * 100)))
    assert reply.status_code == 200, reply.text
    assert reply.json() == {"engine": [None, 6], "audio": ["a.wav", 400]}
    assert app.budget.held == 0


GOOD = multipart(("engine", None, b"voxcpm"))
MALFORMED = {
    "another boundary": (GOOD, "other"),
    "garbage": (b"\x00\xff garbage that is no multipart at all \r\n" * 10, BOUNDARY),
    "no closing boundary": (GOOD[: -len(f"--{BOUNDARY}--\r\n")], BOUNDARY),
    "cut inside a part": (GOOD[:30], BOUNDARY),
    "empty": (b"", BOUNDARY),
    "a part without a name": (
        f"--{BOUNDARY}\r\nContent-Type: text/plain\r\n\r\nx\r\n--{BOUNDARY}--\r\n".encode(),
        BOUNDARY,
    ),
    "a bad header line": (f"--{BOUNDARY}\r\nno colon here\r\n\r\nx\r\n--{BOUNDARY}--\r\n".encode(), BOUNDARY),
}


@pytest.mark.parametrize(("body", "boundary"), list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_multipart_is_a_400(app: FormApp, no_tracebacks: None, body: bytes, boundary: str) -> None:
    reply = post(app, body, boundary)
    assert reply.status_code == 400, reply.text
    assert reply.json()["code"] == "malformed_multipart"
    assert app.budget.held == 0


def test_a_file_name_of_ten_thousand_characters_is_refused(app: FormApp, no_tracebacks: None) -> None:
    reply = post(app, multipart(("audio", "a" * 10_000 + ".wav", b"RIFF")))
    assert reply.status_code == 400 and reply.json()["code"] == "filename_too_long"
    assert "10004 characters" in reply.json()["message"] and len(reply.text) < 500
    longest = "a" * (MAX_FILENAME_CHARS - 4) + ".wav"
    assert post(app, multipart(("audio", longest, b"RIFF"))).json() == {"audio": [longest, 4]}


def test_part_headers_are_bounded(app: FormApp, no_tracebacks: None) -> None:
    body = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="audio"; filename="a.wav"\r\n'
        f"Content-Type: {'x' * 20_000}\r\n\r\nRIFF\r\n--{BOUNDARY}--\r\n"
    ).encode()
    reply = post(app, body)
    assert reply.status_code == 400 and reply.json()["code"] == "malformed_multipart"
    assert "header size" in reply.json()["message"]


def test_a_field_given_twice_is_refused(app: FormApp, no_tracebacks: None) -> None:
    reply = post(app, multipart(("engine", None, b"voxcpm"), ("engine", None, b"qwen")))
    assert reply.status_code == 422 and reply.json()["code"] == "duplicate_field"
    assert "'engine'" in reply.json()["message"]
    reply = post(app, multipart(("audio", "a.wav", b"1"), ("audio", "b.wav", b"2")))
    assert reply.status_code == 422 and reply.json()["code"] == "duplicate_field"


def test_too_many_parts(app: FormApp, no_tracebacks: None) -> None:
    reply = post(app, multipart(*[(f"f{i}", None, b"x") for i in range(17)]))
    assert reply.status_code == 413 and reply.json()["code"] == "too_many_parts"


def upload(size: int) -> bytes:
    return multipart(("audio", "a.wav", b"\0" * size))


def test_uploads_past_the_budget_wait_their_turn(app: FormApp, no_tracebacks: None) -> None:
    """Three uploads of most of a file limit fit the 3-limit budget; a fourth while they are held is a 503 with
    Retry-After, and the budget is whole again once they end."""
    body = upload(FILE_LIMIT - 1000)
    app.gate.clear()
    with ThreadPoolExecutor(3) as pool:
        held = [pool.submit(post, app, body) for _ in range(3)]
        app.wait_held(3 * len(body))
        refused = post(app, body)
        assert refused.status_code == 503 and refused.json()["code"] == "uploads_busy"
        assert refused.headers["Retry-After"] == "1"
        assert app.budget.held == 3 * len(body)
        app.gate.set()
        assert [f.result().status_code for f in held] == [200, 200, 200]
    assert app.budget.held == 0 and app.peak <= app.budget.total_bytes
    assert post(app, body).status_code == 200


def test_one_upload_alone_may_pass_the_budget(no_tracebacks: None) -> None:
    with FormApp(budget_bytes=1000) as small:
        assert post(small, upload(FILE_LIMIT - 1000)).status_code == 200
        assert small.budget.held == 0


def test_chunked_uploads_are_counted_as_they_arrive(app: FormApp, no_tracebacks: None) -> None:
    """Without a Content-Length nothing is reserved up front: the bytes are counted while they stream in."""
    app.gate.clear()
    body = upload(FILE_LIMIT - 1000)

    def chunked() -> httpx.Response:
        pieces = iter([body[i : i + 65536] for i in range(0, len(body), 65536)])
        headers = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
        return PROBE.post(app.url + "/form", content=pieces, headers=headers, timeout=60)

    with ThreadPoolExecutor(3) as pool:
        held = [pool.submit(chunked) for _ in range(3)]
        app.wait_held(3 * len(body))
        refused = chunked()
        assert refused.status_code == 503 and refused.json()["code"] == "uploads_busy"
        app.gate.set()
        assert [f.result().status_code for f in held] == [200, 200, 200]
    assert app.budget.held == 0


def test_the_budget_comes_back_however_an_upload_ends(app: FormApp, no_tracebacks: None) -> None:
    assert post(app, upload(FILE_LIMIT + 10)).status_code == 413  # refused mid-stream
    assert post(app, GOOD, "other").status_code == 400
    # The client goes away half-way through its body.
    with socket.create_connection(("127.0.0.1", app.port), timeout=30) as sock:
        sock.sendall(
            f"POST /form HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary={BOUNDARY}\r\n"
            f"Content-Length: {FILE_LIMIT}\r\n\r\n".encode()
            + upload(FILE_LIMIT // 2)[: FILE_LIMIT // 2]
        )
        app.wait_held(FILE_LIMIT)
    wait_until(
        lambda: not app.budget.held,
        30,
        "the budget to come back after the client left",
        interval=0.01,
        detail=lambda: f"{app.budget.held} bytes still held",
    )
