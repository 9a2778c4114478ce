"""Probes of work nobody waits for any more: a barge-in must free the engine at once (the step under way stopped,
not run to its end), and the next client's wait must not grow behind it.

`barge_in_frees_the_engine` runs on any keyless node whose caches do not answer its distinct texts.
"""

from __future__ import annotations

import json
import statistics
import time

from websockets.sync.client import connect

from bench.abuse.probing import LONG_TEXT, Answer, Target, expect, requests_total, short

TRIALS = 5
MAX_EXTRA_WAIT_S = 0.5
"""How much longer than on an idle node a reply sent right after a barge-in may take. Without the step stopped, it
waited for the cancelled step to end: 0.57-1.2 s on the landed version (issue 31)."""


def barge_in_frees_the_engine(target: Target, trials: int = TRIALS) -> Answer:
    """A live request over /tts/live/ws that has its first audio, then its client goes away (a barge-in), and at
    once a short /tts from another request: how much longer than on an idle node that reply takes (the engine time
    still spent on the abandoned request), each trial with texts no cache holds."""
    url = target.url.replace("http", "ws", 1) + "/tts/live/ws?voice=af_heart&language=en"
    cancelled = requests_total(target.url, "tts/live/ws", "cancelled")
    idle, after = [], []
    with target.client() as client:

        def reply(text: str) -> float:
            started = time.perf_counter()
            answer = client.post("/tts", json={"text": text, "language": "en", "format": "pcm"})
            expect(answer.status_code == 200, f"/tts {short(answer)}")
            return time.perf_counter() - started

        reply("The engine warms up first.")
        for trial in range(trials):
            idle.append(reply(f"Reply {trial} comes on an idle node."))
            with connect(url, open_timeout=30) as ws:
                ws.send(json.dumps({"text": f"Trial {trial}. {LONG_TEXT}"}))
                ws.send(json.dumps({"end": True}))
                while isinstance(ws.recv(timeout=60), str):  # `start`, then the first audio
                    pass
            after.append(reply(f"Reply {trial} comes after a barge."))  # the socket is closed: the client is gone
    counted = requests_total(target.url, "tts/live/ws", "cancelled") - cancelled
    expect(counted == trials, f"{counted} of {trials} abandoned requests counted as cancelled")
    extra = [max(0.0, late - calm) for late, calm in zip(after, idle, strict=True)]
    detail = (
        f"a reply right after a barge-in took {statistics.median(extra):.3f} s longer than on an idle node "
        f"(median of {trials}; at most {max(extra):.3f} s; idle {statistics.median(idle):.3f} s)"
    )
    expect(statistics.median(extra) <= MAX_EXTRA_WAIT_S, detail)
    return Answer(f"cancelled x{trials}", detail)


def probes(target: Target, own: bool) -> None:
    keyless = None if not target.api_key else "needs a keyless server"
    target.probe("a barge-in frees the engine", lambda: barge_in_frees_the_engine(target), keyless)
