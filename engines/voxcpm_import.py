"""Import the `voxcpm` package whether or not torchaudio can be imported.

`import voxcpm` imports torchaudio at module top (voxcpm/model/voxcpm.py, the VoxCPM 1.x model that `voxcpm.core`
always imports), but only the 1.x model and the ZipEnhancer denoiser ever call it. The VoxCPM2 inference path reads
prompt and reference audio with librosa and decodes with its own VAE, so it never touches torchaudio.

torchaudio is therefore not installed next to the CPU torch: the wheel pip picks for it there is a CUDA build whose
import fails (`OSError: libc10_cuda.so: cannot open shared object file`). When torchaudio is missing or broken, a
stub stands in for it so `import voxcpm` succeeds; any use of the stub raises a RuntimeError saying why.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import logging
import sys
import types

log = logging.getLogger("polytts.engines.voxcpm")


class _MissingTorchaudio(types.ModuleType):
    """Stands in for torchaudio: importable, but using anything from it raises a RuntimeError saying why."""

    def __getattr__(self, attribute: str) -> object:
        if attribute.startswith("__") and attribute.endswith("__"):
            # Dunder probes (`__path__` by the import system, `__file__` by inspect, `__version__` by
            # availability checks) must stay AttributeErrors, or hasattr() and getattr(..., default) blow up.
            raise AttributeError(attribute)
        raise RuntimeError(
            "torchaudio is not installed (or failed to import); the VoxCPM2 inference path does not use it: "
            f"{attribute}"
        )


def _install_torchaudio_stub(reason: BaseException) -> None:
    # A half-imported torchaudio can leave submodules behind; drop them so only the stub answers.
    for name in [name for name in sys.modules if name.startswith("torchaudio.")]:
        del sys.modules[name]
    stub = _MissingTorchaudio("torchaudio", __doc__)
    # A spec keeps importlib.util.find_spec("torchaudio") from raising ValueError on a module without one.
    stub.__spec__ = importlib.machinery.ModuleSpec("torchaudio", None, origin=__name__)
    sys.modules["torchaudio"] = stub
    log.info(
        "torchaudio unavailable (%s: %s); using a stub, the VoxCPM2 inference path does not use it",
        type(reason).__name__,
        reason,
    )


def import_voxcpm() -> types.ModuleType:
    """Import and return the `voxcpm` package, standing in a stub for a missing or broken torchaudio."""
    try:
        import torchaudio  # noqa: F401
    except (ImportError, OSError) as exc:
        _install_torchaudio_stub(exc)
    return importlib.import_module("voxcpm")
