"""Swagger UI at /docs and ReDoc at /redoc load fully offline: every asset from this server, none from another host."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Browser, Route

from tests.support.browser import LAPTOP, Console, chromium, wait_until
from tests.support.servers import ServerProcess

ASSET_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".png": "image/png"}


def assets(html: str) -> list[str]:
    return re.findall(r'(?:src|href)="([^"]+)"', html)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_reference_only_assets_this_server_serves(client: httpx.Client, page: str) -> None:
    response = client.get(page)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    html = response.text
    assert re.findall(r"https?://", html) == [], "a docs page must not name another host"
    referenced = assets(html)
    assert any(url.endswith(".js") for url in referenced)
    for url in referenced:
        assert url.startswith("/docs/assets/"), url
        asset = client.get(url)
        assert asset.status_code == 200, url
        assert asset.headers["content-type"] == ASSET_TYPES[url[url.rindex(".") :]], url
        assert asset.headers["cache-control"] == "public, max-age=31536000, immutable"  # versioned URLs
        assert len(asset.content) > 1000, url
    assert "/openapi.json" in html


def test_swagger_ui_oauth2_redirect_and_unknown_assets(client: httpx.Client) -> None:
    assert client.get("/docs/oauth2-redirect").status_code == 200
    missing = client.get(re.sub(r"/[^/]+$", "/missing.js", assets(client.get("/docs").text)[0]))
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as b:
        yield b


# ReDoc 2.x's sidebar footer ("API docs by Redocly") shows this logo, unconditionally; it hides the image itself
# when the load fails, as it does offline. Nothing else may be asked of another host.
REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"


@pytest.mark.parametrize(
    ("page", "rendered", "decorative"),
    [
        ("/docs", "document.querySelectorAll('.swagger-ui .opblock').length", []),
        ("/redoc", "document.querySelectorAll('[data-section-id]').length", [REDOC_LOGO]),
    ],
)
def test_docs_render_in_a_browser_with_every_other_host_blocked(
    browser: Browser, server: ServerProcess, page: str, rendered: str, decorative: list[str]
) -> None:
    context = browser.new_context(viewport=LAPTOP)
    elsewhere: list[str] = []

    def block(route: Route) -> None:
        elsewhere.append(route.request.url)
        route.abort()

    context.route(re.compile(rf"^(?!{re.escape(server.url)}/).*"), block)
    tab = context.new_page()
    console = Console(tab)
    tab.goto(server.url + page)
    assert wait_until(tab, rendered, timeout=60) > 0
    assert "/tts/stream" in tab.inner_text("body")
    assert [url for url in elsewhere if url not in decorative] == []
    blocked_load = ("net::ERR_FAILED",) if decorative else ()  # how Chromium logs the blocked logo
    assert console.unexpected(*blocked_load) == []
    context.close()
