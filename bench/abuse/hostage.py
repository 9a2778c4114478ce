"""Probes of clients that would hold a node hostage: live sessions that never speak, readers that never read, a live
request failing after its audio started, a malformed message on an open ElevenLabs socket, deeply nested JSON on
every live route, an ElevenLabs socket whose contexts are all done (its inactivity timeout), context sockets'
contexts with nothing to say yet, and a crowd of refused clients obeying Retry-After, on a fresh node and after as
many refused clients that never came back.

`probes` needs a keyless node (every client shares the anonymous key) with a short live idle limit and reader idle
limit, as `SERVER_ENV` sets them; the crowds obeying Retry-After run on any keyless node.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from bench.abuse.payloads import live_body_broken_after_audio, reset_or_closed, stalled_readers
from bench.abuse.probing import (
    LONG_TEXT,
    SENTENCE,
    Answer,
    ProbeFailed,
    Target,
    code_of,
    expect,
    requests_total,
    short,
)

LIVE_IDLE_S = 10
READER_IDLE_S = 5
IDLE_LIVE_PER_CLIENT = 8
SERVER_ENV = {
    "POLYTTS_LIVE_IDLE_TIMEOUT_S": str(LIVE_IDLE_S),
    "POLYTTS_MAX_IDLE_LIVE_PER_CLIENT": str(IDLE_LIVE_PER_CLIENT),
    "POLYTTS_READER_IDLE_LIMIT_S": str(READER_IDLE_S),
    "POLYTTS_SEND_BUFFER_BYTES": "16384",
    "POLYTTS_MAX_BUFFERED_PIECES": "1",
}
"""What `probes` expects of the node; without it (`--url`), the probes that depend on the limits are skipped."""


def idle_live_sessions(target: Target, sessions: int = 8) -> Answer:
    """`sessions` WebSockets that send `{"text": ""}` every second: other requests from the same address and key must
    be served meanwhile, and every session must end at the idle limit, keep-alives or not."""
    url = target.url.replace("http", "ws", 1) + "/tts/live/ws?voice=af_heart"
    opened = [connect(url, open_timeout=30) for _ in range(sessions)]
    ended: dict[int, tuple[float, str]] = {}
    began = time.perf_counter()

    def keep_alive(index: int, ws: ClientConnection) -> None:
        while True:
            try:
                event = json.loads(ws.recv(timeout=1.0))
            except TimeoutError:
                ws.send(json.dumps({"text": ""}))
                continue
            if event["type"] != "start":
                ended[index] = (time.perf_counter() - began, event.get("code", event["type"]))
                return

    try:
        for ws in opened:
            ws.send(json.dumps({"text": ""}))
        threads = [threading.Thread(target=keep_alive, args=pair, daemon=True) for pair in enumerate(opened)]
        for thread in threads:
            thread.start()
        with target.client() as client:
            started = time.perf_counter()
            spoken = client.post("/tts", json={"text": SENTENCE, "language": "en"})
            openai = client.post("/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": SENTENCE})
            served_s = time.perf_counter() - started
        expect(spoken.status_code == 200 and openai.status_code == 200, f"/tts {short(spoken)}, OpenAI {short(openai)}")
        for thread in threads:
            thread.join(4 * LIVE_IDLE_S)
    finally:
        for ws in opened:
            ws.close()
    codes = {code for _, code in ended.values()}
    expect(len(ended) == sessions and codes == {"live_idle_timeout"}, f"{len(ended)} of {sessions} ended: {codes}")
    last = max(seconds for seconds, _ in ended.values())
    expect(last < LIVE_IDLE_S + 5, f"the last session ended {last:.1f} s in (idle limit {LIVE_IDLE_S} s)")
    return Answer(
        "200 200",
        f"/tts and OpenAI served in {served_s:.1f} s beside {sessions} idle sessions; all ended by {last:.1f} s",
    )


def readers_that_never_read(target: Target) -> Answer:
    """A /tts/stream and a live WebSocket whose clients stop reading: each must be dropped, counted and reset."""
    before = {route: requests_total(target.url, route, "reader_stalled") for route in ("tts/stream", "tts/live/ws")}
    stream, live = stalled_readers(target.url, LONG_TEXT)
    started = time.perf_counter()
    try:
        while not all(requests_total(target.url, route, "reader_stalled") > before[route] for route in before):
            expect(time.perf_counter() - started < 300, "not both dropped after 300 s")
            time.sleep(0.5)
        dropped_s = time.perf_counter() - started
        ends = reset_or_closed(stream), reset_or_closed(live)
    finally:
        stream.close()
        live.close()
    expect(all(end in ("reset", "closed") for end in ends), f"connections after the drop: {ends}")
    return Answer("reader_stalled x2", f"dropped {dropped_s:.1f} s after they stopped reading; connections {ends}")


def live_failure_after_audio(target: Target) -> Answer:
    """A /tts/live body whose second message is not UTF-8, sent once audio has started: the body must be cut (no
    closing chunk), counted as `invalid_message`, and (where the log is read) no ERROR said of the cut."""
    before = requests_total(target.url, "tts/live", "invalid_message")
    rest = live_body_broken_after_audio(target.url)
    expect(not rest.endswith(b"0\r\n\r\n"), "the body ended cleanly: the client cannot tell it failed")
    counted = requests_total(target.url, "tts/live", "invalid_message") - before
    expect(counted == 1, f"counted {counted} times as invalid_message")
    incomplete = "ASGI callable returned without completing response"
    expect(incomplete not in target.log_says(), f"logged {incomplete!r} at ERROR")
    return Answer("200, cut", "the chunked body ended without its last chunk; counted as invalid_message")


@dataclass
class Crowd:
    """What a crowd of clients obeying Retry-After went through, client by client in order of arrival."""

    attempts: list[int]
    served_at: list[float]
    """Seconds from the crowd's start until each was served."""
    longest_told: list[int]
    """The longest Retry-After each was told."""

    @property
    def last_served(self) -> float:
        return max(self.served_at)

    @property
    def longest(self) -> int:
        return max(self.longest_told)


