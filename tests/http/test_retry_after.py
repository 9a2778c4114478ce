"""Retry-After of a 429 over HTTP, in this process: bounded by POLYTTS_MAX_RETRY_AFTER_S, successive places for a crowd,
and places of clients that never came back forgotten once their time and the grace have passed. The fair queue's
clock is a fake one here, and the GPU thread picks nothing while the request holding the one slot waits: what each
refused request is told depends on nothing else."""

from __future__ import annotations

import threading
from pathlib import Path
from unittest import mock

from lifecycle.service import Service
from tests.support.apps import InProcessApp
from tests.support.clock import Clock
from tests.support.polling import wait_until

WINDOW_S = 20
GRACE_S = 2


def test_retry_after_is_bounded_and_forgets_clients_that_never_came_back(tmp_path: Path, assembled_model: Path) -> None:
    env = {
        "POLYTTS_MAX_INFLIGHT": "1",
        "POLYTTS_STREAM_ADMISSION": "false",
        "POLYTTS_MAX_RETRY_AFTER_S": str(WINDOW_S),
        "POLYTTS_RETRY_GRACE_S": str(GRACE_S),
    }
    with InProcessApp(tmp_path, **env) as app:
        service: Service = app.client.app.state.service  # type: ignore[attr-defined]
        queue = service.scheduler.queue
        clock = Clock(queue.clock())

        def told(key: str) -> int:
            answer = app.client.post("/tts", json={"text": "Quick answer."}, headers={"X-Fairness-Key": key})
            assert answer.status_code == 429 and answer.json()["code"] == "server_busy", answer.text
            return int(answer.headers["Retry-After"])

        statuses: list[int] = []
        held = threading.Thread(
            target=lambda: statuses.append(app.client.post("/tts", json={"text": "Held a while."}).status_code)
        )
        with mock.patch.object(queue, "clock", clock), mock.patch.object(queue, "pick", lambda resident: None):
            held.start()
            wait_until(lambda: len(queue.jobs()) == 1, 30, "the holding request to be admitted")
            fresh = told("first")
            crowd = [told(f"gone-{index}") for index in range(40)]  # one-shot clients: none comes back
            assert all(1 <= retry <= WINDOW_S for retry in [fresh, *crowd])
            assert crowd[:3] == sorted(crowd[:3]) and len(set(crowd)) >= 5  # successive places, spread
            clock.advance(WINDOW_S + GRACE_S + 1)  # every place's time and its grace have passed
            assert told("later") == fresh  # first in line again: the places of the clients gone have lapsed
        held.join(120)
        assert statuses == [200]  # served once the GPU thread picks again
