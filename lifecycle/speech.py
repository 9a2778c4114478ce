"""The answer to a speech request, once its first audio is ready: its headers, and its audio as PCM, encoded, or
whole, with word timings after each chunk's audio where they were asked for."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator

from audio.encoding import AudioFormat, codec_sample_rate, encode_whole, open_encoder
from audio.output import Output, open_output
from audio.word_timings import Words, WordTiming
from gpu.jobs import Job
from lifecycle.plan import Plan
from lifecycle.request_context import RequestContext, until_disconnected
from lifecycle.timings import Timings


class Speech:
    """An admitted synthesis (or a cache hit) whose first audio is ready: its headers, its body, its end.

    Read it once, whole (`read`) or streamed (`pcm`, `encoded`); either way the request's log line, metrics and cache
    entry are written when the audio ends, however it ends.
    """

    def __init__(
        self,
        plan: Plan,
        timings: Timings,
        ctx: RequestContext,
        items: AsyncGenerator[bytes | Words, None],
        job: Job | None = None,
    ) -> None:
        self.job = job
        """The synthesis's job (None for a cache hit)."""
        self.plan = plan
        self.timings = timings
        self.ctx = ctx
        self.words: list[WordTiming] = []
        """Every word timed so far (requests with timings)."""
        self._items = items
        self._first: bytes | Words = b""

    async def start(self) -> None:
        """Wait for the first audio, so that a failure to load or start is still an error status."""
        self._first = await until_disconnected(self.ctx, anext(self._items, b""))

    async def events(self) -> AsyncGenerator[bytes | Words, None]:
        """PCM pieces and, after each chunk's audio, its word timings, as they are made; closing this early cancels
        the synthesis before its next step."""
        try:
            if self._first:
                yield self._first
            async for item in self._items:
                yield item
        finally:
            await self._items.aclose()

    def headers(self, fmt: AudioFormat) -> dict[str, str]:
        return {
            "X-Sample-Rate": str(codec_sample_rate(fmt, self.plan.engine.sample_rate)),
            "X-Audio-Format": "s16le" if fmt == "pcm" else fmt,
            "X-Channels": "1",
            "X-Engine": self.plan.engine.name,
            "X-Voice-Id": self.plan.voice_key,
            "X-Cache": self.timings.cache,
        }

    def pcm(self) -> AsyncGenerator[bytes, None]:
        """s16le PCM as it is generated (word timings go to `words`); closing it early cancels the synthesis."""
        return self._audio(self.events())

    def encoded(self, fmt: AudioFormat | Output) -> AsyncGenerator[bytes, None]:
        """The audio in `fmt` as it is generated (see `encoded_events`; word timings go to `words`)."""
        return self._audio(self.encoded_events(fmt))

    async def _audio(self, items: AsyncGenerator[bytes | Words, None]) -> AsyncGenerator[bytes, None]:
        async with contextlib.aclosing(items) as events:
            async for item in events:
                if isinstance(item, Words):
                    self.words += item.words
                else:
                    yield item

    async def encoded_events(self, fmt: AudioFormat | Output) -> AsyncGenerator[bytes | Words, None]:
        """The audio in `fmt` (a native format, or a front's `Output`: another rate, sample encoding or bit rate) as
        it is generated, and word timings after each chunk's audio: one encoder for the response, fed each piece as
        it comes. Codecs run on a worker thread a slice at a time, so encoding overlaps synthesis and never holds
        the event loop."""
        rate = self.plan.engine.sample_rate
        encoder = open_output(fmt, rate) if isinstance(fmt, Output) else open_encoder(fmt, rate)
        threaded = encoder.threaded
        try:
            if header := encoder.feed(b""):  # a container's header leaves at once
                yield header
            async with contextlib.aclosing(self.events()) as events:
                async for item in events:
                    if isinstance(item, Words):
                        yield item
                        continue
                    slices = encoder.feed_sliced(item)
                    while out := await asyncio.to_thread(next, slices, None) if threaded else next(slices, None):
                        yield out
            if tail := encoder.finish():
                yield tail
        finally:
            encoder.close()

    async def read(self, fmt: AudioFormat) -> bytes:
        """The whole answer in `fmt` (a WAV with its exact length); a client that goes away first cancels it."""

        async def collect() -> bytes:
            return b"".join([piece async for piece in self.pcm()])

        pcm = await until_disconnected(self.ctx, collect())
        if fmt in ("pcm", "wav"):
            return encode_whole(fmt, pcm, self.plan.engine.sample_rate)
        return await asyncio.to_thread(encode_whole, fmt, pcm, self.plan.engine.sample_rate)