def obeying_crowd(target: Target, clients: int) -> Crowd:
    """`clients` at once, each retrying a short /tts after the Retry-After it gets until it is served."""
    crowd = Crowd([0] * clients, [0.0] * clients, [0] * clients)
    began = time.perf_counter()

    def client(index: int) -> None:
        with httpx.Client(base_url=target.url, timeout=300, headers=target.auth) as http:
            time.sleep(index * 0.005)  # arrival order: index
            while True:
                crowd.attempts[index] += 1
                answer = http.post("/tts", json={"text": f"Number {index}.", "language": "en"})
                if answer.status_code != 429:
                    expect(answer.status_code == 200, f"client {index}: {short(answer)}")
                    crowd.served_at[index] = time.perf_counter() - began
                    return
                told = int(answer.headers["retry-after"])
                crowd.longest_told[index] = max(crowd.longest_told[index], told)
                time.sleep(told)

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    return crowd


def obeying_retry_after(target: Target, fresh: list[float], clients: int = 200) -> Answer:
    """`clients` at once obeying Retry-After: how many attempts they make, the most one needs, when the last is served
    (kept in `fresh`: what a crowd waits on a node that remembers no refused client), and how far the order of
    service strays from the order of arrival."""
    crowd = obeying_crowd(target, clients)
    fresh.append(crowd.last_served)
    order = sorted(range(clients), key=lambda index: crowd.served_at[index])
    # How far, on average, a client's place in the order of service is from its place in the order of arrival.
    displacement = sum(abs(place - index) for place, index in enumerate(order)) / clients
    return Answer(
        f"200 x{clients}",
        f"{sum(crowd.attempts)} attempts, at most {max(crowd.attempts)} by one client, told at most "
        f"{crowd.longest} s; the last served after {crowd.last_served:.0f} s; mean displacement from arrival "
        f"order {displacement:.0f} places",
    )


def obeying_after_no_shows(target: Target, fresh: list[float], clients: int = 200) -> Answer:
    """`clients` one-shot requests at once, never retried when refused, then `clients` clients obeying Retry-After:
    the places in line of the first must lapse, so that the last of the second is served about when the last of a
    crowd on a fresh node was (`fresh`), within one window of POLYTTS_MAX_RETRY_AFTER_S and POLYTTS_RETRY_GRACE_S."""
    with target.client() as http:
        policy = http.get("/admin/scheduler").json()["policy"]
    window = policy["max_retry_after_s"] + policy["retry_grace_s"]

    def one_shot(index: int) -> int:
        with httpx.Client(base_url=target.url, timeout=300, headers=target.auth) as one:
            return one.post("/tts", json={"text": f"Gone {index}.", "language": "en"}).status_code

    with ThreadPoolExecutor(clients) as pool:
        statuses = list(pool.map(one_shot, range(clients)))
    refused = statuses.count(429)
    expect(refused + statuses.count(200) == clients, f"one-shot clients answered {sorted(set(statuses))}")
    crowd = obeying_crowd(target, clients)
    versus = f"against {fresh[0]:.0f} s on a fresh node" if fresh else "(no fresh crowd measured)"
    if fresh:
        allowed = fresh[0] * 1.25 + window
        expect(
            crowd.last_served <= allowed,
            f"the last obeying client was served after {crowd.last_served:.0f} s {versus} (allowed {allowed:.0f} s)",
        )
    return Answer(
        f"429 x{refused} then 200 x{clients}",
        f"{refused} one-shot clients refused and gone; then {sum(crowd.attempts)} attempts, at most "
        f"{max(crowd.attempts)} by one client, told at most {crowd.longest} s; the last served after "
        f"{crowd.last_served:.0f} s {versus} (bound + grace {window:.0f} s)",
    )


