"""What the fair queue reports (/health, /admin/scheduler, /metrics): its jobs by state and engine, refusals, stream
capacity and speed per engine, per key rows (at most `max_key_labels` of them), and the weights and bounds it
applies."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from gpu.queue_state import KeyState, QueueState
from gpu.scheduling_settings import SchedulingSettings

OTHER_KEYS = "(other)"
"""The row under which keys beyond `max_key_labels`, and rejected keys that have no state, are summed."""
SHOWN_AS = {
    "fairness_default_weight": "default_weight",
    "fairness_weights": "weights",
    "retry_after_seconds": "retry_after",
}
"""Scheduling settings that /admin/scheduler shows under other names (the fair queue's own, from before the settings
were declared once)."""


def stats(state: QueueState) -> dict[str, Any]:
    """The queue now: running and waiting jobs in all and per engine, refusals, streams and each engine's speed."""
    every = state.admitted()
    jobs = [j for j in every if not j.detached and not j.awaiting_input]
    engines = sorted({j.engine for j in jobs} | set(state.rejected_by_engine))
    streams = [j for j in jobs if j.is_stream and j.chars_left()]
    return {
        "running": sum(j.started_at is not None for j in jobs),
        "waiting": sum(j.started_at is None for j in jobs),
        "detached": sum(j.detached for j in every),
        "awaiting_text": sum(j.awaiting_input and not j.detached for j in every),
        "queued_chars": sum(j.chars for j in jobs if j.started_at is None),
        "rejected": state.rejected_total,
        "rejected_by_code": dict(state.rejected_by_code),
        "engines": {
            engine: {
                "running": sum(j.engine == engine and j.started_at is not None for j in jobs),
                "waiting": sum(j.engine == engine and j.started_at is None for j in jobs),
                "rejected": state.rejected_by_engine[engine],
            }
            for engine in engines
        },
        "streams": {
            "admitted": len(streams),
            "promised_audio_s": round(
                sum(sum(j.chars_left()) * state.speed(j.engine).audio_s_per_char for j in streams), 3
            ),
            "underrun_s": {e: round(state.underrun_s.get(e, 0), 6) for e in sorted({*state.speeds, *state.underrun_s})},
            "underruns": {e: state.underruns[e] for e in sorted({*state.speeds, *state.underruns})},
            "speed": {
                engine: {
                    "gpu_s_per_audio_s": round(speed.real_time_factor, 4),
                    "audio_s_per_char": round(speed.audio_s_per_char, 5),
                    "steps_at_once": (pool := state.pool(engine)).lanes,
                    "slowdown": [round(factor, 3) for factor in pool.slowdown],
                    "capacity": round(pool.capacity, 3),
                }
                for engine, speed in state.speeds.items()
                if speed.known
            },
        },
        "keys": _key_rows(state),
    }


def _key_rows(state: QueueState) -> dict[str, dict[str, Any]]:
    """Per key rows, at most `max_key_labels` of them (busiest, then most used); the rest summed."""

    def row(key: KeyState, weight: float | None) -> dict[str, Any]:
        held = [j for j in key.jobs if not j.detached and not j.awaiting_input]
        return {
            "running": sum(j.started_at is not None for j in held),
            "waiting": sum(j.started_at is None for j in held),
            "weight": weight,
            "used_gpu_s": round(key.used, 6),
            "rejected": key.rejected,
        }

    ranked = sorted(state.keys.items(), key=lambda kv: (-len(kv[1].jobs), -kv[1].used, kv[0]))
    cap = state.settings.max_key_labels
    rows = {name: row(key, state.settings.weight(name)) for name, key in ranked[:cap]}
    rest = [row(key, None) for _, key in ranked[cap:]]
    if rest or state.rejected_untracked:
        rows[OTHER_KEYS] = {
            "running": sum(r["running"] for r in rest),
            "waiting": sum(r["waiting"] for r in rest),
            "weight": None,
            "used_gpu_s": round(sum(r["used_gpu_s"] for r in rest), 6),
            "rejected": sum(r["rejected"] for r in rest) + state.rejected_untracked,
        }
    return rows


def policy(settings: SchedulingSettings, shared_keys: Collection[str]) -> dict[str, Any]:
    """The weights and bounds the queue applies, as /admin/scheduler shows them: every scheduling setting (three
    under their older, shorter names) and the keys that unrelated clients share."""
    values = settings.model_dump(include=set(SchedulingSettings.model_fields))
    return {
        **{SHOWN_AS.get(name, name): value for name, value in values.items()},
        "shared_keys": frozenset(shared_keys),
    }
