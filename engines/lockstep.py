"""The lock-step thread bridge: a producer that only knows how to call back (a model's generate loop with a hook)
turned into an iterator the GPU thread pulls from, one piece at a time, with only one of the two threads running.

Qwen3-TTS on PyTorch streams through it: Transformers' `generate` returns only when the utterance is done, so it
runs on a helper thread that pauses at every piece until the GPU thread asks for the next.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator
from typing import Any, TypeVar

T = TypeVar("T")


class GenerationStopped(Exception):
    """Raised inside a paused generation whose reader has gone, to end it."""


def lockstep(produce: Callable[[Callable[[T], None]], None], name: str) -> Generator[T, None, None]:
    """Run `produce(emit)` on a helper thread one step at a time: each `emit(item)` hands `item` to the iterating
    thread and waits until that thread asks for the next one, so only one of the two runs at a time. Closing the
    iterator makes the waiting `emit` raise GenerationStopped, which ends `produce`; its own errors reach the reader."""
    requests: queue.SimpleQueue[bool] = queue.SimpleQueue()  # True: go on, False: stop
    results: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()

    def emit(item: T) -> None:
        results.put(("item", item))
        if not requests.get():
            raise GenerationStopped

    def run() -> None:
        requests.get()  # the first request
        try:
            produce(emit)
            results.put(("done", None))
        except GenerationStopped:
            results.put(("done", None))
        except BaseException as exc:  # handed to the reader, whatever it is
            results.put(("error", exc))

    worker = threading.Thread(target=run, name=name, daemon=True)
    worker.start()
    paused = False
    try:
        while True:
            requests.put(True)
            kind, value = results.get()
            if kind == "error":
                raise value
            if kind == "done":
                return
            paused = True
            yield value
            paused = False
    finally:
        if paused:
            requests.put(False)
            results.get()
        worker.join()
