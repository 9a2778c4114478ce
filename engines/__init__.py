"""The engine families this service knows, whether or not this node can run them.

Voices are portable: a registration names a family, and a node that cannot run it still stores the voice.

What each family package holds (`engines/<family>/`):

- `config.py`: the family's node settings (an `EngineSettings`: its `POLYTTS_*` variables) and the parameters a
  request may set (an `EngineParams`);
- `engine.py`: the `Engine`, its `build(settings, context)`, which gets the family's own settings and an
  `EngineContext` (what it reads of the service's settings), never the service's whole `Settings`, and the `SPEC`
  that declares the family;
- its other modules (backends, voice packs, the import of an upstream package), which import the family's leaf
  modules (`config.py`, Kokoro's `backend.py`, VoxCPM's `prompts.py`), never `engine.py` or the package.

What families share sits in one module each here: base.py (the interfaces), device.py (which device models run
on, what it holds, giving its cached memory back, and whether a step runs beside others), hub.py (weights from a
folder or the hub), artefacts.py (per-voice files on disk), cloning.py (taking a voice as a registered clip),
blends.py (the formula that names a blend of voices), lockstep.py (the lock-step thread bridge), mlx_base.py (what
every mlx-audio engine shares), g2p.py (text to phonemes) and import_stubs.py (stand-ins for modules a package
imports but never uses). They import nothing of the service above the engines (gpu/, lifecycle/, web/,
settings.py): the GPU layer builds on them. What the rest of the service needs of a family it reads from the
family's `EngineSpec` (a family whose voices are style packs declares what a pack is there: `EngineSpec.packs`); no
module outside engines/ imports a family package.

Adding a family touches: its package (`__init__.py`, `config.py`, `engine.py` and any backends), one entry in
ENGINE_SPECS below, its requirements (requirements-*.txt) and its tests (tests/unit/test_<family>.py). settings.py
composes the service's `Settings` from every family's settings class, so it needs no edit.
"""

from __future__ import annotations

from typing import Any

from engines.base import EngineSpec
from engines.cosyvoice import engine as cosyvoice
from engines.dots import engine as dots
from engines.kokoro import engine as kokoro
from engines.qwen import engine as qwen
from engines.voxcpm import engine as voxcpm

ENGINE_SPECS: tuple[EngineSpec[Any], ...] = (kokoro.SPEC, voxcpm.SPEC, qwen.SPEC, dots.SPEC, cosyvoice.SPEC)
FAMILIES: dict[str, EngineSpec[Any]] = {spec.family: spec for spec in ENGINE_SPECS}
