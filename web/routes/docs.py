"""Swagger UI at /docs and ReDoc at /redoc, loading nothing from another host.

Their assets come from the pinned `fastapi-offline` package (Swagger UI's bundle and CSS, ReDoc's standalone
bundle); only its files are used, not its app class. The app is created with `docs_url=None, redoc_url=None`.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse, Response

from web.routes.static_files import StaticFolder


def _assets_dir() -> Path:
    spec = importlib.util.find_spec("fastapi_offline")  # located, not imported: only its static files are used
    if spec is None or spec.origin is None:
        raise RuntimeError("fastapi-offline is not installed (pip install -r requirements.txt)")
    return Path(spec.origin).parent / "static"


# The version is part of the asset URLs, so the files can be cached for good: a new version is a new URL.
ASSETS_VERSION = importlib.metadata.version("fastapi-offline")
ASSETS_PATH = f"/docs/assets/{ASSETS_VERSION}"
_assets = StaticFolder(_assets_dir(), cache_control="public, max-age=31536000, immutable")

router = APIRouter(include_in_schema=False)


def _url(request: Request, path: str) -> str:
    """`path` under the app's root path (a proxy's prefix): every URL in the pages."""
    return str(request.scope.get("root_path", "")).rstrip("/") + path


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url=_url(request, request.app.openapi_url),
        title=f"{request.app.title} - Swagger UI",
        swagger_js_url=_url(request, f"{ASSETS_PATH}/swagger-ui-bundle.js"),
        swagger_css_url=_url(request, f"{ASSETS_PATH}/swagger-ui.css"),
        swagger_favicon_url=_url(request, f"{ASSETS_PATH}/favicon.png"),
        oauth2_redirect_url=_url(request, "/docs/oauth2-redirect"),
        # Swagger UI would otherwise send the schema to a public validator and show its badge.
        swagger_ui_parameters={"validatorUrl": None},
    )


@router.get("/docs/oauth2-redirect")
async def swagger_ui_oauth2_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    return get_redoc_html(
        openapi_url=_url(request, request.app.openapi_url),
        title=f"{request.app.title} - ReDoc",
        redoc_js_url=_url(request, f"{ASSETS_PATH}/redoc.standalone.js"),
        redoc_favicon_url=_url(request, f"{ASSETS_PATH}/favicon.png"),
        with_google_fonts=False,
    )


@router.api_route(ASSETS_PATH + "/{name}", methods=["GET", "HEAD"])
async def asset(request: Request, name: str) -> Response:
    return await _assets.get_response(name, request.scope)
