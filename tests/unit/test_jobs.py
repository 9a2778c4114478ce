"""The jobs layer without a server: how a text is cut into pieces, the job table's recovery after a crash, atomic
writes, where a webhook call stands, the bounds a job must fit, and Range parsing."""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from errors import Busy, InsufficientStorage, PayloadTooLarge, RangeNotSatisfiable
from jobs import bounds
from jobs.job_settings import JobSettings
from jobs.pieces import PieceRequest, cut
from jobs.store import TABLE_FILE, JobRecord, JobStore, WebhookState, write_atomically
from web.ranges import byte_range

TEXT = (
    "The harbour was quiet at dawn. Gulls sat on the posts, and a bell rang once, far away over the water. "
    "By noon the boats were out; the sea was bright. Nobody on shore looked up from their nets."
)


def record(job_id: str = "a" * 32, key: str = "reader", **fields: object) -> JobRecord:
    values: dict[str, object] = {
        "id": job_id,
        "key": key,
        "state": "queued",
        "format": "wav",
        "options": {"voice_id": None},
        "chapters": ["One", "Two"],
        "sample_rate": 24_000,
        "chars_total": 100,
        "chars_done": 0,
        "pieces_total": 2,
        "pieces_done": 0,
        "samples": 0,
        "bytes": 0,
        "foreseen_bytes": 1000,
        "node": "here",
        "webhook_url": None,
        "webhook_secret": "",
        "error": None,
        "created_at": 1.0,
        "served_at": None,
        "ended_at": None,
        **fields,
    }
    return JobRecord(**values)  # type: ignore[arg-type]


def test_a_text_is_cut_the_same_way_every_time_within_the_piece_size() -> None:
    chapters = [("One", TEXT), ("Scene break", "* * *"), ("Two", TEXT)]
    pieces = cut(chapters, 80)
    assert pieces == cut(chapters, 80)
    assert all(len(piece.text) <= 80 for piece in pieces)
    assert [piece.seq for piece in pieces] == list(range(len(pieces)))
    assert {piece.chapter for piece in pieces} == {0, 2}  # nothing to speak in the scene break
    assert " ".join(piece.text for piece in pieces if piece.chapter == 0) == TEXT


def test_a_piece_request_reads_the_jobs_engine_parameters() -> None:
    request = PieceRequest.of({"voice_id": "af_heart", "language": None, "params": {"speed": 1.2}}, "Hello.")
    assert (request.text, request.voice_id, request.speed) == ("Hello.", "af_heart", 1.2)
    assert getattr(request, "temperature", "absent") is None  # another family's parameter: not given
    assert not hasattr(request, "no_such_field")


