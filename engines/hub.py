"""Model weights from a local folder or the hub cache, without ever waiting on an unreachable hub.

A hub id is looked up in the standard hub cache first; it is downloaded only when the hub answers. Offline (the
hub's offline mode, or its host unreachable within a few seconds, DNS included) a missing model is a clear load
failure at once, never a hang on a network timeout.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
from pathlib import Path
from urllib.parse import urlparse

from engines.artefacts import model_key
from engines.base import EngineLoadError

log = logging.getLogger("polytts.engines.hub")

HUB_PROBE_SECONDS = 3.0


def hub_reachable(timeout: float = HUB_PROBE_SECONDS) -> bool:
    """False when the hub's offline mode is set or its host cannot be reached within `timeout` (DNS included)."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    reached = threading.Event()

    def probe() -> None:
        try:
            with socket.create_connection((host, 443), timeout=timeout):
                reached.set()
        except OSError:
            pass

    # getaddrinfo has no timeout of its own, so the probe runs where it can be abandoned.
    threading.Thread(target=probe, name="polytts-hub-probe", daemon=True).start()
    return reached.wait(timeout)


def resolve_model_folder(model: str, patterns: list[str], setting: str) -> Path:
    """A local folder as is; a hub id from the hub cache, downloading (only `patterns`) when the hub is reachable.

    `setting` names the environment variable that chose `model`, for the error messages.
    """
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    if model.startswith(("/", ".", "~")) or model.count("/") != 1:
        raise EngineLoadError(f"model folder {model} does not exist ({setting})")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(model, allow_patterns=patterns, local_files_only=True))
    except Exception:  # not cached (the hub library raises several kinds)
        if not hub_reachable():
            raise EngineLoadError(
                f"weights {model} are not in the hub cache and the hub cannot be reached (offline); "
                f"set {setting} to a local folder"
            ) from None
    log.info("downloading %s from the hub", model)
    try:
        return Path(snapshot_download(model, allow_patterns=patterns))
    except Exception as exc:  # any download failure is a load failure with its reason
        raise EngineLoadError(f"could not download {model}: {exc}") from exc


def weights_revision(folder: Path, weights: list[Path]) -> str:
    """What identifies loaded weights in cache keys: a hub snapshot's commit, else the sha256 of the first weights
    file, else "unknown"."""
    return snapshot_revision(folder) or (file_sha256(weights[0]) if weights else "unknown")


def snapshot_revision(folder: Path) -> str | None:
    """The commit a hub snapshot folder is named by, or None for a plain local folder."""
    return folder.name if folder.parent.name == "snapshots" else None


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


class HubModel:
    """What every engine whose weights are a model named by a setting (a local folder or a hub id) shares: the folder
    it resolves to, the checkpoint it last loaded, the bytes it holds, and the key its voices' prepared prompts are
    kept under on disk."""

    setting: str
    """The POLYTTS_* variable that names the model, for the errors."""
    hub_files: list[str]
    """The files a download of it takes from the hub."""
    model_ref: str
    _checkpoint: str | None = None
    _footprint = 0

    @property
    def checkpoint(self) -> str | None:
        return self._checkpoint

    @property
    def footprint(self) -> int:
        return self._footprint

    @property
    def model_key(self) -> str:
        return model_key(self._checkpoint or self.model_ref)

    def preflight(self) -> None:
        self.model_folder()

    def model_folder(self) -> Path:
        return resolve_model_folder(self.model_ref, self.hub_files, self.setting)