def malformed_on_stream_input(target: Target, sockets: int = 5) -> Answer:
    """ElevenLabs stream-input sockets sent their first message, then one that is not JSON: each must answer the
    protocol's error and close at once, not hold the socket until the live idle limit."""
    url = target.url.replace("http", "ws", 1) + "/elevenlabs/v1/text-to-speech/af_heart/stream-input"
    headers = {"xi-api-key": target.api_key} if target.api_key else {}
    closed_after: list[float] = []
    for _ in range(sockets):
        with connect(f"{url}?output_format=pcm_16000", additional_headers=headers, open_timeout=30) as ws:
            started = time.perf_counter()
            ws.send(json.dumps({"text": " "}))
            ws.send("{not json")
            heard = [json.loads(message) for message in ws]
            closed_after.append(time.perf_counter() - started)
        expect(bool(heard) and heard[0].get("error") == "invalid_message", f"answered {heard[:2]}")
    expect(max(closed_after) < LIVE_IDLE_S / 2, f"a socket closed only after {max(closed_after):.1f} s")
    return Answer(
        f"invalid_message x{sockets}", f"closed at most {max(closed_after):.3f} s after the malformed message"
    )


DEEP = "[" * 2000 + "]" * 2000
"""2,000 nested arrays: enough for a recursive parser to give up (landed: a RecursionError in the live message parser,
a 500 or a socket closed with no error event, and, after a good message, a live place held for 600 s)."""
MAX_ERROR_S = 5.0
"""How long each route may take to answer such a message with its error (landed: ElevenLabs stream-input sometimes
hung 60 s)."""


def live_sockets(target: Target) -> dict[str, tuple[str, dict[str, Any]]]:
    """Each live socket's URL, and a first message that opens a live request waiting for text (a live place held)."""
    base = target.url.replace("http", "ws", 1)
    elevenlabs = f"{base}/elevenlabs/v1/text-to-speech/af_heart"
    return {
        "/tts/live/ws": (f"{base}/tts/live/ws?voice=af_heart", {"text": " "}),
        "ElevenLabs stream-input": (f"{elevenlabs}/stream-input?output_format=pcm_16000", {"text": " "}),
        "ElevenLabs multi-stream-input": (
            f"{elevenlabs}/multi-stream-input?output_format=pcm_16000",
            {"text": " ", "context_id": "c"},
        ),
        "Cartesia tts/websocket": (f"{base}/cartesia/tts/websocket", {**CARTESIA_FIRST, "context_id": "c"}),
        "Deepgram v1/speak": (
            f"{base}/deepgram/v1/speak?model=aura-2-thalia-en&encoding=linear16&sample_rate=16000",
            {"type": "Speak", "text": " "},
        ),
    }


def invalid_message_code(event: dict[str, Any]) -> str | None:
    """The code of an error in any front's shape (native and Cartesia `error` events, ElevenLabs' `error`, Deepgram's
    `Warning`), or None when the message is no error."""
    if event.get("type") in ("error", "Error", "Warning"):
        return str(event.get("code") or event.get("error_code") or event.get("err_code"))
    return str(event["error"]) if event.get("error") else None


def deep_on_socket(url: str, before: list[dict[str, Any]]) -> tuple[float, str]:
    """Send `before`, then DEEP, on a new socket: the seconds until the protocol's `invalid_message` error, and how the
    socket went on (`closed <code>` by the node within 2 s, else `served on`: the client closes it)."""
    with connect(url, open_timeout=30) as ws:
        for message in before:
            ws.send(json.dumps(message))
        started = time.perf_counter()
        ws.send(DEEP)
        while True:
            left = started + 30 - time.perf_counter()
            try:
                received = ws.recv(timeout=max(left, 0.01))
            except TimeoutError:
                raise ProbeFailed(f"{url}: no error 30 s after the nested message") from None
            except ConnectionClosed as exc:
                raise ProbeFailed(f"{url}: closed ({exc.rcvd}) with no error event") from None
            if isinstance(received, str) and (code := invalid_message_code(json.loads(received))) is not None:
                expect(code == "invalid_message", f"{url}: answered {received[:200]}")
                break
        error_s = time.perf_counter() - started
        try:
            while True:
                ws.recv(timeout=2.0)
        except ConnectionClosed:
            return error_s, f"closed {ws.close_code}"
        except TimeoutError:
            return error_s, "served on"


