"""Prometheus metrics (`GET /metrics`): request outcomes and timings as they happen, queue and residency state read
from the scheduler and the model manager at scrape time.

Label values stay bounded: engines, admission codes, route templates and statuses are fixed sets (a path no route
takes is counted under `(none)`, never by its path), and the scheduler lists at most `max_key_labels` fairness keys
(the rest summed under `(other)`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _StateCollector(Collector):
    """Gauges and counters that are read from live state when Prometheus scrapes."""

    def __init__(self, queue_stats: Callable[[], dict[str, Any]], manager_status: Callable[[], dict[str, Any]]) -> None:
        self.queue_stats = queue_stats
        self.manager_status = manager_status

    def collect(self) -> Iterator[Metric]:
        stats = self.queue_stats()
        depth = GaugeMetricFamily(
            "polytts_queue_depth", "Admitted syntheses per engine and state", labels=["engine", "state"]
        )
        for engine, counts in stats["engines"].items():
            depth.add_metric([engine, "running"], counts["running"])
            depth.add_metric([engine, "waiting"], counts["waiting"])
        yield depth
        streams = stats["streams"]
        underrun = CounterMetricFamily(
            "polytts_stream_underrun_seconds",
            "Time listeners playing streams in real time waited for audio",
            labels=["engine"],
        )
        underruns = CounterMetricFamily("polytts_stream_underruns", "Times a stream ran dry", labels=["engine"])
        for engine, seconds in streams["underrun_s"].items():
            underrun.add_metric([engine], seconds)
            underruns.add_metric([engine], streams["underruns"].get(engine, 0))
        yield underrun
        yield underruns
        speed = GaugeMetricFamily(
            "polytts_engine_gpu_seconds_per_audio_second",
            "Measured speed of each engine (recent steps)",
            labels=["engine"],
        )
        for engine, measured in streams["speed"].items():
            speed.add_metric([engine], measured["gpu_s_per_audio_s"])
        yield speed
        yield GaugeMetricFamily(
            "polytts_streams_admitted", "Streams admitted and still generating", value=streams["admitted"]
        )
        yield GaugeMetricFamily(
            "polytts_responses_detached",
            "Responses whose readers fell behind real time (holding no slot)",
            value=stats["detached"],
        )
        rejected = CounterMetricFamily("polytts_admission_rejections", "Requests refused at admission", labels=["code"])
        for code, count in stats["rejected_by_code"].items():
            rejected.add_metric([code], count)
        yield rejected
        units = self.manager_status()["units"]
        resident = GaugeMetricFamily("polytts_engine_resident", "1 when the engine is loaded", labels=["engine"])
        loads = CounterMetricFamily("polytts_engine_loads", "Engine loads", labels=["engine"])
        evictions = CounterMetricFamily(
            "polytts_engine_evictions", "Engine unloads (idle, evicted, operator)", labels=["engine"]
        )
        for name, unit in units.items():
            resident.add_metric([name], 1 if unit["resident"] else 0)
            loads.add_metric([name], unit["loads"])
            evictions.add_metric([name], unit["evictions"])
        yield resident
        yield loads
        yield evictions


class _JobCollector(Collector):
    """Background jobs (jobs/), read from the job table when Prometheus scrapes."""

    STATES = ("queued", "running", "done", "failed", "cancelled")

    def __init__(self, job_stats: Callable[[], dict[str, Any]]) -> None:
        self.job_stats = job_stats

    def collect(self) -> Iterator[Metric]:
        stats = self.job_stats()
        jobs = GaugeMetricFamily("polytts_jobs", "Jobs this node holds, by state", labels=["state"])
        for state in self.STATES:
            jobs.add_metric([state], stats["by_state"].get(state, 0))
        yield jobs
        yield GaugeMetricFamily("polytts_job_queue_depth", "Jobs queued or running on this node", value=stats["active"])
        yield GaugeMetricFamily(
            "polytts_job_chars_waiting", "Characters of jobs still to synthesize", value=stats["chars_waiting"]
        )
        yield GaugeMetricFamily(
            "polytts_job_chars_per_second",
            "Characters of job text synthesized per second of job work (measured; 0 until a piece is made)",
            value=stats["chars_per_s"] or 0.0,
        )


class _KeyCollector(Collector):
    """Per fairness key queue depth and GPU time: series labelled by key names, which only callers with a key see."""

    def __init__(self, queue_stats: Callable[[], dict[str, Any]]) -> None:
        self.queue_stats = queue_stats

    def collect(self) -> Iterator[Metric]:
        keys = GaugeMetricFamily("polytts_key_queue_depth", "Admitted syntheses per fairness key", labels=["key"])
        used = CounterMetricFamily("polytts_key_gpu_seconds", "GPU time used per fairness key", labels=["key"])
        for key, counts in self.queue_stats()["keys"].items():
            keys.add_metric([key], counts["running"] + counts["waiting"])
            used.add_metric([key], counts["used_gpu_s"])
        yield keys
        yield used


class Metrics:
    """Every metric, in two registries: the full one, and the public one without the per-key series (what a caller
    without a key sees on a node with keys)."""

    def __init__(
        self,
        queue_stats: Callable[[], dict[str, Any]],
        manager_status: Callable[[], dict[str, Any]],
        job_stats: Callable[[], dict[str, Any]],
    ) -> None:
        self.requests = Counter(
            "polytts_requests",
            "Synthesis requests by engine, route and outcome",
            ["engine", "route", "outcome"],
            registry=None,
        )
        self.http_requests = Counter(
            "polytts_http_requests",
            "Requests other than syntheses by route template ((none): no route took it) and status",
            ["route", "status"],
            registry=None,
        )
        self.time_to_first_audio = Histogram(
            "polytts_time_to_first_audio_seconds",
            "From request to its first audio",
            ["engine"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32),
            registry=None,
        )
        self.real_time_factor = Histogram(
            "polytts_real_time_factor",
            "Synthesis time over audio duration",
            ["engine"],
            buckets=(0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 4),
            registry=None,
        )
        self.load_seconds = Histogram(
            "polytts_engine_load_seconds",
            "Engine load durations",
            ["engine"],
            buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120),
            registry=None,
        )
        self.cache = Counter("polytts_cache_lookups", "Synthesis cache lookups", ["result"], registry=None)
        shared: list[Collector] = [
            self.requests,
            self.http_requests,
            self.time_to_first_audio,
            self.real_time_factor,
            self.load_seconds,
            self.cache,
            _StateCollector(queue_stats, manager_status),
            _JobCollector(job_stats),
        ]
        self.registry = CollectorRegistry()
        self.public_registry = CollectorRegistry()
        for collector in shared:
            self.registry.register(collector)
            self.public_registry.register(collector)
        self.registry.register(_KeyCollector(queue_stats))

    def engine_loaded(self, engine: str, seconds: float) -> None:
        """An engine loaded in `seconds` (the engine pool reports each load here)."""
        self.load_seconds.labels(engine).observe(seconds)

    def render(self, per_key: bool = True) -> bytes:
        """The exposition text; without `per_key`, the series labelled by fairness key (key names) are left out."""
        return generate_latest(self.registry if per_key else self.public_registry)
