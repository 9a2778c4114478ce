"""The job routes in process: a small two-chapter job made for real (Kokoro ONNX), read back whole, by range and by
chapter, its progress as server-sent events; what a job is refused for; webhooks signed and retried; metrics and
retention; and a stream's steps beside a job's (the fair queue's picks, watched)."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import io
import itertools
import json
import re
import threading
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import av
import pytest
from fastapi.testclient import TestClient

from gpu.fairness import FairQueue
from gpu.jobs import Job
from jobs.webhook import SIGNATURE_HEADER, webhook_secret
from lifecycle.service import Service
from tests.support.apps import InProcessApp
from tests.support.openapi import assert_documented_events
from tests.support.polling import wait_until

CHAPTERS = [
    {"title": "One", "text": "The harbour was quiet at dawn."},
    {"title": "Two", "text": "Then the boats went out to sea."},
]
DONE_S = 180.0
SPOKEN = "Hello there, right now please. Here is a second sentence of the stream, and then a third one follows it."


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, assembled_model: Path) -> Iterator[InProcessApp]:
    env = {
        "POLYTTS_JOB_PIECE_CHARS": "100",
        "POLYTTS_MAX_JOB_CHARS": "5000",
        "POLYTTS_MAX_JOBS_PER_KEY": "2",
        "POLYTTS_MAX_JOB_DISK_BYTES_PER_KEY": str(3 * 1024 * 1024),
    }
    with InProcessApp(tmp_path_factory.mktemp("jobs"), **env) as running:
        yield running


def finished(client: TestClient, job_id: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        status: dict[str, Any] = client.get(f"/jobs/{job_id}", headers=headers).json()
        return status if status["state"] in ("done", "failed", "cancelled") else None

    return wait_until(ended, DONE_S, f"job {job_id} to end")


@pytest.fixture(scope="module")
def done_job(app: InProcessApp) -> dict[str, Any]:
    answer = app.client.post("/jobs", json={"chapters": CHAPTERS, "format": "m4b"})
    assert answer.status_code == 202, answer.text
    assert answer.json()["state"] == "queued"
    status = finished(app.client, answer.json()["job_id"])
    assert status["state"] == "done", status
    return status


def test_a_job_reports_its_progress_and_node(app: InProcessApp, done_job: dict[str, Any]) -> None:
    assert done_job["chapters_done"] == done_job["chapters_total"] == 2
    assert done_job["chars_done"] == done_job["chars_total"] == sum(len(c["text"]) for c in CHAPTERS)
    assert done_job["node"] == app.settings.host_id
    assert done_job["audio_seconds"] > 1.0 and done_job["eta_s"] == 0.0
    assert [c["title"] for c in done_job["chapters"]] == ["One", "Two"]
    log = app.log()
    assert f"job {done_job['job_id']} queued" in log and f"job {done_job['job_id']} done" in log


def test_the_finished_file_has_a_chapter_mark_per_chapter(app: InProcessApp, done_job: dict[str, Any]) -> None:
    answer = app.client.get(f"/jobs/{done_job['job_id']}/audio")
    assert answer.status_code == 200 and answer.headers["content-type"] == "audio/mp4"
    assert answer.headers["accept-ranges"] == "bytes"
    with av.open(io.BytesIO(answer.content), mode="r") as container:
        chapters = container.chapters()
        assert [c["metadata"]["title"] for c in chapters] == ["One", "Two"]
        samples = sum(frame.samples for frame in container.decode(audio=0))
    assert samples / 24_000 == pytest.approx(done_job["audio_seconds"], abs=0.2)


def test_one_chapter_is_served_by_its_index(app: InProcessApp, done_job: dict[str, Any]) -> None:
    answer = app.client.get(f"/jobs/{done_job['job_id']}/audio", params={"chapter": 1})
    assert answer.status_code == 200
    with av.open(io.BytesIO(answer.content), mode="r") as container:
        seconds = sum(frame.samples for frame in container.decode(audio=0)) / 24_000
    assert seconds == pytest.approx(done_job["chapters"][1]["audio_seconds"], abs=0.2)
    missing = app.client.get(f"/jobs/{done_job['job_id']}/audio", params={"chapter": 2})
    assert missing.status_code == 404 and missing.json()["code"] == "chapter_not_found"


def test_ranges_of_the_file(app: InProcessApp, done_job: dict[str, Any]) -> None:
    url = f"/jobs/{done_job['job_id']}/audio"
    whole = app.client.get(url).content
    head = app.client.get(url, headers={"Range": "bytes=0-99"})
    assert head.status_code == 206 and head.content == whole[:100]
    assert head.headers["content-range"] == f"bytes 0-99/{len(whole)}"
    tail = app.client.get(url, headers={"Range": "bytes=-10"})
    assert tail.status_code == 206 and tail.content == whole[-10:]
    rest = app.client.get(url, headers={"Range": f"bytes={len(whole) - 5}-"})
    assert rest.content == whole[-5:]
    outside = app.client.get(url, headers={"Range": f"bytes={len(whole)}-"})
    assert outside.status_code == 416 and outside.json()["code"] == "range_not_satisfiable"
    assert outside.headers["content-range"] == f"bytes */{len(whole)}"


def test_progress_events_end_with_the_job(app: InProcessApp, done_job: dict[str, Any]) -> None:
    answer = app.client.get(f"/jobs/{done_job['job_id']}/events")
    assert answer.headers["content-type"].startswith("text/event-stream")
    events = [block for block in answer.text.split("\n\n") if block.startswith("event: progress")]
    last = json.loads(events[-1].split("data: ", 1)[1])
    assert last["state"] == "done" and last["job_id"] == done_job["job_id"]
    assert_documented_events(app.client.get("/openapi.json").json(), "/jobs/{job_id}/events", "get", answer.text)


def test_a_job_belongs_to_its_key(app: InProcessApp, done_job: dict[str, Any]) -> None:
    other = {"X-Fairness-Key": "someone-else"}
    assert app.client.get(f"/jobs/{done_job['job_id']}", headers=other).json()["code"] == "job_not_found"
    assert app.client.get("/jobs", headers=other).json()["total"] == 0
    page = app.client.get("/jobs", params={"limit": 1}).json()
    assert page["total"] >= 1 and [job["job_id"] for job in page["jobs"]][:1]


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"text": "Hello.", "chapters": CHAPTERS}, 422, "invalid_input"),
        ({"format": "mp3"}, 422, "invalid_input"),
        ({"text": "Hello.", "format": "aiff"}, 422, "invalid_input"),
        ({"chapters": [{"title": "x", "text": "***"}]}, 422, "empty_text"),
        ({"text": "Hello.", "voice": "no_such_voice"}, 404, "voice_not_found"),
        ({"text": "Hello.", "speed": 9.0}, 422, "invalid_input"),
        ({"text": "Hello.", "webhook_url": "ftp://example.com/"}, 422, "invalid_input"),
        ({"text": "word " * 1300}, 413, "job_too_long"),
        ({"text": "Long enough to pass the key's disk. " * 100}, 507, "job_storage_full"),
    ],
)
def test_a_job_is_validated_before_it_is_queued(
    app: InProcessApp, body: dict[str, Any], status: int, code: str
) -> None:
    answer = app.client.post("/jobs", json=body, headers={"X-Fairness-Key": "refused"})
    assert (answer.status_code, answer.json()["code"]) == (status, code), answer.text
    assert app.client.get("/jobs", headers={"X-Fairness-Key": "refused"}).json()["total"] == 0


def test_a_key_has_a_bound_on_its_jobs_and_a_deleted_job_is_gone(app: InProcessApp) -> None:
    key = {"X-Fairness-Key": "busy-reader"}
    made = [app.client.post("/jobs", json={"text": "A short one."}, headers=key) for _ in range(2)]
    assert [answer.status_code for answer in made] == [202, 202]
    refused = app.client.post("/jobs", json={"text": "A short one."}, headers=key)
    assert refused.status_code == 429 and refused.json()["code"] == "job_queue_full"
    assert "Retry-After" in refused.headers
    for answer in made:
        job_id = answer.json()["job_id"]
        assert app.client.delete(f"/jobs/{job_id}", headers=key).status_code == 204
        assert app.client.get(f"/jobs/{job_id}", headers=key).status_code == 404
        assert not (app.settings.jobs_dir / job_id).exists()
    assert app.client.post("/jobs", json={"text": "A short one."}, headers=key).status_code == 202


class _Receiver(http.server.BaseHTTPRequestHandler):
    """Fails the first call with a 500, then takes every call; keeps what it was sent."""

    calls: list[tuple[bytes, str]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).calls.append((body, self.headers[SIGNATURE_HEADER]))
        self.send_response(500 if len(type(self).calls) == 1 else 200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_the_webhook_is_signed_and_retried(app: InProcessApp) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        key = {"X-Fairness-Key": "hooked"}
        answer = app.client.post("/jobs", json={"text": "Call me when done.", "webhook_url": url}, headers=key)
        assert answer.status_code == 202, answer.text
        job_id = answer.json()["job_id"]
        assert answer.json()["webhook"] == {
            "state": "pending",
            "attempts": 0,
            "last_status": None,
            "last_error": None,
            "last_attempt_at": None,
            "next_attempt_at": None,
        }

        def delivered() -> dict[str, Any] | None:
            hook: dict[str, Any] = app.client.get(f"/jobs/{job_id}", headers=key).json()["webhook"]
            return hook if hook["state"] == "delivered" else None

        hook = wait_until(delivered, DONE_S, "the webhook's second call to be delivered")
    finally:
        server.shutdown()
    assert (hook["attempts"], hook["last_status"], hook["last_error"], hook["next_attempt_at"]) == (2, 200, None, None)
    assert hook["last_attempt_at"] is not None
    assert app.client.get("/jobs", headers=key).json()["jobs"][0]["webhook"] == hook
    (first, first_signature), (body, signature) = _Receiver.calls[:2]
    assert first == body and first_signature == signature  # the same call again
    expected = hmac.new(webhook_secret("hooked").encode(), body, hashlib.sha256).hexdigest()
    assert signature == f"sha256={expected}"
    event = json.loads(body)
    assert (event["job_id"], event["state"]) == (job_id, "done")
    assert "webhook attempt 1/5 failed: HTTP 500" in app.log()


def test_metrics_and_health_show_the_jobs(app: InProcessApp, done_job: dict[str, Any]) -> None:
    metrics = app.client.get("/metrics").text
    assert re.search(r'^polytts_jobs\{state="done"\} [1-9]', metrics, re.MULTILINE), metrics
    assert "polytts_job_queue_depth" in metrics and "polytts_job_chars_per_second" in metrics
    assert done_job["job_id"] in app.client.get("/health").json()["inventory"]["job"]


class Picks:
    """Every step the fair queue picks, in order, and for each job admitted how many had been picked and which were
    under way (a spy on the queue: the picks themselves are the queue's)."""

    def __init__(self, queue: FairQueue) -> None:
        self.queue = queue
        self.picked: list[Job] = []
        self.at_admission: dict[int, tuple[int, list[Job]]] = {}
        self._pick, self._add = queue.pick, queue.add

    def pick(self, resident: Collection[str]) -> Job | None:
        job = self._pick(resident)
        if job is not None:
            self.picked.append(job)
        return job

    def add(self, job: Job) -> Job:
        running = list(self.queue.state.running)
        admitted = self._add(job)
        self.at_admission[admitted.id] = (len(self.picked), running)
        return admitted


def test_a_stream_waits_for_one_job_step_at_most(app: InProcessApp) -> None:
    service: Service = app.client.app.state.service  # type: ignore[attr-defined]
    queue = service.scheduler.queue
    picks = Picks(queue)
    key = {"X-Fairness-Key": "narrator"}
    text = " ".join(f"Sentence {n} of a chapter is read in the background." for n in range(6))
    with mock.patch.object(queue, "pick", picks.pick), mock.patch.object(queue, "add", picks.add):
        job_id = app.client.post("/jobs", json={"text": text}, headers=key).json()["job_id"]
        wait_until(lambda: any(j.background for j in queue.state.running), DONE_S, "a job step under way")
        with app.client.stream("POST", "/tts/stream", json={"text": SPOKEN}) as stream:
            assert stream.status_code == 200
            audio = b"".join(stream.iter_bytes())
        app.client.delete(f"/jobs/{job_id}", headers=key)
    assert audio
    listener = next(job for job in picks.picked if job.streaming)
    picked_before, under_way = picks.at_admission[listener.id]
    assert all(job.background for job in under_way) and len(under_way) <= 1  # at most the job step under way
    assert any(job.background for job in picks.picked[:picked_before])  # the job was running when the stream came
    steps = picks.picked[picked_before:]
    assert steps[0] is listener  # no other job step before the stream's first (beside the one under way, or after)
    # Between two steps of the stream, at most one job step (while the stream's buffer was full).
    of_stream = [n for n, job in enumerate(steps) if job is listener]
    assert len(of_stream) >= 2
    assert all(later - earlier <= 2 for earlier, later in itertools.pairwise(of_stream)), steps


def test_an_ended_job_is_removed_after_its_retention(tmp_path: Path, assembled_model: Path) -> None:
    with InProcessApp(tmp_path, POLYTTS_JOB_RETENTION_S="0.5") as short:
        job_id = short.client.post("/jobs", json={"text": "Gone soon."}).json()["job_id"]
        # The removal's log line comes last (after the row and the folder), so wait for it, not for the 404.
        wait_until(lambda: f"job {job_id} removed" in short.log(), DONE_S, "the job to be removed")
        assert f"job {job_id} done" in short.log()
        assert short.client.get(f"/jobs/{job_id}").status_code == 404
        assert not (short.settings.jobs_dir / job_id).exists()
