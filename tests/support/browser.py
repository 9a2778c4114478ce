"""Browser tests' plumbing: Debian's Chromium driven by Playwright (no browser download), console watching, waiting
for the page.

The tests skip, saying how to install it, where /usr/bin/chromium is absent (`apt-get install -y chromium`; CI's
.ci/run does it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, ViewportSize, sync_playwright

from tests.support.polling import wait_until

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
LAPTOP: ViewportSize = {"width": 1366, "height": 800}
PHONE: ViewportSize = {"width": 390, "height": 844}

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
    # A fake microphone (a beep) that needs no permission prompt, for the recording test.
    "--use-fake-device-for-media-stream",
    "--use-fake-ui-for-media-stream",
]


@contextmanager
def chromium() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.skip(
            f"browser tests need Chromium at {CHROMIUM}: `apt-get install -y chromium` (Debian/Ubuntu) and run again; "
            "Playwright drives it through executable_path, no browser download"
        )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


class Console:
    """Every console error and uncaught exception of a page, for the test to assert there were none."""

    def __init__(self, page: Page) -> None:
        self.errors: list[str] = []
        page.on("console", self._on_console)
        page.on("pageerror", lambda error: self.errors.append(f"uncaught: {error}"))

    def _on_console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(f"{message.text} ({message.location.get('url', '')})")

    def unexpected(self, *allowed: str) -> list[str]:
        """The errors that contain none of the `allowed` fragments."""
        return [e for e in self.errors if not any(fragment in e for fragment in allowed)]


def wait_for_js(page: Page, expression: str, timeout: float = 120.0) -> Any:
    """Poll a JavaScript expression until it is truthy, and return its value (through evaluate: the page's CSP
    forbids the eval that Playwright's wait_for_function uses)."""
    return wait_until(lambda: page.evaluate(expression), timeout, f"`{expression}` in the page")


def screenshot(page: Page, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
