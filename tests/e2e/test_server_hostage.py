"""No client holds a node hostage, end to end on a keyless node (every client shares the anonymous key): live
sessions that send nothing speakable hold no admission place and end at the idle limit however many keep-alives
they send, a reader that never reads is disconnected, and a live request failing after its audio started is cut
where the client sees it. Clients are plain sockets where they must stop reading for real."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import websockets
import websockets.sync.client

from bench.abuse.abandoned import unread_cartesia_contexts
from bench.abuse.payloads import (
    http_head,
    live_body_broken_after_audio,
    raw_connection,
    read_until,
    reset_or_closed,
    stalled_readers,
)
from bench.abuse.probing import Target, requests_total
from bench.common import PROBE
from tests.support.polling import wait_until
from tests.support.servers import ServerProcess

LONG = " ".join(f"Sentence {i} of a long answer keeps the engine busy for a good while." for i in range(30))
IDLE_S = 6
CARTESIA_FIRST = {
    "model_id": "sonic-2",
    "transcript": "",
    "continue": False,
    "voice": {"mode": "id", "id": "af_heart"},
    "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000},
}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path_factory.mktemp("hostage"),
        POLYTTS_KOKORO_BACKEND="onnx",
        POLYTTS_LIVE_IDLE_TIMEOUT_S=str(IDLE_S),
        POLYTTS_MAX_IDLE_LIVE_PER_CLIENT="8",
        POLYTTS_READER_IDLE_LIMIT_S="3",
        POLYTTS_SEND_BUFFER_BYTES="16384",
        POLYTTS_MAX_BUFFERED_PIECES="1",
        # Two long streams at once are what the readers' test needs; on a busy machine the engine runs slower than
        # real time, and stream admission then rightly refuses the second (tests/unit/test_fairness.py checks
        # admission).
        POLYTTS_STREAM_ADMISSION="false",
        POLYTTS_PCM_CACHE_BYTES="0",
        POLYTTS_MEMORY_CACHE_BYTES="0",
    ).start()
    yield server
    server.stop()


def inflight(node: ServerProcess) -> dict:
    return PROBE.get(node.url + "/health", timeout=30).json()["inflight"]


async def test_idle_live_sessions_hold_no_place_and_end_at_the_idle_limit_despite_keep_alives(
    node: ServerProcess,
) -> None:
    url = node.url.replace("http", "ws") + "/tts/live/ws?voice=af_heart"
    sessions = [await websockets.connect(url) for _ in range(8)]
    try:
        for ws in sessions:
            await ws.send(json.dumps({"text": ""}))
            assert json.loads(await ws.recv())["type"] == "start"
        assert inflight(node)["awaiting_text"] == 8
        # Eight sessions from this address wait for text: whole-file and streamed requests of the same anonymous
        # key and address are admitted all the same, and a ninth live session is refused by its own bound.
        async with httpx.AsyncClient(base_url=node.url, timeout=120) as client:
            spoken = await client.post("/tts", json={"text": "Still served.", "language": "en"})
            openai = await client.post("/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": "Hi."})
        assert spoken.status_code == 200 and openai.status_code == 200
        async with websockets.connect(url) as ninth:
            await ninth.send(json.dumps({"text": ""}))
            refused = json.loads(await ninth.recv())
        assert refused["type"] == "error" and refused["code"] == "live_sessions_full"

        async def keep_alive(ws: websockets.ClientConnection) -> dict:
            """Send an empty text every half second until the server ends the session; its last event."""
            while True:
                try:
                    event = await asyncio.wait_for(ws.recv(), 0.5)
                    return json.loads(event)
                except TimeoutError:
                    await ws.send(json.dumps({"text": ""}))

        ends = await asyncio.wait_for(asyncio.gather(*(keep_alive(ws) for ws in sessions)), 4 * IDLE_S)
        assert {(end["type"], end["code"]) for end in ends} == {("error", "live_idle_timeout")}
    finally:
        for ws in sessions:
            await ws.close()
    wait_until(lambda: inflight(node)["awaiting_text"] == 0, 30, "the idle sessions to be gone")
    assert "tts/live/ws outcome=live_idle_timeout" in node.log()


def test_readers_that_never_read_are_disconnected(node: ServerProcess) -> None:
    before = {route: requests_total(node.url, route, "reader_stalled") for route in ("tts/stream", "tts/live/ws")}
    stream, live = stalled_readers(node.url, LONG)
    try:
        # Neither reads another byte: each is dropped, its outcome logged and counted then, its connection reset.
        wait_until(
            lambda: all(requests_total(node.url, route, "reader_stalled") > before[route] for route in before),
            240,
            "both stalled readers to be dropped",
            detail=lambda: inflight(node),
        )
        assert reset_or_closed(stream) in ("reset", "closed") and reset_or_closed(live) in ("reset", "closed")
        assert inflight(node)["running"] == 0
        log = node.log()
        assert "tts/stream outcome=reader_stalled" in log and "tts/live/ws outcome=reader_stalled" in log
    finally:
        stream.close()
        live.close()


def test_a_cartesia_client_that_sends_ending_contexts_and_never_reads_is_dropped_with_memory_flat(
    node: ServerProcess,
) -> None:
    """First messages with an empty transcript and `continue: false`, as fast as the node takes them, none of their
    `done` read: the node takes one answer's worth at a time, so it stops taking them once the connection is full,
    and drops the socket at the reader idle limit; its memory stays flat (the probe holds it)."""
    assert node.proc is not None
    answer = unread_cartesia_contexts(Target("node", node.url, node.proc.pid), reader_idle_s=3)
    assert answer.status == "dropped", answer.detail
    assert "cartesia/tts/websocket: the client read nothing for 3 s: socket dropped" in node.log()
    with websockets.sync.client.connect(node.url.replace("http", "ws") + "/cartesia/tts/websocket") as ws:
        ws.send(json.dumps({**CARTESIA_FIRST, "context_id": "after"}))
        assert json.loads(ws.recv(timeout=30)) == {
            "type": "done",
            "context_id": "after",
            "done": True,
            "status_code": 200,
        }


def test_a_live_request_that_fails_after_its_audio_started_is_cut_and_counted_under_its_own_code(
    node: ServerProcess,
) -> None:
    before = requests_total(node.url, "tts/live", "invalid_message")
    rest = live_body_broken_after_audio(node.url)
    assert not rest.endswith(b"0\r\n\r\n"), "the body ended cleanly: the client cannot tell it failed"
    wait_until(
        lambda: requests_total(node.url, "tts/live", "invalid_message") == before + 1, 30, "the failure to be counted"
    )
    assert "outcome=request_timeout" not in node.log()
    # The cut is on purpose, and the failure logged where it happened: uvicorn's ERROR (that the response is
    # incomplete, logged before it closes the connection the client read to its end) is not.
    assert "ASGI callable returned without completing response" not in node.log()


def test_a_live_request_refused_at_its_first_message_is_logged_and_counted(node: ServerProcess) -> None:
    cases = [(b"not json\n", 422, "invalid_message"), (b'{"text": "hi", "colour": "red"}\n', 422, "invalid_input")]
    for line, status, code in cases:
        before = requests_total(node.url, "tts/live", code)
        answer = PROBE.post(node.url + "/tts/live", content=line, timeout=60)
        assert (answer.status_code, answer.json()["code"]) == (status, code)
        assert requests_total(node.url, "tts/live", code) == before + 1
    assert "tts/live outcome=invalid_message" in node.log()


def test_a_silent_live_body_gets_408_at_the_idle_limit(node: ServerProcess) -> None:
    before = requests_total(node.url, "tts/live", "live_idle_timeout")
    sock = raw_connection(node.url)
    try:
        sock.sendall(http_head("POST", "/tts/live", {"Content-Type": "application/x-ndjson"}))
        sock.settimeout(4 * IDLE_S)
        assert read_until(sock, b"\r\n\r\n").startswith(b"HTTP/1.1 408")
    except TimeoutError:
        pytest.fail(f"no answer {4 * IDLE_S} s into a silent live body")
    finally:
        sock.close()
    assert requests_total(node.url, "tts/live", "live_idle_timeout") == before + 1
