"""Tests of engines/device.py: torch is asked about a GPU only where one may exist, giving cached device memory back
touches only the frameworks already imported, and each step on a thread says whether it runs beside others."""

from __future__ import annotations

import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest

from engines import device


def _torch_seeing_cuda(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A stand-in for torch that sees CUDA and notes each time it is asked."""
    asked: list[str] = []

    def is_available() -> bool:
        asked.append("cuda")
        return True

    cuda = types.SimpleNamespace(is_available=is_available)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    monkeypatch.setattr(device, "torch_installed", lambda: True)
    monkeypatch.setattr(sys, "platform", "linux")
    return asked


def test_a_linux_host_without_gpu_device_nodes_is_not_asked_about(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    asked = _torch_seeing_cuda(monkeypatch)
    monkeypatch.setattr(device, "GPU_DEVICE_NODES", (str(tmp_path / "nvidiactl"), str(tmp_path / "kfd")))
    assert device.torch_accelerator() is None and asked == []
    with pytest.raises(device.RuntimeRefused, match="has no GPU device"):
        device.check_runtime("cuda", allow_cpu=False)
    (tmp_path / "kfd").touch()  # a ROCm host: torch decides
    assert device.torch_accelerator() == "cuda" and asked == ["cuda"]


def test_macos_is_always_asked_about(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    asked = _torch_seeing_cuda(monkeypatch)
    monkeypatch.setattr(device, "GPU_DEVICE_NODES", (str(tmp_path / "nvidiactl"),))
    monkeypatch.setattr(sys, "platform", "darwin")
    assert device.torch_accelerator() == "cuda" and asked == ["cuda"]


def test_torch_is_imported_to_ask_only_where_a_gpu_may_exist() -> None:
    # A fresh interpreter, as a server process starts (torch is installed in the test environment): on a CPU host
    # such as CI's, choosing the device leaves torch unimported.
    check = (
        "import sys; from engines import device; device.torch_accelerator(); "
        "sys.exit(('torch' in sys.modules) != device.gpu_may_exist())"
    )
    result = subprocess.run([sys.executable, "-c", check], cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0


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
