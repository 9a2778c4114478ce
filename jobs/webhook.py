"""The call a job makes when it ends: a JSON POST to its webhook URL, signed with a secret derived from the caller's
key, retried with backoff (a job never waits for it).

The call is durable: it is queued in the job table's database (`JobStore`, its `webhooks` table) in the same
transaction as the job's end, with its attempts and when the next is due, so a restart goes on with its backoff
where it was. A call under way when the node stops is made again (at least once, never lost).

The signature is `X-PolyTTS-Signature: sha256=<hex HMAC-SHA256 of the body>`, keyed with the webhook secret:
HMAC-SHA256(the API key, "polytts-webhook") as hex, which the key's holder can compute and nobody else can; on a
node without API keys, the same of the fairness key's name (docs/api.md, "Jobs").
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass

import httpx

SIGNATURE_HEADER = "X-PolyTTS-Signature"
SECRET_CONTEXT = b"polytts-webhook"
TIMEOUT_S = 10.0


def webhook_secret(key: str) -> str:
    """The secret a key's webhooks are signed with: derived from the key (its secret, or a keyless node's name)."""
    return hmac.new(key.encode(), SECRET_CONTEXT, hashlib.sha256).hexdigest()


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def event_body(job_id: str, state: str, node: str, error: str | None) -> bytes:
    """The JSON body of a job's call: its id, how it ended, its node and its error."""
    event = {"job_id": job_id, "state": state, "node": node, "error": error}
    return json.dumps(event, separators=(",", ":")).encode()


def backoff_s(attempts: int, first_wait_s: float) -> float:
    """The wait after the `attempts`-th failed call: twice as long after each failure."""
    return float(first_wait_s * 2 ** (attempts - 1))


@dataclass(frozen=True)
class Answer:
    """How one call went: the receiver's HTTP status (None when it never answered) and, unless it answered 2xx, what
    went wrong."""

    status: int | None
    problem: str | None


async def attempt(url: str, secret: str, body: bytes) -> Answer:
    """One signed POST of `body` to `url`."""
    headers = {"Content-Type": "application/json", SIGNATURE_HEADER: signature(secret, body)}
    async with httpx.AsyncClient(timeout=TIMEOUT_S, follow_redirects=False) as client:
        try:
            answer = await client.post(url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            return Answer(None, type(exc).__name__)
    return Answer(answer.status_code, None if answer.is_success else f"HTTP {answer.status_code}")
