"""HTTP Range (RFC 9110, one range of bytes) over a file or bytes in memory: 206 with `Content-Range`, the whole
with 200 when no range is asked for (or one this server does not serve: several, or another unit), and 416
`range_not_satisfiable` for a range outside it."""

from __future__ import annotations

import re
from collections.abc import Iterator

from fastapi.responses import Response, StreamingResponse

from errors import RangeNotSatisfiable

READ_SLICE = 256 * 1024
_ONE_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The (first, last) byte `header` asks for, inclusive; None for the whole file."""
    if not header:
        return None
    match = _ONE_RANGE.fullmatch(header.strip())
    if match is None or not any(match.groups()):
        return None  # several ranges or another unit: the whole file answers (RFC 9110 allows it)
    first, last = match.groups()
    if not first:  # the last `last` bytes
        length = int(last)
        if not length or not size:
            raise RangeNotSatisfiable(f"no bytes in the last {length} of a file of {size}", size=size)
        return max(0, size - length), size - 1
    start = int(first)
    end = min(int(last), size - 1) if last else size - 1
    if start >= size or end < start:
        raise RangeNotSatisfiable(f"bytes {header.strip()[6:]} lie outside a file of {size} bytes", size=size)
    return start, end


def _headers(span: tuple[int, int] | None, size: int) -> dict[str, str]:
    headers = {"Accept-Ranges": "bytes"}
    if span is not None:
        headers["Content-Range"] = f"bytes {span[0]}-{span[1]}/{size}"
    headers["Content-Length"] = str(size if span is None else span[1] - span[0] + 1)
    return headers


def ranged_file(path: str, size: int, header: str | None, media_type: str) -> Response:
    """The file at `path` (`size` bytes), or the range of it `header` asks for."""
    span = byte_range(header, size)
    first, last = span if span is not None else (0, size - 1)

    def read() -> Iterator[bytes]:
        with open(path, "rb") as f:
            f.seek(first)
            left = last - first + 1
            while left > 0 and (data := f.read(min(READ_SLICE, left))):
                left -= len(data)
                yield data

    status = 200 if span is None else 206
    return StreamingResponse(read(), status_code=status, media_type=media_type, headers=_headers(span, size))


def ranged_bytes(data: bytes, header: str | None, media_type: str) -> Response:
    """`data`, or the range of it `header` asks for."""
    span = byte_range(header, len(data))
    body = data if span is None else data[span[0] : span[1] + 1]
    status = 200 if span is None else 206
    return Response(body, status_code=status, media_type=media_type, headers=_headers(span, len(data)))
