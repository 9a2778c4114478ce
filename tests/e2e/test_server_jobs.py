"""Jobs on a real server process: a multi-chapter job killed (SIGKILL) at a few points and drained once (SIGTERM),
restarted each time on the same folders, ends with the same PCM as the same job run without a break; no piece
stored is ever synthesized again, and the drain stops at a piece boundary with the job queued in the table. A
webhook call that failed goes on after a restart with its attempts counted, signed the same. A stream that comes
while a job runs waits for one job step at most (read from the node's own step lines, in the order steps ran)."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import re
import signal
import threading
from pathlib import Path
from typing import Any

import httpx

from audio.encoding import WAV_HEADER_BYTES
from bench.common import PROBE
from jobs.store import JobStore
from jobs.webhook import SIGNATURE_HEADER, webhook_secret
from tests.support.polling import wait_until
from tests.support.servers import ServerProcess

BOOK = {
    "format": "wav",
    "chapters": [
        {"title": "Dawn", "text": "The harbour was quiet at dawn. Gulls sat on the posts."},
        {"title": "Noon", "text": "By noon the boats were out. The water was bright and calm."},
        {"title": "Dusk", "text": "At dusk they came back in a line. The lamps were lit."},
    ],
}
"""Six pieces of a sentence each (POLYTTS_JOB_PIECE_CHARS at its least, 50)."""
ENV = {"POLYTTS_KOKORO_BACKEND": "onnx", "POLYTTS_JOB_PIECE_CHARS": "50", "POLYTTS_DRAIN_SECONDS": "120"}
JOB_S = 300.0


def status(server: ServerProcess, job_id: str) -> dict[str, Any]:
    answer: dict[str, Any] = PROBE.get(f"{server.url}/jobs/{job_id}", timeout=30).json()
    return answer


def until(server: ServerProcess, job_id: str, pieces: int) -> dict[str, Any]:
    """The job's status once at least `pieces` pieces are done."""

    def far_enough() -> dict[str, Any] | None:
        now = status(server, job_id)
        return now if now["pieces_done"] >= pieces else None

    return wait_until(far_enough, JOB_S, f"{pieces} pieces of job {job_id}", detail=server.log)


def finished_pcm(server: ServerProcess, job_id: str) -> bytes:
    done = wait_until(lambda: status(server, job_id)["state"] == "done", JOB_S, f"job {job_id}", detail=server.log)
    assert done
    audio = PROBE.get(f"{server.url}/jobs/{job_id}/audio", timeout=60)
    assert audio.status_code == 200 and audio.headers["content-type"] == "audio/wav"
    return audio.content[WAV_HEADER_BYTES:]


def restarted(tmp: Path) -> ServerProcess:
    """A new process on the same voices, cache and jobs folders."""
    return ServerProcess(tmp, **ENV).start()


def test_a_job_killed_and_drained_resumes_to_the_same_pcm(tmp_path: Path, assembled_model: Path) -> None:
    server = restarted(tmp_path)
    servers = [server]
    try:
        reference = PROBE.post(f"{server.url}/jobs", json=BOOK, timeout=60).json()["job_id"]
        expected = finished_pcm(server, reference)
        job_id = PROBE.post(f"{server.url}/jobs", json=BOOK, timeout=60).json()["job_id"]
        total = status(server, job_id)["pieces_total"]
        assert total >= 6
        wait_until(lambda: status(server, job_id)["state"] == "running", JOB_S, "the job to start")
        for pieces in (0, 2):  # killed while its first piece is made, then later on
            until(server, job_id, pieces)
            assert server.proc is not None
            server.proc.kill()
            server.proc.wait()
            server = restarted(tmp_path)
            servers.append(server)
        until(server, job_id, 4)
        assert server.stop() == 0  # SIGTERM: drained, a clean exit
        drained = server.log()
        table = JobStore(tmp_path / "jobs")
        try:
            left = table.get(job_id)
        finally:
            table.close()
        assert left is not None and left.state == "queued"  # handed back to the node's queue, not running
        assert f"job {job_id} queued: the node stopped with {left.pieces_done} of {total} pieces stored" in drained
        server = restarted(tmp_path)
        servers.append(server)
        assert finished_pcm(server, job_id) == expected
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.proc.send_signal(signal.SIGTERM)
            server.proc.wait(30)
    # The drain let the piece under way finish and started none: every piece it synthesized it stored.
    assert "SIGTERM: stop requested" in drained
    synthesized = re.findall(rf"jobs outcome=(\w+) .* id=job-{job_id[:12]}-(\d+)", drained)
    stored = re.findall(rf"job {job_id} piece (\d+) stored", drained)
    assert {outcome for outcome, _ in synthesized} <= {"ok"}
    assert sorted(seq for _, seq in synthesized) == sorted(stored)
    # No piece is synthesized again once stored, whatever killed the process.
    log = "".join(s.log() for s in servers)  # in the order the processes ran
    done: set[str] = set()
    for line in log.splitlines():
        if stored_seq := re.search(rf"job {job_id} piece (\d+) stored", line):
            assert stored_seq[1] not in done, line
            done.add(stored_seq[1])
        elif made := re.search(rf"jobs outcome=ok .* id=job-{job_id[:12]}-(\d+)", line):
            assert made[1] not in done, f"piece {made[1]} synthesized again after it was stored"
    assert len(done) == total
    assert log.count(f"job {job_id} queued again after a restart") == 3