def deep_json(target: Target, sockets: int = 20) -> Answer:
    """2,000 nested arrays as the first message on every live route: /tts/live answers 422 `invalid_message`, each
    socket its protocol's error (the native and ElevenLabs sockets then close; Cartesia and Deepgram say it and serve
    on, as they do for any message they cannot read), each within MAX_ERROR_S. Then `sockets` sockets from the same
    client in a row, over every socket route, each sent a first message that holds a live place and then the nested
    one: once they are closed, no live request waits for text, and a fresh live request is admitted at once (the
    places freed; no `live_sessions_full`)."""
    routes = live_sockets(target)
    seen = []
    with target.client() as client:
        started = time.perf_counter()
        body = client.post(
            "/tts/live", content=(DEEP + "\n").encode(), headers={"Content-Type": "application/x-ndjson"}
        )
        error_s = time.perf_counter() - started
        expect(body.status_code == 422 and code_of(body) == "invalid_message", f"/tts/live: {short(body)}")
        expect(error_s < MAX_ERROR_S, f"/tts/live answered after {error_s:.1f} s")
        seen.append(f"/tts/live 422 in {error_s:.3f} s")
        for name, (url, _) in routes.items():
            error_s, then = deep_on_socket(url, [])
            closes = not name.startswith(("Cartesia", "Deepgram"))
            expect(then.startswith("closed") or not closes, f"{name}: the socket {then} after its error")
            expect(error_s < MAX_ERROR_S, f"{name}: its error came after {error_s:.1f} s")
            seen.append(f"{name} {error_s:.3f} s, {then}")
        cycle = list(routes.values())
        for index in range(sockets):
            url, opening = cycle[index % len(cycle)]
            deep_on_socket(url, [opening])
        deadline = time.perf_counter() + 5
        while (waiting := client.get("/health").json()["inflight"].get("awaiting_text", 0)) and (
            time.perf_counter() < deadline
        ):
            time.sleep(0.2)
        expect(not waiting, f"{waiting} live requests still waiting for text 5 s after the {sockets} sockets closed")
    fresh_s, first = fresh_live_request(target)
    expect(first.get("type") == "start", f"a fresh live request after {sockets} sockets: {first}")
    expect(fresh_s < MAX_ERROR_S, f"a fresh live request started after {fresh_s:.1f} s")
    return Answer(
        "422, errors x5",
        f"first message: {'; '.join(seen)}; then {sockets} sockets (a live place each, then the nested message): "
        f"a fresh live request started in {fresh_s:.3f} s",
    )


def fresh_live_request(target: Target) -> tuple[float, dict[str, Any]]:
    """A live request over /tts/live/ws: the seconds until its first event, and that event (`start` when admitted)."""
    url = target.url.replace("http", "ws", 1) + "/tts/live/ws?voice=af_heart"
    with connect(url, open_timeout=30, additional_headers=target.auth) as ws:
        started = time.perf_counter()
        ws.send(json.dumps({"text": "Hello again."}))
        ws.send(json.dumps({"end": True}))
        first = json.loads(ws.recv(timeout=60))
        return time.perf_counter() - started, first


INACTIVITY_S = 3
MAX_INACTIVITY_SLACK_S = 2.0


