"""Streaming multipart/form-data reading with per-part size limits.

Starlette's form parser spools every file before the route runs; this reader counts bytes as they arrive and
refuses an oversized part at once (413), so a client cannot make the server take in more than the limits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request

from errors import InvalidInput, PayloadTooLarge, ServiceError


class UnsupportedMediaType(ServiceError):
    status = 415
    code = "unsupported_media_type"


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


class _FormReader:
    """MultipartParser callbacks that collect parts and enforce the limits while data streams in."""

    def __init__(self, file_limit: int, field_limit: int, max_parts: int) -> None:
        self.file_limit = file_limit
        self.field_limit = field_limit
        self.max_parts = max_parts
        self.parts: dict[str, FormPart] = {}
        self._part: FormPart | None = None
        self._header_field = bytearray()
        self._header_value = bytearray()
        self._headers: dict[bytes, bytes] = {}

    def callbacks(self) -> dict[str, object]:
        return {
            "on_part_begin": self._on_part_begin,
            "on_header_field": lambda data, start, end: self._header_field.extend(data[start:end]),
            "on_header_value": lambda data, start, end: self._header_value.extend(data[start:end]),
            "on_header_end": self._on_header_end,
            "on_headers_finished": self._on_headers_finished,
            "on_part_data": self._on_part_data,
            "on_part_end": self._on_part_end,
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
        filename = options.get(b"filename")
        if not name:
            raise InvalidInput("a form part has no name", code="invalid_form")
        if len(self.parts) >= self.max_parts:
            raise InvalidInput(f"too many form parts (limit {self.max_parts})", code="invalid_form")
        self._part = FormPart(name, filename.decode("utf-8", "replace") if filename is not None else None)

    def _on_part_data(self, data: bytes, start: int, end: int) -> None:
        part = self._part
        assert part is not None
        part.data.extend(data[start:end])
        limit = self.file_limit if part.filename is not None else self.field_limit
        if len(part.data) > limit:
            kind = "file" if part.filename is not None else "field"
            raise PayloadTooLarge(
                f"form {kind} {part.name!r} is larger than {limit} bytes", code=f"{kind}_too_large"
            )

    def _on_part_end(self) -> None:
        if self._part is not None:
            self.parts[self._part.name] = self._part
            self._part = None


async def read_form(
    request: Request, *, file_limit: int, field_limit: int = 64 * 1024, max_parts: int = 16
) -> dict[str, FormPart]:
    """Read a multipart body part by part, refusing it (413) as soon as any part passes its limit."""
    content_type, options = parse_options_header(request.headers.get("content-type"))
    boundary = options.get(b"boundary")
    if content_type != b"multipart/form-data" or not boundary:
        raise UnsupportedMediaType("expected a multipart/form-data body", code="expected_multipart")
    declared = request.headers.get("content-length")
    body_limit = 2 * file_limit + max_parts * field_limit
    if declared and declared.isdigit() and int(declared) > body_limit:
        raise PayloadTooLarge(f"request body is larger than {body_limit} bytes", code="body_too_large")
    reader = _FormReader(file_limit, field_limit, max_parts)
    parser = MultipartParser(boundary, reader.callbacks())  # type: ignore[arg-type]
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > body_limit:
            raise PayloadTooLarge(f"request body is larger than {body_limit} bytes", code="body_too_large")
        parser.write(chunk)
    parser.finalize()
    return reader.parts
