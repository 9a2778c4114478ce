"""Probes of work nobody waits for any more: a barge-in must free the engine at once (the step under way stopped,
not run to its end), and the next client's wait must not grow behind it; an ElevenLabs context whose client ended
its text and then went away, or closed it a second time (a barge-in), must stop; a Cartesia socket whose client
sends contexts and never reads what they answer must not grow the node's memory.

`barge_in_frees_the_engine` runs on any keyless node whose caches do not answer its distinct texts; the ElevenLabs
probes on a node whose log they read (POLYTTS_LOG_LEVEL=info: each request's outcome line);
`unread_cartesia_contexts` on a keyless node with a short reader idle limit (`hostage.SERVER_ENV`).
"""

from __future__ import annotations

import json
import re
import statistics
import threading
import time
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from bench.abuse import hostage
from bench.abuse.probing import LONG_TEXT, Answer, ProbeFailed, Target, expect, requests_total, short

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


MULTI_STREAM = "/multi-stream-input"
"""How the log names the ElevenLabs multi-stream-input route (its template ends so; stream-input's does not)."""


def elevenlabs_socket(target: Target, query: str = "") -> ClientConnection:
    url = target.url.replace("http", "ws", 1) + "/elevenlabs/v1/text-to-speech/af_heart/multi-stream-input"
    headers = {"xi-api-key": target.api_key} if target.api_key else {}
    return connect(f"{url}?output_format=pcm_16000{query}", additional_headers=headers, open_timeout=30)


def until_audio(ws: ClientConnection, context: str) -> dict[str, Any]:
    """The context's first message with audio."""
    while True:
        message = json.loads(ws.recv(timeout=60))
        expect("error" not in message, f"answered {message}")
        if message.get("audio") and message.get("contextId") == context:
            return message


