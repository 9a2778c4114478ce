"""Swagger UI at /docs and ReDoc at /redoc render in a browser fully offline: every asset from this server, none from
another host. (What the pages reference is checked in this process, in tests/http/test_openapi.py.)"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Route

from tests.support.browser import LAPTOP, Console, chromium, wait_for_js
from tests.support.servers import ServerProcess


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
    assert wait_for_js(tab, rendered, timeout=60) > 0
    assert "/tts/stream" in tab.inner_text("body")
    assert [url for url in elsewhere if url not in decorative] == []
    blocked_load = ("net::ERR_FAILED",) if decorative else ()  # how Chromium logs the blocked logo
    assert console.unexpected(*blocked_load) == []
    context.close()
