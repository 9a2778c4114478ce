"""HTTP/1.1 over a plain asyncio connection, for what httpx cannot do: read the response while the request body is
still being sent (httpx sends the whole body first). The live route answers audio while its text is arriving; a
server refusing a large body answers before the body has arrived.

    request = await DuplexRequest.open(url, "POST", "/tts/live", {"Content-Type": "application/x-ndjson"})
    await request.send(b'{"text": "Hello."}\n')          # one chunk of a chunked body
    head = await request.head()                           # status and headers, as soon as they come
    async for piece in request.body(): ...                # the response body as it arrives, de-chunked
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_HEAD_BYTES = 64 * 1024


@dataclass(frozen=True)
class Head:
    status: int
    headers: dict[str, str]
    """Names in lower case."""


class DuplexRequest:
    """One request on its own connection: its body sent piece by piece (chunked, unless a Content-Length was
    given), its response read at the same time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, chunked: bool) -> None:
        self._reader = reader
        self._writer = writer
        self._chunked = chunked
        self._head: asyncio.Task[Head] = asyncio.create_task(self._read_head())

    @classmethod
    async def open(
        cls,
        url: str,
        method: str,
        path: str,
        headers: Mapping[str, str] | None = None,
        content_length: int | None = None,
    ) -> DuplexRequest:
        """Connect to `url`'s host and send the request line and headers (the body is chunked without a length)."""
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        reader, writer = await asyncio.open_connection(host, port, limit=MAX_HEAD_BYTES)
        chunked = content_length is None
        framing = {"Transfer-Encoding": "chunked"} if chunked else {"Content-Length": str(content_length)}
        lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Connection: close"]
        lines += [f"{name}: {value}" for name, value in {**framing, **(headers or {})}.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        await writer.drain()
        return cls(reader, writer, chunked)

    async def send(self, data: bytes) -> None:
        """Send part of the body (and wait until the connection took it); ConnectionError once the server closed."""
        if self._chunked:
            if not data:
                return  # an empty chunk would end the body
            data = b"%x\r\n%s\r\n" % (len(data), data)
        self._writer.write(data)
        await self._writer.drain()

    async def end(self) -> None:
        """The end of a chunked body."""
        if self._chunked:
            self._writer.write(b"0\r\n\r\n")
            await self._writer.drain()

    async def head(self) -> Head:
        """The response's status and headers (waits for them)."""
        return await asyncio.shield(self._head)

    async def _read_head(self) -> Head:
        raw = await self._reader.readuntil(b"\r\n\r\n")
        status_line, *lines = raw.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        return Head(int(status_line.split()[1]), headers)

    async def body(self) -> AsyncIterator[bytes]:
        """The response body's pieces as they arrive: each chunk of a chunked response (a server write), else reads
        up to its Content-Length or the end of the connection."""
        head = await self.head()
        if head.headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int((await self._reader.readline()).split(b";")[0], 16)
                if size == 0:
                    while (await self._reader.readline()) not in (b"\r\n", b""):
                        pass  # trailers
                    return
                piece = await self._reader.readexactly(size)
                await self._reader.readexactly(2)
                yield piece
        remaining = int(head.headers["content-length"]) if "content-length" in head.headers else None
        while remaining is None or remaining > 0:
            piece = await self._reader.read(65536 if remaining is None else min(65536, remaining))
            if not piece:
                return
            if remaining is not None:
                remaining -= len(piece)
            yield piece

    async def read(self) -> bytes:
        """The whole response body."""
        return b"".join([piece async for piece in self.body()])

    async def close(self) -> None:
        self._head.cancel()
        self._writer.close()
        with contextlib.suppress(ConnectionError):
            await self._writer.wait_closed()
        await asyncio.gather(self._head, return_exceptions=True)

    async def __aenter__(self) -> DuplexRequest:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