def next_outcome_line(target: Target, route: str, logged: int, within_s: float = 60.0) -> str:
    """The first outcome line of `route` the log holds past its first `logged` characters, once it is there."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        lines = [text for text in target.log_says()[logged:].splitlines() if f"{route} outcome=" in text]
        if lines:
            return lines[0]
        time.sleep(0.2)
    raise ProbeFailed(f"no {route} outcome line logged within {within_s:.0f} s (the server logs at info?)")


def cancelled_short(line: str, sent: int) -> str:
    """What an outcome line says of a request that must have been cancelled with less than `sent` characters spoken."""
    fields = dict(re.findall(r"(\w+)=(\S+)", line))
    said = (
        f"outcome={fields.get('outcome')} chars={fields.get('chars')} of {sent} sent, "
        f"synth={fields.get('synth')} audio={fields.get('audio')}"
    )
    expect(fields.get("outcome") == "cancelled", said)
    expect(int(fields.get("chars", sent)) < sent, said)
    return said


def left_after_ending_its_text(target: Target) -> Answer:
    """A multi-stream-input context sent a long text, `flush` and `close_context` (its text is over: what it was
    sent is spoken to the end while the client is there), whose client closes the socket at its first audio: the
    node stops its work, and its line says `cancelled` with fewer characters than sent (landed: `outcome=ok
    chars=339 chunks=5 synth=6.250s audio=19.88s`)."""
    logged = len(target.log_says())
    started = time.perf_counter()
    with elevenlabs_socket(target) as ws:
        ws.send(json.dumps({"text": LONG_TEXT, "context_id": "turn"}))
        ws.send(json.dumps({"context_id": "turn", "flush": True}))
        ws.send(json.dumps({"context_id": "turn", "close_context": True}))
        until_audio(ws, "turn")
        first_audio_s = time.perf_counter() - started
    said = cancelled_short(next_outcome_line(target, MULTI_STREAM, logged), len(LONG_TEXT))
    return Answer("cancelled", f"closed at its first audio ({first_audio_s:.2f} s): {said}")


def second_close_of_a_closing_context(target: Target) -> Answer:
    """Pipecat's barge-in after the end of a turn: a context sent a long text, flushed and closed (its text is being
    spoken to the end) is closed again at its first audio: it ends at once, `isFinal`, and its line says `cancelled`
    with fewer characters than sent (landed: the second close was ignored, all of it spoken)."""
    logged = len(target.log_says())
    with elevenlabs_socket(target) as ws:
        ws.send(json.dumps({"text": LONG_TEXT, "context_id": "turn", "flush": True}))
        ws.send(json.dumps({"context_id": "turn", "close_context": True}))
        until_audio(ws, "turn")
        closed = time.perf_counter()
        ws.send(json.dumps({"context_id": "turn", "close_context": True}))
        while (message := json.loads(ws.recv(timeout=60))) != {"isFinal": True, "contextId": "turn"}:
            expect("error" not in message, f"answered {message}")
        final_s = time.perf_counter() - closed
        ws.send(json.dumps({"close_socket": True}))
    said = cancelled_short(next_outcome_line(target, MULTI_STREAM, logged), len(LONG_TEXT))
    return Answer("cancelled", f"isFinal {final_s:.3f} s after the second close: {said}")


UNREAD_CONTEXTS = 100_000
MAX_UNREAD_GROWTH_MB = 40
"""RSS growth allowed while a client sends UNREAD_CONTEXTS ending contexts and reads nothing: the landed version grew
by 176 MB per 100,000 (a task and a closed id kept per context)."""


def unread_cartesia_contexts(target: Target, count: int = UNREAD_CONTEXTS, reader_idle_s: float = 5.0) -> Answer:
    """A Cartesia WebSocket whose client sends `count` first messages with an empty transcript and `continue: false`
    (128-character context ids) as fast as the node takes them, and never reads: the node's memory must stay flat
    (what the kernel's socket buffers hold is not the node's), and the node must drop the socket once it has stopped
    being read for `reader_idle_s` (plus slack)."""
    url = target.url.replace("http", "ws", 1) + "/cartesia/tts/websocket"
    first = {
        "model_id": "sonic-2",
        "transcript": "",
        "continue": False,
        "voice": {"mode": "id", "id": "af_heart"},
        "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000},
    }
    before = target.memory(reset_peak=False)
    sent, last_sent, dropped = [0], [time.perf_counter()], threading.Event()
    deadline = time.perf_counter() + 120 + reader_idle_s
    # Its reader stops at one message: the socket is not read.
    with connect(url, open_timeout=30, max_queue=1, close_timeout=1, ping_interval=None) as ws:

        def send_all() -> None:
            """Every message, then one every half second until the node drops the socket (or the deadline)."""
            try:
                for index in range(count):
                    ws.send(json.dumps({**first, "context_id": f"{index:0128d}"}))
                    sent[0], last_sent[0] = sent[0] + 1, time.perf_counter()
                while time.perf_counter() < deadline:
                    time.sleep(0.5)
                    ws.send(json.dumps({**first, "context_id": f"late-{time.perf_counter()}"}))
            except (ConnectionClosed, OSError):
                dropped.set()

        sender = threading.Thread(target=send_all, daemon=True)
        sender.start()
        try:
            sender.join(deadline - time.perf_counter() + 5)
            ended_s = time.perf_counter() - last_sent[0]
            after = settled_memory(target)
        finally:
            ws.close_socket()
    growth = (after["VmRSS"] - before["VmRSS"]) / 1024 if before and after else None
    grew = "memory not readable here" if growth is None else f"RSS {growth:+.1f} MB"
    detail = f"{sent[0]:,} of {count:,} messages taken, {grew}"
    expect(growth is None or growth <= MAX_UNREAD_GROWTH_MB, detail)
    expect(dropped.is_set(), f"the socket was still open {ended_s:.0f} s after its last message: {detail}")
    return Answer("dropped", f"{detail}; dropped {ended_s:.1f} s after the last message the node took")


def settled_memory(target: Target, within_s: float = 60.0) -> dict[str, int] | None:
    """The server's memory once it has stopped changing (by less than 1 MB over a second): what it took is handled."""
    last = target.memory(reset_peak=False)
    deadline = time.monotonic() + within_s
    while last is not None and time.monotonic() < deadline:
        time.sleep(1.0)
        now = target.memory(reset_peak=False)
        if now is None or abs(now["VmRSS"] - last["VmRSS"]) < 1024:
            return now
        last = now
    return last


def probes(target: Target, own: bool) -> None:
    keyless = None if not target.api_key else "needs a keyless server"
    target.probe("a barge-in frees the engine", lambda: barge_in_frees_the_engine(target), keyless)
    logged = None if target.log_path else "reads the server's log (a server of its own)"
    target.probe("ElevenLabs context ended, then its client left", lambda: left_after_ending_its_text(target), logged)
    target.probe(
        "ElevenLabs second close_context (barge-in)", lambda: second_close_of_a_closing_context(target), logged
    )


def unread_probes(target: Target, own: bool) -> None:
    """On the `hostage` node (`hostage.SERVER_ENV`: a short reader idle limit)."""
    skip = None if own else "needs a keyless server of its own with a short reader idle limit"
    target.probe(
        f"{UNREAD_CONTEXTS:,} unread Cartesia contexts",
        lambda: unread_cartesia_contexts(target, reader_idle_s=hostage.READER_IDLE_S),
        skip,
    )
