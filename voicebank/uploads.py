"""Streaming multipart/form-data reading with per-part size limits and a memory budget shared by all uploads.

Starlette's form parser spools every file before the route runs; this reader counts bytes as they arrive and
refuses an oversized part at once (413), so a client cannot make the server take in more than the limits. Bodies held
in memory by every upload together are counted against one `UploadBudget`: past it, an upload is refused with 503 and
`Retry-After` before it is read. A body that is not well-formed multipart is a 400 `malformed_multipart`.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

from errors import BadRequest, InvalidInput, PayloadTooLarge, ServiceError, Unavailable
from voicebank.voice_entry import excerpt

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks  # declared for type checkers only

# Above any real file name (most file systems stop at 255 bytes), far below a memory concern.
MAX_FILENAME_CHARS = 1024
# One header line of a part (Content-Disposition with its file name): a few hundred bytes in practice. Longer is a
# 400 `malformed_multipart` from the parser, before the line is kept in memory.
MAX_PART_HEADER_BYTES = 16 * 1024


class Body(Protocol):
    """A request body as it arrives (a Starlette `Request` is one). The web layer passes it; a client that leaves
    mid-way ends `stream()` with `ClientDisconnected`."""

    @property
    def headers(self) -> Mapping[str, str]: ...

    def stream(self) -> AsyncIterator[bytes]: ...


class UnsupportedMediaType(ServiceError):
    code = "unsupported_media_type"


class UploadBudget:
    """Bytes of request bodies that all uploads together may hold in memory at once.

    An upload reserves its declared size before reading, and grows the reservation as bytes arrive; a reservation
    that would pass the budget is refused with 503 `uploads_busy`, unless no other upload holds any (one upload
    alone is bounded by its own body limit, so a budget smaller than it never refuses every upload).
    """

    def __init__(self, total_bytes: int) -> None:
        if total_bytes < 0:
            raise ValueError(f"total_bytes must be >= 0, got {total_bytes}")
        self.total_bytes = total_bytes
        self._held = 0
        self._lock = threading.Lock()

    @property
    def held(self) -> int:
        return self._held

    def reservation(self) -> Reservation:
        """A reservation of nothing yet; use it as a context manager so it is released however the request ends."""
        return Reservation(self)

    def _grow(self, by: int, already: int) -> None:
        with self._lock:
            others = self._held - already
            if others > 0 and self._held + by > self.total_bytes:
                raise Unavailable(
                    f"the server is receiving {others} bytes of other uploads (budget {self.total_bytes}); "
                    "retry shortly",
                    code="uploads_busy",
                )
            self._held += by

    def _shrink(self, by: int) -> None:
        with self._lock:
            self._held -= by


class Reservation:
    """One upload's share of an `UploadBudget`."""

    def __init__(self, budget: UploadBudget) -> None:
        self._budget = budget
        self._bytes = 0

    def cover(self, size: int) -> None:
        """Hold at least `size` bytes (503 `uploads_busy` if the budget cannot give them)."""
        if size > self._bytes:
            self._budget._grow(size - self._bytes, self._bytes)
            self._bytes = size

    def release(self) -> None:
        self._budget._shrink(self._bytes)
        self._bytes = 0

    def __enter__(self) -> Reservation:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.release()


@dataclass
class FormPart:
    name: str
    filename: str | None
    data: bytearray = field(default_factory=bytearray)

    def text(self) -> str:
        try:
            return self.data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput(f"form field {self.name!r} is not valid UTF-8", code="invalid_field") from exc


def _malformed(why: str) -> BadRequest:
    return BadRequest(f"the body is not well-formed multipart/form-data: {why}", code="malformed_multipart")


