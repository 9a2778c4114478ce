"""The browser playground: static files (HTML, CSS, ES modules, an AudioWorklet) at /ui/, no build step, no CDN.

Every URL the page uses is relative, so it works under a path prefix behind a proxy as well as at the root.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from web.routes.static_files import StaticFolder

PLAYGROUND_DIR = Path(__file__).resolve().parents[2] / "playground"

# The page may talk only to this service: no third-party script, style, font or connection can load.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; connect-src 'self'; media-src 'self' blob:; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

# The file names carry no content hash, so a browser revalidates each one (a cheap 304) and an upgraded server's
# page never mixes with a cached old script.
_files = StaticFolder(
    PLAYGROUND_DIR, cache_control="no-cache", headers={"Content-Security-Policy": CONTENT_SECURITY_POLICY}
)

router = APIRouter(include_in_schema=False)


@router.get("/")
async def root() -> RedirectResponse:
    return RedirectResponse("ui/", status_code=307)


@router.get("/ui")
async def ui_without_slash() -> RedirectResponse:
    return RedirectResponse("ui/", status_code=307)


@router.api_route("/ui/", methods=["GET", "HEAD"])
async def page(request: Request) -> Response:
    return await _files.get_response("index.html", request.scope)


@router.api_route("/ui/{name}", methods=["GET", "HEAD"])
async def asset(request: Request, name: str) -> Response:
    return await _files.get_response(name, request.scope)