class _Receiver(http.server.BaseHTTPRequestHandler):
    """A webhook receiver that answers 503 until `failing` is cleared, then 200; it keeps every call."""

    calls: list[tuple[bytes, str, int]] = []
    failing = threading.Event()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        answer = 503 if self.failing.is_set() else 200
        type(self).calls.append((body, self.headers[SIGNATURE_HEADER], answer))
        self.send_response(answer)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_webhook_that_failed_goes_on_after_a_restart(tmp_path: Path, assembled_model: Path) -> None:
    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    _Receiver.failing.set()
    env = {**ENV, "POLYTTS_JOB_WEBHOOK_FIRST_WAIT_S": "5"}
    server = ServerProcess(tmp_path, **env).start()
    try:
        url = f"http://127.0.0.1:{receiver.server_address[1]}/hook"
        key = {"X-Fairness-Key": "hooked"}
        job_id = PROBE.post(
            f"{server.url}/jobs", json={"text": "Call me when done.", "webhook_url": url}, headers=key, timeout=60
        ).json()["job_id"]
        failed = f"job {job_id} webhook attempt 1/5 failed: HTTP 503"
        wait_until(lambda: failed in server.log(), JOB_S, "the webhook's first call to fail", detail=server.log)
        retrying = PROBE.get(f"{server.url}/jobs/{job_id}", headers=key, timeout=60).json()["webhook"]
        assert (retrying["state"], retrying["attempts"], retrying["last_status"]) == ("pending", 1, 503)
        assert retrying["last_error"] == "HTTP 503" and retrying["next_attempt_at"] > retrying["last_attempt_at"]
        assert server.proc is not None
        server.proc.kill()  # its next call was due in 5 s: only the table knows of it now
        server.proc.wait()
        first = server.log()
        _Receiver.failing.clear()
        server = ServerProcess(tmp_path, **env).start()
        delivered = f"job {job_id} webhook delivered (attempt 2/5)"
        wait_until(lambda: delivered in server.log(), JOB_S, "the webhook's second call", detail=server.log)
        hook = PROBE.get(f"{server.url}/jobs/{job_id}", headers=key, timeout=60).json()["webhook"]
        assert (hook["state"], hook["attempts"], hook["last_status"], hook["next_attempt_at"]) == (
            "delivered",
            2,
            200,
            None,
        )
    finally:
        receiver.shutdown()
        server.stop()
    assert f"job {job_id} webhook resumed after 1 failed attempt(s)" in server.log()
    assert "webhook delivered" not in first
    (body, signed, refused), (again, signed_again, answered) = _Receiver.calls
    assert (refused, answered) == (503, 200)
    assert again == body and signed_again == signed  # the same call, made by the new process
    expected = hmac.new(webhook_secret("hooked").encode(), body, hashlib.sha256).hexdigest()
    assert signed == f"sha256={expected}"
    event = json.loads(body)
    assert (event["job_id"], event["state"], event["error"]) == (job_id, "done", None)


LONG = " ".join(
    f"Chapter {n} begins on a grey morning. The ferry leaves at nine, and the town is slow to wake up. "
    "A dog barks at the gulls on the pier, and the baker opens his shutters."
    for n in range(1, 13)
)


def test_a_stream_while_a_job_runs_waits_for_one_job_step_at_most(tmp_path: Path, assembled_model: Path) -> None:
    server = ServerProcess(tmp_path, POLYTTS_KOKORO_BACKEND="onnx", POLYTTS_LOG_LEVEL="debug").start()
    background_step = re.compile(r"job \d+ \(key [^,]*, background\) step")
    try:
        job = PROBE.post(f"{server.url}/jobs", json={"text": LONG, "format": "wav"}, timeout=60).json()
        wait_until(lambda: background_step.search(server.log()), JOB_S, "the job's first step", detail=server.log)
        body = {"text": "Is the ferry on time today?", "language": "en"}
        with (
            server.client() as client,
            client.stream("POST", "/tts/stream", json=body, headers={"X-Fairness-Key": "listener"}) as stream,
        ):
            assert stream.status_code == 200
            assert b"".join(stream.iter_bytes())
        # The job goes on once the stream is served (it was running all along).
        stream_steps = re.compile(r"job (\d+) \(key [^,]*, stream\) step")

        def job_went_on() -> bool:
            log = server.log()
            served = stream_steps.search(log)
            return served is not None and background_step.search(log, served.end()) is not None

        wait_until(job_went_on, JOB_S, "a job step after the stream's", detail=server.log)
        assert status(server, job["job_id"])["state"] == "running"
        httpx.delete(f"{server.url}/jobs/{job['job_id']}", timeout=30)
    finally:
        server.stop()
    lines = server.log().splitlines()
    admitted = next(i for i, line in enumerate(lines) if re.search(r"\(key [^,]*, stream\) admitted", line))
    stream_id = re.search(r"job (\d+) ", lines[admitted])
    assert stream_id is not None
    first_step = next(
        i for i in range(admitted, len(lines)) if f"job {stream_id[1]} (key" in lines[i] and " step " in lines[i]
    )
    assert any(background_step.search(line) for line in lines[:admitted])  # a job step ran before it came
    waited_for = [line for line in lines[admitted:first_step] if background_step.search(line)]
    assert len(waited_for) <= 1, waited_for  # the step under way when it came, and no other
