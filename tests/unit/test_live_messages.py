"""web/fronts/shared/live.py: waiting for a live request's next message (the routes themselves: test_server_live.py
and the fronts' own tests)."""

from __future__ import annotations

import asyncio
from typing import Any

from web.fronts.shared.live import IdleClock, _next


def test_a_cancel_that_comes_with_the_message_is_not_lost() -> None:
    """A socket that ends (its client sent a malformed frame) cancels its context just as the context's first
    message arrives: the wait must end cancelled, not swallow the cancel and wait out the idle limit."""

    async def cancelled_with_a_message() -> bool:
        inbox: asyncio.Queue[dict[str, Any] | BaseException | None] = asyncio.Queue()
        waiting = asyncio.create_task(_next(inbox, IdleClock(60.0)))
        for _ in range(3):
            await asyncio.sleep(0)  # it is waiting for the message now
        inbox.put_nowait({"text": " "})
        waiting.cancel()  # before it has woken with the message
        await asyncio.wait([waiting], timeout=5.0)
        return waiting.cancelled()

    assert asyncio.run(cancelled_with_a_message())