def finished_contexts_time_out(target: Target) -> Answer:
    """An ElevenLabs multi-stream-input socket opened with `inactivity_timeout=INACTIVITY_S` whose one context was
    flushed, closed and has finished (`isFinal`), and that sends nothing more: the node closes it about
    INACTIVITY_S later, within MAX_INACTIVITY_SLACK_S (landed: still open at 40 s with `inactivity_timeout=5`)."""
    url = target.url.replace("http", "ws", 1) + "/elevenlabs/v1/text-to-speech/af_heart/multi-stream-input"
    headers = {"xi-api-key": target.api_key} if target.api_key else {}
    query = f"?output_format=pcm_16000&inactivity_timeout={INACTIVITY_S}"
    after: list[dict[str, Any]] = []
    with connect(url + query, additional_headers=headers, open_timeout=30) as ws:
        ws.send(json.dumps({"text": "A short answer. ", "context_id": "turn", "flush": True}))
        ws.send(json.dumps({"context_id": "turn", "close_context": True}))
        while (message := json.loads(ws.recv(timeout=60))) != {"isFinal": True, "contextId": "turn"}:
            expect(message.get("contextId") == "turn" and "error" not in message, f"answered {message}")
        final = time.perf_counter()
        try:
            while True:
                after.append(json.loads(ws.recv(timeout=final + 40 - time.perf_counter())))
        except TimeoutError:
            raise ProbeFailed(f"still open 40 s after the context's isFinal; then {after[:2]}") from None
        except ConnectionClosed:
            closed_s = time.perf_counter() - final
    said = [str(message.get("error")) for message in after]
    detail = f"closed {closed_s:.2f} s after the context's isFinal (code {ws.close_code}; said {', '.join(said)})"
    expect(closed_s < INACTIVITY_S + MAX_INACTIVITY_SLACK_S, detail)
    return Answer("closed", detail)


CARTESIA_FIRST = {
    "model_id": "sonic-2",
    "transcript": "",
    "continue": True,
    "voice": {"mode": "id", "id": "af_heart"},
    "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000},
}


def empty_contexts(target: Target, sockets: int = 4, per_socket: int = 5) -> Answer:
    """Contexts opened with nothing to say yet (Cartesia: an empty transcript; ElevenLabs multi-stream-input: the
    initial `{"text": " "}`), `per_socket` on each of `sockets` sockets from one address: at most
    IDLE_LIVE_PER_CLIENT of them may wait for text at once, the rest refused with each protocol's
    `live_sessions_full` (landed, 200 of them were accepted from one address)."""
    base = target.url.replace("http", "ws", 1)
    fronts = {
        "cartesia": (f"{base}/cartesia/tts/websocket", lambda i: {**CARTESIA_FIRST, "context_id": f"c{i}"}),
        "elevenlabs": (
            f"{base}/elevenlabs/v1/text-to-speech/af_heart/multi-stream-input?output_format=pcm_16000",
            lambda i: {"text": " ", "context_id": f"c{i}"},
        ),
    }
    seen = []
    for front, (url, first) in fronts.items():
        opened = [connect(url, open_timeout=30) for _ in range(sockets)]
        refused = 0
        try:
            for ws in opened:
                for index in range(per_socket):
                    ws.send(json.dumps(first(index)))
            for ws in opened:
                with contextlib.suppress(TimeoutError):
                    while True:  # each refusal is one error message (then ElevenLabs' isFinal); the rest wait
                        event = json.loads(ws.recv(timeout=2.0))
                        refused += "live_sessions_full" in (event.get("error_code"), event.get("error"))
        finally:
            for ws in opened:
                ws.close()
        accepted = sockets * per_socket - refused
        seen.append(f"{front} {accepted} accepted, {refused} live_sessions_full")
        expect(accepted <= IDLE_LIVE_PER_CLIENT, f"{seen[-1]}: over the {IDLE_LIVE_PER_CLIENT} per address")
        expect(refused > 0, f"{seen[-1]}")
    return Answer(f"<= {IDLE_LIVE_PER_CLIENT} each", "; ".join(seen))


def probes(target: Target, own: bool) -> None:
    skip = None if own else f"needs a keyless server of its own with {SERVER_ENV}"
    target.probe("8 idle live sessions with keep-alives", lambda: idle_live_sessions(target), skip)
    target.probe("readers that never read (stream, WebSocket)", lambda: readers_that_never_read(target), skip)
    target.probe("live request failing after its audio started", lambda: live_failure_after_audio(target), skip)
    target.probe("malformed message on ElevenLabs stream-input", lambda: malformed_on_stream_input(target))
    target.probe("20 empty contexts on 4 sockets, per front", lambda: empty_contexts(target), skip)
    keyless = None if not target.api_key else "needs a keyless server"
    target.probe("2,000 nested arrays on every live route", lambda: deep_json(target), keyless)
    target.probe(
        f"ElevenLabs inactivity_timeout={INACTIVITY_S} after isFinal", lambda: finished_contexts_time_out(target)
    )
    fresh: list[float] = []
    target.probe("200 clients obeying Retry-After", lambda: obeying_retry_after(target, fresh), keyless)
    target.probe(
        "200 clients obeying Retry-After after 200 no-shows", lambda: obeying_after_no_shows(target, fresh), keyless
    )