class _FormReader:
    """MultipartParser callbacks that collect parts and enforce the limits while data streams in."""

    def __init__(self, file_limit: int, field_limit: int, max_parts: int) -> None:
        self.file_limit = file_limit
        self.field_limit = field_limit
        self.max_parts = max_parts
        self.parts: dict[str, FormPart] = {}
        self.ended = False
        self._part: FormPart | None = None
        self._header_field = bytearray()
        self._header_value = bytearray()
        self._headers: dict[bytes, bytes] = {}

    def callbacks(self) -> MultipartCallbacks:
        return {
            "on_part_begin": self._on_part_begin,
            "on_header_field": lambda data, start, end: self._header_field.extend(data[start:end]),
            "on_header_value": lambda data, start, end: self._header_value.extend(data[start:end]),
            "on_header_end": self._on_header_end,
            "on_headers_finished": self._on_headers_finished,
            "on_part_data": self._on_part_data,
            "on_part_end": self._on_part_end,
            "on_end": self._on_end,
        }

    def _on_part_begin(self) -> None:
        self._headers = {}

    def _on_header_end(self) -> None:
        self._headers[bytes(self._header_field).lower()] = bytes(self._header_value)
        self._header_field.clear()
        self._header_value.clear()

    def _on_headers_finished(self) -> None:
        _, options = parse_options_header(self._headers.get(b"content-disposition", b""))
        name = options.get(b"name", b"").decode("utf-8", "replace")
        raw_filename = options.get(b"filename")
        if not name:
            raise _malformed("a part has no Content-Disposition name")
        if name in self.parts:
            raise InvalidInput(f"form field {excerpt(name)!r} is given more than once", code="duplicate_field")
        if len(self.parts) >= self.max_parts:
            raise PayloadTooLarge(f"too many form parts (limit {self.max_parts})", code="too_many_parts")
        filename = raw_filename.decode("utf-8", "replace") if raw_filename is not None else None
        # Refused, not cut: the name is only used for its suffix, and no real file has a name this long, so a client
        # sending one is broken and should hear so.
        if filename is not None and len(filename) > MAX_FILENAME_CHARS:
            raise BadRequest(
                f"the file name of form field {excerpt(name)!r} is {len(filename)} characters; "
                f"at most {MAX_FILENAME_CHARS} are accepted",
                code="filename_too_long",
            )
        self._part = FormPart(name, filename)

    def _on_part_data(self, data: bytes, start: int, end: int) -> None:
        part = self._part
        if part is None:
            raise _malformed("part data before its headers")
        part.data.extend(data[start:end])
        limit = self.file_limit if part.filename is not None else self.field_limit
        if len(part.data) > limit:
            kind, code = ("file", "file_too_large") if part.filename is not None else ("field", "field_too_large")
            raise PayloadTooLarge(f"form {kind} {part.name!r} is larger than {limit} bytes", code=code)

    def _on_part_end(self) -> None:
        if self._part is not None:
            self.parts[self._part.name] = self._part
            self._part = None

    def _on_end(self) -> None:
        self.ended = True


async def read_form(
    request: Body,
    *,
    file_limit: int,
    field_limit: int = 64 * 1024,
    max_parts: int = 16,
    reservation: Reservation | None = None,
) -> dict[str, FormPart]:
    """Read a multipart body part by part, refusing it (413) as soon as any part passes its limit.

    With a `reservation`, the body's bytes are counted against its budget as they arrive (503 `uploads_busy` past
    it); the caller releases it once it no longer holds the parts (`with budget.reservation() as held: ...`).
    """
    content_type, options = parse_options_header(request.headers.get("content-type"))
    boundary = options.get(b"boundary")
    if content_type != b"multipart/form-data" or not boundary:
        raise UnsupportedMediaType("expected a multipart/form-data body", code="expected_multipart")
    declared = request.headers.get("content-length")
    body_limit = 2 * file_limit + max_parts * field_limit
    declared_size = int(declared) if declared and declared.isdigit() else None
    if declared_size is not None and declared_size > body_limit:
        raise PayloadTooLarge(f"request body is larger than {body_limit} bytes", code="body_too_large")
    if reservation is not None and declared_size is not None:
        reservation.cover(declared_size)
    reader = _FormReader(file_limit, field_limit, max_parts)
    parser = MultipartParser(boundary, reader.callbacks(), max_header_size=MAX_PART_HEADER_BYTES)
    try:
        async for chunk in _bounded(request, body_limit, reservation):
            parser.write(chunk)
        parser.finalize()
    except MultipartParseError as exc:
        raise _malformed(f"{exc} (does the body use the boundary its Content-Type names?)") from None
    if not reader.ended:
        raise _malformed("it ends before its closing boundary")
    return reader.parts


async def read_body(request: Body, limit: int, reservation: Reservation | None = None) -> bytes:
    """A whole (non-multipart) upload body, refused (413) as soon as it passes `limit`, counted against the budget."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body is larger than {limit} bytes", code="body_too_large")
    return b"".join([chunk async for chunk in _bounded(request, limit, reservation)])


async def _bounded(request: Body, limit: int, reservation: Reservation | None) -> AsyncIterator[bytes]:
    """The body's chunks as they arrive, refused (413) past `limit`; each counted against the reservation first."""
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > limit:
            raise PayloadTooLarge(f"request body is larger than {limit} bytes", code="body_too_large")
        if reservation is not None:
            reservation.cover(received)
        yield chunk
