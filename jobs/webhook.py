"""The call a job makes when it ends: a JSON POST to its webhook URL, signed with a secret derived from the caller's
key, retried with backoff on its own task (a job never waits for it).

The signature is `X-PolyTTS-Signature: sha256=<hex HMAC-SHA256 of the body>`, keyed with the webhook secret:
HMAC-SHA256(the API key, "polytts-webhook") as hex, which the key's holder can compute and nobody else can; on a
node without API keys, the same of the fairness key's name (docs/api.md, "Jobs").
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
from typing import Any

import httpx

log = logging.getLogger("polytts.jobs")
SIGNATURE_HEADER = "X-PolyTTS-Signature"
SECRET_CONTEXT = b"polytts-webhook"
FIRST_WAIT_S = 1.0
TIMEOUT_S = 10.0


def webhook_secret(key: str) -> str:
    """The secret a key's webhooks are signed with: derived from the key (its secret, or a keyless node's name)."""
    return hmac.new(key.encode(), SECRET_CONTEXT, hashlib.sha256).hexdigest()


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


async def deliver(
    url: str, secret: str, event: dict[str, Any], attempts: int, first_wait_s: float = FIRST_WAIT_S
) -> bool:
    """POST `event` to `url` until it answers 2xx, at most `attempts` times, waiting twice as long after each
    failure; whether it was delivered. Each failure is one log line."""
    body = json.dumps(event, separators=(",", ":")).encode()
    headers = {"Content-Type": "application/json", SIGNATURE_HEADER: signature(secret, body)}
    wait = first_wait_s
    async with httpx.AsyncClient(timeout=TIMEOUT_S, follow_redirects=False) as client:
        for attempt in range(1, attempts + 1):
            try:
                answer = await client.post(url, content=body, headers=headers)
                if answer.is_success:
                    return True
                problem = f"HTTP {answer.status_code}"
            except httpx.HTTPError as exc:
                problem = type(exc).__name__
            log.warning("job %s webhook attempt %d/%d failed: %s", event.get("job_id"), attempt, attempts, problem)
            if attempt < attempts:
                await asyncio.sleep(wait)
                wait *= 2
    return False
