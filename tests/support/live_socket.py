"""A client of the native live WebSocket (`/tts/live/ws`) as an application writing text as it comes would be."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import websockets


@dataclass
class LiveExchange:
    """What the node sent back: its audio, its events in order, and the subprotocol it chose."""

    audio: bytearray = field(default_factory=bytearray)
    events: list[dict[str, Any]] = field(default_factory=list)
    subprotocol: str | None = None

    @property
    def kinds(self) -> list[str]:
        return [event["type"] for event in self.events]


async def speak_live(
    url: str,
    texts: Sequence[str],
    subprotocols: Sequence[str] = ("polytts",),
    gap_s: float = 0.0,
) -> LiveExchange:
    """Send `texts` one message each (`gap_s` apart), then the end, and read until the node closes the socket."""
    exchange = LiveExchange()
    async with websockets.connect(url, subprotocols=list(subprotocols)) as ws:  # type: ignore[arg-type]
        exchange.subprotocol = ws.subprotocol
        for text in texts:
            await ws.send(json.dumps({"text": text}))
            if gap_s:
                await asyncio.sleep(gap_s)
        await ws.send(json.dumps({"end": True}))
        async for message in ws:
            if isinstance(message, bytes):
                exchange.audio += message
            else:
                exchange.events.append(json.loads(message))
    return exchange
