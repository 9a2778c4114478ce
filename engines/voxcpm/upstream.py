"""Import the `voxcpm` package whether or not torchaudio can be imported.

`import voxcpm` imports torchaudio at module top (voxcpm/model/voxcpm.py, the VoxCPM 1.x model that `voxcpm.core`
always imports), but only the 1.x model and the ZipEnhancer denoiser ever call it. The VoxCPM2 inference path reads
prompt and reference audio with librosa and decodes with its own VAE, so it never touches torchaudio; when torchaudio
is missing or broken, a stub stands in for it (engines/import_stubs.py).
"""

from __future__ import annotations

import importlib
import types

from engines.import_stubs import stub_if_missing


def import_voxcpm() -> types.ModuleType:
    """Import and return the `voxcpm` package, standing in a stub for a missing or broken torchaudio."""
    stub_if_missing("torchaudio", "the VoxCPM2 inference path does not use it")
    return importlib.import_module("voxcpm")