def test_after_a_crash_a_piece_whose_file_is_in_place_counts_as_done(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    job = record(state="running")
    pieces = cut([("One", "First piece here."), ("Two", "Second piece here.")], 80)
    store.add(job, pieces)
    store.write_piece(job.id, 0, b"\x01\x00" * 50)  # renamed into place; the crash came before the table said so
    (store.folder(job.id) / "000001.pcm.tmp").write_bytes(b"half")  # a write the crash cut short
    (tmp_path / ("f" * 32)).mkdir()  # the folder of a job the table never took
    store.close()
    store = JobStore(tmp_path)
    assert store.recover() == [job.id]
    recovered = store.get(job.id)
    assert recovered is not None
    assert (recovered.state, recovered.pieces_done, recovered.samples) == ("queued", 1, 50)
    assert recovered.chars_done == len(pieces[0].text)
    assert store.next_piece(job.id) == dataclasses.replace(pieces[1])
    assert not (store.folder(job.id) / "000001.pcm.tmp").exists()
    assert not (tmp_path / ("f" * 32)).exists()
    store.delete(job.id)
    assert store.get(job.id) is None and not store.folder(job.id).exists()


def test_transactions_from_the_loop_and_worker_threads_at_once_never_collide(tmp_path: Path) -> None:
    """The event loop sets a job's state while a worker thread removes another job (the retention sweep): each
    transaction waits for the other instead of failing ("cannot start a transaction within a transaction")."""
    store = JobStore(tmp_path)
    jobs = [record(f"{n:032x}") for n in range(40)]
    for job in jobs:
        store.add(job, cut([("One", "A piece.")], 80))
    errors: list[BaseException] = []

    def hammer(action: Callable[[str], None], ids: list[str]) -> None:
        try:
            for job_id in ids:
                action(job_id)
        except BaseException as exc:  # the failure this guards against
            errors.append(exc)

    kept, removed = [job.id for job in jobs[:20]], [job.id for job in jobs[20:]]
    threads = [
        threading.Thread(target=hammer, args=(lambda job_id: store.set_state(job_id, "running"), kept * 5)),
        threading.Thread(target=hammer, args=(store.delete, removed)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert [store.get(job_id) is None for job_id in removed] == [True] * 20
    assert {store.get(job_id).state for job_id in kept} == {"running"}  # type: ignore[union-attr]


def test_the_table_is_in_wal_mode(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_webhook_call_keeps_its_state_from_pending_to_failed(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    job = record(webhook_url="http://127.0.0.1:9/hook", webhook_secret="s")
    store.add(job, cut([("One", "First piece here.")], 80))
    assert store.webhook_state(job.id) is None  # not queued while the job runs
    store.set_state(job.id, "failed", "the engine broke")
    queued = store.webhook_state(job.id)
    assert queued is not None and (queued.state, queued.attempts, queued.last_status) == ("pending", 0, None)
    store.webhook_failed(job.id, 1, 1e12, 503, "HTTP 503")
    store.close()
    store = JobStore(tmp_path)  # durable: a restart reads the same state
    retried = store.webhook_state(job.id)
    assert retried is not None and retried.last_attempt_at is not None
    assert dataclasses.replace(retried, last_attempt_at=None) == WebhookState("pending", 1, 503, "HTTP 503", None, 1e12)
    assert [hook.attempts for hook in store.webhooks()] == [1]
    store.webhook_over(job.id, "failed", 2, None, "ConnectError")
    given_up = store.webhook_state(job.id)
    assert given_up is not None and given_up.last_attempt_at is not None
    assert (given_up.state, given_up.attempts, given_up.last_status, given_up.last_error) == (
        "failed",
        2,
        None,
        "ConnectError",
    )
    assert given_up.next_attempt_at is None
    assert store.webhooks() == []  # given up: never called again
    store.delete(job.id)
    assert store.db.execute("SELECT COUNT(*) FROM webhooks").fetchone()[0] == 0


def test_a_removed_jobs_call_is_still_made_and_then_forgotten(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    job = record(webhook_url="http://127.0.0.1:9/hook")
    store.add(job, cut([("One", "First piece here.")], 80))
    store.set_state(job.id, "cancelled")
    store.delete(job.id)
    assert [hook.job_id for hook in store.webhooks()] == [job.id]
    store.webhook_over(job.id, "delivered", 1, 200, None)
    assert store.webhook_state(job.id) is None


def test_a_table_made_before_the_webhook_state_gets_its_columns(tmp_path: Path) -> None:
    old = sqlite3.connect(tmp_path / TABLE_FILE)
    old.execute(
        "CREATE TABLE webhooks (job_id TEXT PRIMARY KEY, url TEXT NOT NULL, secret TEXT NOT NULL, "
        "body BLOB NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, due_at REAL NOT NULL)"
    )
    old.execute("INSERT INTO webhooks VALUES ('b', 'http://127.0.0.1:9/', '', x'7b7d', 2, 5.0)")
    old.commit()
    old.close()
    store = JobStore(tmp_path)
    assert store.webhook_state("b") == WebhookState("pending", 2, None, None, None, 5.0)
    assert [hook.job_id for hook in store.webhooks()] == ["b"]


def test_an_atomic_write_leaves_nothing_half_written(tmp_path: Path) -> None:
    def parts() -> Iterator[bytes]:
        yield b"new, and then"
        raise OSError("the disk went away")

    path = tmp_path / "piece.pcm"
    write_atomically(path, [b"old"])
    with pytest.raises(OSError):
        write_atomically(path, parts())
    assert path.read_bytes() == b"old" and list(tmp_path.iterdir()) == [path]


def test_a_full_disk_is_a_507_with_nothing_left(small_disk: Path) -> None:
    with pytest.raises(InsufficientStorage):
        write_atomically(small_disk / "big.pcm", [b"\0" * (3 * 1024 * 1024)])
    assert list(small_disk.iterdir()) == []


def test_the_bounds_of_a_job() -> None:
    settings = JobSettings(
        max_job_chars=1000,
        max_jobs_per_key=2,
        max_job_chars_per_key=500,
        max_job_disk_bytes_per_key=10_000,
        jobs_disk_quota_bytes=20_000,
    )
    with pytest.raises(PayloadTooLarge, match="1001 characters"):
        bounds.check_size(settings, 1001, 1)
    one = record("1" * 32, chars_total=100)
    bounds.check_room(settings, "reader", 100, 1000, [one], retry_after=2.0)
    with pytest.raises(Busy) as full:
        bounds.check_room(settings, "reader", 10, 10, [one, record("2" * 32)], retry_after=2.0)
    assert full.value.code == "job_queue_full" and full.value.retry_after == 2.0
    with pytest.raises(Busy, match="characters"):
        bounds.check_room(settings, "reader", 401, 10, [one], retry_after=2.0)
    with pytest.raises(InsufficientStorage, match="key's"):
        bounds.check_room(settings, "reader", 10, 9_500, [one], retry_after=2.0)
    ended = record("3" * 32, key="other", state="done", bytes=15_000, foreseen_bytes=1)
    with pytest.raises(InsufficientStorage, match="quota") as quota:
        bounds.check_room(settings, "reader", 10, 5_000, [one, ended], retry_after=2.0)
    assert quota.value.code == "job_storage_full"
    # An ended job counts its disk as made; another key's queued jobs count for the node only.
    bounds.check_room(settings, "reader", 10, 1_000, [one, dataclasses.replace(ended, bytes=100)], retry_after=2.0)


@pytest.mark.parametrize(
    ("header", "span"),
    [
        (None, None),
        ("bytes=0-9", (0, 9)),
        ("bytes=90-", (90, 99)),
        ("bytes=-10", (90, 99)),
        ("bytes=50-500", (50, 99)),
        ("bytes=0-1,5-6", None),  # several ranges: the whole answers
        ("items=0-1", None),
    ],
)
def test_a_range_header_is_read(header: str | None, span: tuple[int, int] | None) -> None:
    assert byte_range(header, 100) == span


@pytest.mark.parametrize("header", ["bytes=100-", "bytes=5-2", "bytes=-0"])
def test_a_range_outside_the_file_is_a_416(header: str) -> None:
    with pytest.raises(RangeNotSatisfiable) as refused:
        byte_range(header, 100)
    assert refused.value.status == 416 and refused.value.headers()["Content-Range"] == "bytes */100"
