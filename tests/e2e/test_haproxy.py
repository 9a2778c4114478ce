"""Two real nodes behind a real HAProxy started from deploy/haproxy.cfg: least-connections balancing, a voice that
follows the request to whichever node serves it, live routes passed through, and a node drained under load without a
request lost that Retry-After does not explain.

The shipped file is used as a user would: only its addresses are changed (the listening port, the two `server`
lines, the runtime API's socket and the stats page).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import cast

import httpx
import pytest
import websockets

from bench.common import PROBE
from tests.e2e.test_fleet import _pack_form
from tests.support.polling import wait_until
from tests.support.servers import ROOT, ServerProcess, free_port

HAPROXY = shutil.which("haproxy")
pytestmark = pytest.mark.skipif(
    HAPROXY is None, reason="needs the haproxy program: `apt-get install -y haproxy` (Debian/Ubuntu; CI installs it)"
)

SHIPPED = ROOT / "deploy" / "haproxy.cfg"
BACKEND = "polytts"
NODE_NAMES = ("node1", "node2")
NODE_ENV = {
    "POLYTTS_KOKORO_BACKEND": "onnx",
    "POLYTTS_DRAIN_SECONDS": "600",  # the test is about finishing the stream under way, not about the bound
}
LONG = " ".join(f"Sentence number {i} of a stream that still plays while its node drains." for i in range(4))

log = logging.getLogger("test_haproxy")


def configured(shipped: str, listen: int, stats: int, admin_socket: Path, nodes: list[str]) -> str:
    """The shipped configuration with this test's addresses; each substitution must match exactly once, so the file
    keeps the shape its header documents."""
    for pattern, value in (
        (r"^(\s*bind ):8080$", f"127.0.0.1:{listen}"),
        (r"^(\s*bind )127\.0\.0\.1:8404$", f"127.0.0.1:{stats}"),
        (r"^(\s*stats socket )/run/haproxy/admin\.sock", str(admin_socket)),
    ):
        shipped, count = re.subn(pattern, lambda m: m.group(1) + value, shipped, flags=re.M)
        assert count == 1, f"deploy/haproxy.cfg: expected one line matching {pattern!r}"
    servers = re.findall(r"^\s*server (\S+) \S+$", shipped, flags=re.M)
    assert tuple(servers) == NODE_NAMES, f"deploy/haproxy.cfg: expected server lines {NODE_NAMES}, found {servers}"
    for name, address in zip(servers, nodes):
        shipped = re.sub(rf"^(\s*server {name} )\S+$", lambda m: m.group(1) + address, shipped, flags=re.M)
    return shipped


class Balancer:
    """HAProxy in the foreground on a configuration file, read and steered through its runtime API."""

    def __init__(self, config: Path, listen: int, admin_socket: Path) -> None:
        self.config = config
        self.url = f"http://127.0.0.1:{listen}"
        self.admin_socket = admin_socket
        self.log_path = config.with_suffix(".log")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Balancer:
        assert HAPROXY is not None
        with open(self.log_path, "ab") as out:
            proc = self.proc = subprocess.Popen([HAPROXY, "-db", "-f", str(self.config)], stdout=out, stderr=out)
        wait_until(lambda: proc.poll() is not None or self.admin_socket.exists(), 10, "HAProxy's runtime API")
        assert proc.poll() is None, f"haproxy exited with {proc.returncode}:\n{self.log()}"
        return self

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.terminate()
        self.proc.wait(10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def admin(self, command: str) -> str:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(self.admin_socket))
            sock.sendall(command.encode() + b"\n")
            answer = bytearray()
            while data := sock.recv(65_536):
                answer += data
        return answer.decode()

    def servers(self) -> dict[str, dict[str, str]]:
        """`show stat` for the nodes: per server, its state (`status`), open requests (`scur`), requests sent
        (`stot`), and retries and redispatches away from it (`wretr`, `wredis`)."""
        rows = csv.DictReader(self.admin("show stat").removeprefix("# ").splitlines())
        return {row["svname"]: row for row in rows if row["pxname"] == BACKEND and row["svname"] in NODE_NAMES}

    def count(self, server: str, field: str) -> int:
        return int(self.servers()[server][field] or 0)

    def wait_status(self, server: str, status: str, timeout: float = 30) -> None:
        wait_until(lambda: self.servers()[server]["status"] == status, timeout, f"HAProxy to see {server} {status}")


class Fleet:
    def __init__(self, balancer: Balancer, nodes: dict[str, ServerProcess]) -> None:
        self.balancer = balancer
        self.nodes = nodes

    def sent(self) -> dict[str, int]:
        """Requests HAProxy has sent to each node so far."""
        return {name: self.balancer.count(name, "stot") for name in self.nodes}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[Fleet]:
    root = tmp_path_factory.mktemp("fleet")
    nodes = {name: ServerProcess(root / name, **NODE_ENV) for name in NODE_NAMES}
    for name, node in nodes.items():
        # Each node asks the other for voices it does not know: the nodes' own addresses, never the balancer's.
        node.env["POLYTTS_PEERS"] = ",".join(other.url for other_name, other in nodes.items() if other_name != name)
    listen, stats, admin_socket = free_port(), free_port(), root / "admin.sock"
    config = root / "haproxy.cfg"
    config.write_text(
        configured(
            SHIPPED.read_text(), listen, stats, admin_socket, [f"127.0.0.1:{node.port}" for node in nodes.values()]
        )
    )
    balancer = Balancer(config, listen, admin_socket)
    try:
        for node in nodes.values():
            node.start(wait_ready=False)
        for name, node in nodes.items():
            wait_until(lambda: PROBE.get(node.url + "/ready").status_code == 200, 120, f"{name} to be ready")
        balancer.start()
        for name in nodes:
            balancer.wait_status(name, "UP")
        yield Fleet(balancer, nodes)
    finally:
        if balancer.proc is not None:
            balancer.stop()
        for node in nodes.values():
            if node.proc is not None:
                node.stop()


def answered(client: httpx.Client, text: str, deadline: float) -> tuple[httpx.Response, int]:
    """POST /tts as a client that honours Retry-After: a 429 or 503 that carries it is sent again after that many
    seconds (a 429 or 503 without it is a failure). Returns the final answer and how often the client waited."""
    waits = 0
    while True:
        response = client.post("/tts", json={"text": text, "language": "en"})
        if response.status_code not in (429, 503):
            return response, waits
        assert "retry-after" in response.headers, f"{response.status_code} without Retry-After: {response.text}"
        assert time.monotonic() < deadline, f"still refused at the deadline: {response.text}"
        waits += 1
        time.sleep(float(response.headers["retry-after"]))  # what the client was told to do, not a wait for state


def test_the_shipped_file_is_valid_as_it_is() -> None:
    assert HAPROXY is not None
    checked = subprocess.run([HAPROXY, "-c", "-f", str(SHIPPED)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_concurrent_requests_spread_over_both_nodes(fleet: Fleet) -> None:
    before = fleet.sent()
    start = threading.Barrier(4)

    def speak(index: int) -> int:
        with httpx.Client(base_url=fleet.balancer.url, timeout=120) as client:
            start.wait()
            return client.post("/tts", json={"text": f"Request {index} of four.", "language": "en"}).status_code

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(speak, range(4))) == [200] * 4
    spread = {name: count - before[name] for name, count in fleet.sent().items()}
    log.info("four concurrent requests went %s", spread)
    assert sum(spread.values()) == 4 and all(spread.values()), spread


def test_a_voice_registered_through_the_balancer_is_usable_on_every_node(fleet: Fleet) -> None:
    balancer = fleet.balancer
    with httpx.Client(base_url=balancer.url, timeout=120) as client:
        registered = client.post("/voices", **_pack_form())
        assert registered.status_code == 201
        voice = registered.json()["voice_id"]
        # Whichever node serves the next request: each in turn is the only one the balancer may choose.
        for name in fleet.nodes:
            others = [other for other in fleet.nodes if other != name]
            for other in others:
                balancer.admin(f"set server {BACKEND}/{other} state maint")
            before = balancer.count(name, "stot")
            spoken = client.post("/tts", json={"text": "Spoken by either node.", "voice_id": voice, "language": "en"})
            assert spoken.status_code == 200 and spoken.headers["x-voice-id"] == voice, spoken.text
            assert balancer.count(name, "stot") == before + 1
            for other in others:
                balancer.admin(f"set server {BACKEND}/{other} state ready")
                balancer.wait_status(other, "UP")
    for node in fleet.nodes.values():
        assert voice in PROBE.get(node.url + "/health").json()["inventory"]["voice"]
    assert sum(f"voice {voice} fetched from peer" in node.log() for node in fleet.nodes.values()) == 1


async def test_live_websocket_passes_through(fleet: Fleet) -> None:
    url = fleet.balancer.url.replace("http", "ws") + "/tts/live/ws?voice=af_heart"
    audio = bytearray()
    events: list[str] = []
    async with websockets.connect(url) as ws:
        await ws.send(json.dumps({"text": "Through the balancer."}))
        await ws.send(json.dumps({"end": True}))
        async for message in ws:
            if isinstance(message, bytes):
                audio += message
            else:
                events.append(json.loads(message)["type"])
    assert events[0] == "start" and events[-1] == "done" and len(audio) > 24_000  # more than half a second


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs the curl program (apt-get install -y curl)")
def test_live_http_answers_while_its_body_still_streams_in(fleet: Fleet) -> None:
    # `-T .`: curl reads the pipe without blocking and sends each line as it comes (`-T -` waits to fill a buffer).
    curl = subprocess.Popen(
        [
            "curl",
            "-sS",
            "--no-progress-meter",
            "--no-buffer",
            "-T",
            ".",
            f"{fleet.balancer.url}/tts/live?voice=af_heart",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert curl.stdin is not None and curl.stdout is not None
    received = bytearray()
    stdout = cast(io.BufferedReader, curl.stdout)  # Popen's pipes are buffered readers

    def read() -> None:
        for chunk in iter(stdout.read1, b""):
            received.extend(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        curl.stdin.write(b'{"text": "The first phrase is complete."}\n')
        curl.stdin.flush()
        wait_until(lambda: received, 60, "audio of the first phrase while the request body is still open")
        first = len(received)
        curl.stdin.write(b'{"text": "The second one ends it."}\n')
        curl.stdin.close()
        assert curl.wait(120) == 0
        reader.join(10)
        assert len(received) > first
    finally:
        curl.kill()


def test_a_node_drained_under_load_loses_no_request(fleet: Fleet) -> None:
    balancer = fleet.balancer
    stream: dict[str, object] = {}
    received = bytearray()

    def listen() -> None:
        try:
            with httpx.Client(base_url=balancer.url, timeout=300) as client:
                with client.stream("POST", "/tts/stream", json={"text": LONG, "language": "en"}) as response:
                    stream["status"] = response.status_code
                    for chunk in response.iter_raw():
                        received.extend(chunk)
        except httpx.HTTPError as exc:
            stream["error"] = exc

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    wait_until(lambda: received, 120, "the stream's first audio")
    open_requests = {name: row["scur"] for name, row in balancer.servers().items()}
    assert sorted(open_requests.values()) == ["0", "1"], f"the stream should be the only open request: {open_requests}"
    held = next(name for name, count in open_requests.items() if count == "1")
    free = next(name for name in fleet.nodes if name != held)
    drained = fleet.nodes[held]

    with httpx.Client(base_url=balancer.url, timeout=120) as client:
        # Least connections: while the stream holds one node, one request at a time all go to the other.
        before = fleet.sent()
        for _ in range(3):
            assert client.get("/engines").status_code == 200
        assert fleet.sent() == {held: before[held], free: before[free] + 3}

        # The window between the node's SIGTERM and HAProxy's next health check, held open: every request HAProxy
        # sends the drained node in it gets 503 `draining` there, and must be answered by the other node.
        balancer.admin(f"disable health {BACKEND}/{held}")
        assert drained.proc is not None
        drained.proc.send_signal(signal.SIGTERM)
        wait_until(
            lambda: PROBE.get(drained.url + "/ready").status_code == 503, 10, "the drained node's /ready to say 503"
        )

        deadline = time.monotonic() + 120
        start = threading.Barrier(3)

        def load(index: int) -> list[tuple[httpx.Response, int]]:
            with httpx.Client(base_url=balancer.url, timeout=120) as own:
                start.wait()
                return [
                    answered(own, f"Client {index} asks for the {turn} time while a node drains.", deadline)
                    for turn in ("first", "second")
                ]

        with ThreadPoolExecutor(3) as pool:
            outcomes = [outcome for outcomes in pool.map(load, range(3)) for outcome in outcomes]
        assert [response.status_code for response, _ in outcomes] == [200] * 6
        moved_by_haproxy = balancer.count(held, "wredis")
        client_waits = sum(waits for _, waits in outcomes)
        log.info(
            "drain: HAProxy moved %d request(s) off the draining node; clients waited on Retry-After %d time(s)",
            moved_by_haproxy,
            client_waits,
        )
        assert moved_by_haproxy >= 1  # leastconn sent it work while the other node was busier

        # With its health checked again, HAProxy takes the node out and sends it nothing more.
        balancer.admin(f"enable health {BACKEND}/{held}")
        balancer.wait_status(held, "DOWN")
        sent_to_drained = balancer.count(held, "stot")
        for _ in range(3):
            assert client.get("/engines").status_code == 200
        assert balancer.count(held, "stot") == sent_to_drained

    listener.join(240)
    assert "error" not in stream and stream["status"] == 200 and len(received) % 2 == 0
    assert drained.proc.wait(120) == 0
    assert "tts/stream outcome=ok" in drained.log() and "cutting" not in drained.log()


def test_with_no_node_left_the_balancer_says_when_to_retry(fleet: Fleet) -> None:
    for name, node in fleet.nodes.items():
        assert node.stop() == 0
        fleet.balancer.wait_status(name, "DOWN")
    refused = PROBE.post(fleet.balancer.url + "/tts", json={"text": "Anyone there?"}, timeout=30)
    assert refused.status_code == 503 and refused.json()["code"] == "no_node_available"
    assert refused.headers["retry-after"] == "2"
