"""Tests of engines/device.py: giving cached device memory back touches only the frameworks already imported, and
each step on a thread says whether it runs beside others."""

from __future__ import annotations

import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest

from engines import device


def test_free_cuda_does_not_import_torch() -> None:
    # A fresh interpreter: other tests in this process import torch on purpose.
    check = "import sys; from engines import device; device.free_cuda(); sys.exit('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", check], cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0


def test_free_cuda_uses_already_imported_torch_and_mlx(monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[str] = []
    cuda = types.SimpleNamespace(
        is_available=lambda: True,
        empty_cache=lambda: used.append("empty_cache"),
        ipc_collect=lambda: used.append("ipc_collect"),
    )
    mx = types.SimpleNamespace(clear_cache=lambda: used.append("mx.clear_cache"))
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    monkeypatch.setitem(sys.modules, "mlx.core", mx)
    device.free_cuda()
    assert used == ["empty_cache", "ipc_collect", "mx.clear_cache"]


def test_a_step_says_whether_it_runs_beside_others_on_its_own_thread_only() -> None:
    assert not device.step_runs_beside()  # outside a step
    seen: list[bool] = []
    with device.running_step(beside=True):
        assert device.step_runs_beside()
        other = threading.Thread(target=lambda: seen.append(device.step_runs_beside()))
        other.start()
        other.join()
        with device.running_step(beside=False):
            assert not device.step_runs_beside()
        assert device.step_runs_beside()  # the outer step's again
    assert not device.step_runs_beside() and seen == [False]
