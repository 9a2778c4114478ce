"""Files served as they lie on disk, with an explicit media type, a cache policy and ETag revalidation."""

from __future__ import annotations

import os
from pathlib import Path

from starlette.datastructures import Headers
from starlette.responses import FileResponse, Response
from starlette.staticfiles import NotModifiedResponse, StaticFiles
from starlette.types import Scope

# Explicit rather than guessed: `mimetypes` answers differently per host (/etc/mime.types, the Windows registry).
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}


class StaticFolder(StaticFiles):
    """A folder of static files (no listing, no path outside it) answered with one Cache-Control policy."""

    def __init__(self, directory: Path, cache_control: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(directory=directory)
        self.extra_headers = {"Cache-Control": cache_control, "X-Content-Type-Options": "nosniff", **(headers or {})}

    def file_response(
        self, full_path: str | os.PathLike[str], stat_result: os.stat_result, scope: Scope, status_code: int = 200
    ) -> Response:
        response = FileResponse(
            full_path,
            status_code=status_code,
            stat_result=stat_result,
            media_type=MEDIA_TYPES.get(Path(full_path).suffix),
            headers=self.extra_headers,
        )
        if self.is_not_modified(response.headers, Headers(scope=scope)):
            return NotModifiedResponse(response.headers)
        return response
