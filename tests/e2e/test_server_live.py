"""Live text in, speech out, end to end: a real server on the Kokoro ONNX model, spoken to by real clients (httpx with
an async generator body, curl reading from a pipe, the `websockets` library)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import re
import shutil
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import cast

import httpx
import pytest
import websockets

from bench.common import PROBE
from tests.support.live_socket import speak_live
from tests.support.polling import wait_until
from tests.support.servers import ServerProcess

PARAGRAPH = "Live speech starts while the text is still being written. Each phrase is spoken as soon as it is complete."
"""Two sentences, about 6 s of speech: the first is spoken while the second is still being sent."""
WORDS = PARAGRAPH.split()
KEY = "live-secret"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path_factory.mktemp("live"),
        POLYTTS_KOKORO_BACKEND="onnx",
        POLYTTS_LIVE_FLUSH_MS="400",
        POLYTTS_API_KEYS=json.dumps({KEY: "live-client"}),
    ).start()
    yield server
    server.stop()


AUTH = {"Authorization": f"Bearer {KEY}"}


def running(node: ServerProcess) -> int:
    return PROBE.get(node.url + "/health", headers=AUTH).json()["inflight"]["running"]


async def test_httpx_streams_text_word_by_word(node: ServerProcess) -> None:
    """httpx sends a request body whole before it reads the answer (HTTP/1.1 in httpcore is half duplex), so what it
    shows is that the server speaks while the body still arrives: its first phrase is under way before the last word
    is sent. The full duplex exchange is shown with curl below."""
    spoken_before_last_word = False

    async def body() -> AsyncIterator[bytes]:
        nonlocal spoken_before_last_word
        for index, word in enumerate(WORDS):
            if index == len(WORDS) - 1:
                spoken_before_last_word = await asyncio.to_thread(
                    wait_until, lambda: running(node) > 0, 60, "the first phrase to be spoken before the last word"
                )
            yield (json.dumps({"text": word + " "}) + "\n").encode()
            await asyncio.sleep(0.03)

    async with httpx.AsyncClient(base_url=node.url, timeout=180, headers=AUTH) as client:
        async with client.stream("POST", "/tts/live", params={"voice": "af_heart"}, content=body()) as response:
            assert response.status_code == 200 and response.headers["x-sample-rate"] == "24000"
            pcm = b"".join([chunk async for chunk in response.aiter_raw()])
    assert spoken_before_last_word
    assert 4.0 < len(pcm) / 2 / 24_000 < 15.0  # the whole paragraph, spoken


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs the curl program (apt-get install -y curl)")
def test_curl_from_a_pipe_gets_audio_before_the_last_word(node: ServerProcess) -> None:
    curl = subprocess.Popen(
        [
            "curl",
            "-sS",
            "--no-buffer",
            "-T",
            ".",
            "-H",
            f"Authorization: Bearer {KEY}",
            f"{node.url}/tts/live?voice=af_heart&format=pcm",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    arrivals: list[float] = []
    received = bytearray()

    def read() -> None:
        stdout = cast(io.BufferedReader, curl.stdout)  # Popen's pipes are buffered readers
        while chunk := stdout.read1(65_536):
            arrivals.append(time.monotonic())
            received.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    assert curl.stdin is not None
    for word in WORDS:
        if arrivals:  # audio is here: the rest of the text goes faster
            time.sleep(0.02)
        else:
            poll_until = time.monotonic() + 0.4
            while not arrivals and time.monotonic() < poll_until:
                time.sleep(0.02)
        curl.stdin.write((json.dumps({"text": word + " "}) + "\n").encode())
        curl.stdin.flush()
        last_word_sent = time.monotonic()
    curl.stdin.close()
    assert curl.wait(180) == 0
    reader.join()
    assert arrivals and arrivals[0] < last_word_sent, "no audio arrived before the last word was sent"
    assert len(received) / 2 / 24_000 > 4.0


async def test_websocket_audio_words_and_done(node: ServerProcess) -> None:
    key = base64.urlsafe_b64encode(KEY.encode()).decode().rstrip("=")
    url = node.url.replace("http", "ws") + "/tts/live/ws?voice=af_heart"
    live = await speak_live(url, [word + " " for word in WORDS], ["polytts", f"bearer.{key}"], gap_s=0.02)
    assert live.subprotocol == "polytts"
    assert live.kinds[0] == "start" and live.kinds[-1] == "done" and "words" in live.kinds
    seconds = len(live.audio) / 2 / 24_000
    words = [w for event in live.events if event["type"] == "words" for w in event["words"]]
    assert [w["word"] for w in words] == WORDS  # every word, in order, as written
    starts = [w["start"] for w in words]
    assert starts == sorted(starts) and all(0 <= w["start"] <= w["end"] <= seconds + 1e-3 for w in words)


async def test_websocket_refuses_a_wrong_key_and_reports_errors(node: ServerProcess) -> None:
    url = node.url.replace("http", "ws") + "/tts/live/ws"
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with websockets.connect(url, subprotocols=["polytts", "bearer.d3Jvbmc"]):  # type: ignore[list-item]
            pass
    assert refused.value.response.status_code == 401
    assert json.loads(refused.value.response.body)["code"] == "unauthorized"
    key = base64.urlsafe_b64encode(KEY.encode()).decode().rstrip("=")
    async with websockets.connect(url + "?voice=no_such_voice", subprotocols=["polytts", f"bearer.{key}"]) as ws:  # type: ignore[list-item]
        await ws.send(json.dumps({"text": "Hello."}))
        event = json.loads(await ws.recv())
    assert event == {"type": "error", "code": "voice_not_found", "message": event["message"]}
    async with websockets.connect(url + "?voice=af_heart", subprotocols=["polytts", f"bearer.{key}"]) as ws:  # type: ignore[list-item]
        await ws.send(json.dumps({"text": "Fine so far. "}))
        await ws.send("not json at all")
        events = [json.loads(m) async for m in ws if isinstance(m, str)]
    assert events[-1]["type"] == "error" and events[-1]["code"] == "invalid_message"


async def test_a_pause_in_the_producer_speaks_the_pending_phrase(node: ServerProcess) -> None:
    """No full stop, no comma: the text only becomes speech because the producer paused (POLYTTS_LIVE_FLUSH_MS)."""
    key = base64.urlsafe_b64encode(KEY.encode()).decode().rstrip("=")
    url = node.url.replace("http", "ws") + "/tts/live/ws?voice=af_heart"
    async with websockets.connect(url, subprotocols=["polytts", f"bearer.{key}"]) as ws:  # type: ignore[list-item]
        await ws.send(json.dumps({"text": "an unfinished thought that trails off"}))
        assert json.loads(await ws.recv())["type"] == "start"
        first_audio = await asyncio.wait_for(ws.recv(), 60)  # arrives with no flush and no end sent
        assert isinstance(first_audio, bytes) and first_audio
        await ws.send(json.dumps({"end": True}))
        assert [json.loads(m)["type"] async for m in ws if isinstance(m, str)][-1] == "done"


def test_a_disconnect_mid_way_frees_the_gpu_thread(node: ServerProcess) -> None:
    long_text = " ".join(f"Sentence {i} keeps the engine busy for a good while." for i in range(30))
    lines = (json.dumps({"text": long_text}) + "\n").encode()
    with httpx.Client(base_url=node.url, timeout=120, headers=AUTH) as client:
        with client.stream("POST", "/tts/live", content=lines) as response:
            audio = response.iter_raw()  # held: a dropped iterator closes the connection at once
            next(audio)
            assert running(node) == 1
    wait_until(lambda: running(node) == 0, 60, "the abandoned live request to leave the GPU thread")
    assert "tts/live outcome=cancelled" in node.log()
    # Its step under way was stopped mid-inference, not run to its end (ONNX Runtime's RunOptions.terminate).
    assert re.search(r"job \d+ \(key live-client\) stopped \d+\.\d{3}s into its step: client disconnected", node.log())
    with httpx.Client(base_url=node.url, timeout=120, headers=AUTH) as client:
        assert client.post("/tts", json={"text": "The engine is free again."}).content  # served, as ever


def test_two_live_clients_and_a_stream_share_the_gpu_thread(node: ServerProcess) -> None:
    text = " ".join(f"Phrase {i} of a shared paragraph." for i in range(3))  # a few steps each
    first_audio: dict[str, float] = {}
    finished: dict[str, float] = {}

    def listen(name: str, route: str, body: bytes) -> None:
        with httpx.Client(base_url=node.url, timeout=180, headers=AUTH) as client:
            with client.stream("POST", route, content=body, headers={"content-type": "application/json"}) as response:
                assert response.status_code == 200
                for _ in response.iter_raw():
                    first_audio.setdefault(name, time.monotonic())
        finished[name] = time.monotonic()

    live_body = (json.dumps({"text": text, "voice": "af_heart"}) + "\n").encode()
    stream_body = json.dumps({"text": text, "voice": "af_heart"}).encode()
    threads = [
        threading.Thread(target=listen, args=("a", "/tts/live", live_body)),
        threading.Thread(target=listen, args=("b", "/tts/live", live_body)),
        threading.Thread(target=listen, args=("c", "/tts/stream", stream_body)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert set(first_audio) == set(finished) == {"a", "b", "c"}
    # Steps interleave: every request has its first audio before any of them has all of its audio.
    assert max(first_audio.values()) < min(finished.values())
    log = node.log()
    assert log.count("tts/live outcome=ok") >= 2 and "tts/stream outcome=ok" in log
