"""What every probe shares: a server under probe, a probe's answer and outcome, expectations."""

from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.common import PROBE, SIXTY_WORDS

MB = 1 << 20
API_KEY = "abuse-probe-key"
SENTENCE = "The cache entry is checked before it is served."
LONG_TEXT = " ".join([SIXTY_WORDS] * 3)
OTHER_CLIENT = "127.0.0.2"
"""Another loopback address: to the server, another client."""


class ProbeFailed(Exception):
    """An expectation that did not hold; its message says what was seen."""


@dataclass(frozen=True)
class Answer:
    status: str
    """What the server answered, in short (`401`, `413 x7, 503 x3`, `200 miss`)."""
    detail: str = ""


@dataclass
class Outcome:
    server: str
    probe: str
    status: str = "-"
    seconds: float = 0.0
    rss_mb: float | None = None
    peak_mb: float | None = None
    ok: bool | None = None
    """None: skipped."""
    detail: str = ""


@dataclass
class Target:
    """A server under probe: where it answers, its process (when on this machine) and its files (when known)."""

    name: str
    url: str
    pid: int | None
    api_key: str | None = None
    cache_dir: Path | None = None
    log_path: Path | None = None
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=120, headers=self.auth, **kwargs)

    def probe(
        self, name: str, run: Callable[[], Answer], skip: str | None = None, max_peak_mb: float | None = None
    ) -> None:
        """Run one probe, timed and with the server's memory read around it (its peak held to `max_peak_mb` where
        it can be read); print its line."""
        outcome = Outcome(self.name, name)
        if skip:
            outcome.detail = f"skipped: {skip}"
        else:
            before = self.memory(reset_peak=True)
            started = time.perf_counter()
            try:
                answer = run()
                outcome.status, outcome.detail, outcome.ok = answer.status, answer.detail, True
            except ProbeFailed as exc:
                outcome.ok, outcome.detail = False, str(exc)
            except (httpx.HTTPError, OSError, ValueError, KeyError) as exc:
                outcome.ok, outcome.detail = False, f"{type(exc).__name__}: {exc}"
            outcome.seconds = time.perf_counter() - started
            after = self.memory(reset_peak=False)
            if before and after:
                outcome.rss_mb = (after["VmRSS"] - before["VmRSS"]) / 1024
                outcome.peak_mb = (after["VmHWM"] - before["VmRSS"]) / 1024
                if outcome.ok and max_peak_mb is not None and outcome.peak_mb > max_peak_mb:
                    outcome.ok = False
                    outcome.detail += f"; memory peaked {outcome.peak_mb:.0f} MB up, over the {max_peak_mb:.0f} allowed"
        self.outcomes.append(outcome)
        sys.stderr.write(line(outcome) + "\n")

    def memory(self, reset_peak: bool) -> dict[str, int] | None:
        """VmRSS and VmHWM of the server process in kB; `reset_peak` first sets VmHWM back to VmRSS."""
        if self.pid is None:
            return None
        try:
            if reset_peak:
                with contextlib.suppress(OSError):
                    Path(f"/proc/{self.pid}/clear_refs").write_text("5")
            status = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return None
        found = {key: re.search(rf"{key}:\s+(\d+) kB", status) for key in ("VmRSS", "VmHWM")}
        return {key: int(match[1]) for key, match in found.items() if match}

    def log_says(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""


def requests_total(url: str, route: str, outcome: str) -> float:
    """polytts_requests_total of a route's requests with an outcome at the server `url`, summed over engines
    (/metrics is public)."""
    total = 0.0
    for family in text_string_to_metric_families(PROBE.get(url + "/metrics", timeout=30).text):
        for sample in family.samples:
            found = sample.labels.get("route"), sample.labels.get("outcome")
            if sample.name == "polytts_requests_total" and found == (route, outcome):
                total += sample.value
    return total


def expect(condition: bool, seen: str) -> None:
    if not condition:
        raise ProbeFailed(seen)


def code_of(response: httpx.Response) -> str:
    with contextlib.suppress(ValueError, AttributeError):
        return str(response.json().get("code", ""))
    return ""


def short(response: httpx.Response) -> str:
    return f"{response.status_code} {code_of(response)}".strip()


def no_tracebacks(target: Target) -> Answer:
    said = target.log_says()
    expect("Traceback" not in said, "a traceback in the server's log: " + said[said.find("Traceback") :][:300])
    return Answer("-", f"{len(said.splitlines())} lines logged")


def line(outcome: Outcome) -> str:
    verdict = {True: "ok", False: "FAIL", None: "skip"}[outcome.ok]
    rss = "" if outcome.rss_mb is None else f"rss {outcome.rss_mb:+7.1f} MB  peak {outcome.peak_mb:+7.1f} MB"
    return (
        f"{verdict:<4} {outcome.server:<8} {outcome.probe:<46} {outcome.status:<22} {outcome.seconds:6.2f} s  "
        f"{rss:<34} {outcome.detail}"
    )
