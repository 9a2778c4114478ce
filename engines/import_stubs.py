"""Stand-ins for modules a model package imports at its top although the inference path the service uses never
calls them.

Next to the CPU torch, the torchaudio wheel pip picks is a CUDA build whose import fails (`OSError: libc10_cuda.so:
cannot open shared object file`), so torchaudio is not installed; VoxCPM and qwen-tts import it (and qwen-tts also
pysox) for code the service never runs. Where such a module is missing or broken, a stub stands in for it so the
package imports; using anything from the stub raises a RuntimeError that says why, except the few things a caller
provides for real. A package whose `__init__` only re-exports tools the caller never uses can be entered without it.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import logging
import sys
import types
from collections.abc import Mapping

log = logging.getLogger("polytts.engines.import_stubs")


class MissingModule(types.ModuleType):
    """Stands in for a module: importable, but using anything from it raises a RuntimeError saying why."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(name, f"Stand-in for the missing module {name}: {why}")
        # A spec keeps importlib.util.find_spec(name) from raising ValueError on a module without one.
        self.__spec__ = importlib.machinery.ModuleSpec(name, None, origin=__name__)
        self.__dict__["_why"] = why

    def __getattr__(self, attribute: str) -> object:
        if attribute.startswith("__") and attribute.endswith("__"):
            # Dunder probes (`__path__` by the import system, `__file__` by inspect, `__version__` by
            # availability checks) must stay AttributeErrors, or hasattr() and getattr(..., default) blow up.
            raise AttributeError(attribute)
        raise RuntimeError(f"{self.__name__} is not installed (or failed to import); {self._why}: {attribute}")


def stub_if_missing(name: str, why: str, provides: Mapping[str, object] | None = None) -> None:
    """Import `name` and each of its parents; a stub stands in for each one that is missing or fails to import.

    `why` says why the caller does not need the real module (it is part of every error the stub raises).
    `provides`: what a stub for `name` itself answers for real, the few things the caller's path does use.
    """
    parts = name.split(".")
    for depth in range(1, len(parts) + 1):
        module = ".".join(parts[:depth])
        try:
            importlib.import_module(module)
        except (ImportError, OSError) as exc:
            _install_stub(module, why, exc)
    stub = sys.modules[name]
    if isinstance(stub, MissingModule):
        for attribute, value in (provides or {}).items():
            setattr(stub, attribute, value)


def without_init_if_broken(package: str, why: str) -> None:
    """Import `package`; when its `__init__` fails (it imports tools the caller never uses, `why`), enter the package
    without running it instead, so that its submodules still import as usual."""
    try:
        importlib.import_module(package)
        return
    except (ImportError, OSError) as exc:
        reason: BaseException = exc
    spec = importlib.util.find_spec(package)
    if spec is None or spec.submodule_search_locations is None:
        raise ModuleNotFoundError(f"no package {package}") from reason
    for leftover in [m for m in sys.modules if m.startswith(package + ".")]:
        del sys.modules[leftover]
    module = importlib.util.module_from_spec(spec)  # not executed: its __init__ is what fails
    sys.modules[package] = module
    parent, _, child = package.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
    log.info("%s entered without its __init__ (%s: %s): %s", package, type(reason).__name__, reason, why)


def _install_stub(name: str, why: str, reason: BaseException) -> None:
    # A half-imported package can leave submodules behind; drop them so only stubs answer.
    for leftover in [m for m in sys.modules if m.startswith(name + ".")]:
        del sys.modules[leftover]
    stub = MissingModule(name, why)
    sys.modules[name] = stub
    parent, _, child = name.rpartition(".")
    if parent:
        # `import a.b.c as d` reads the attributes a.b and a.b.c; a stub parent would raise instead.
        setattr(sys.modules[parent], child, stub)
    log.info("%s unavailable (%s: %s); using a stub: %s", name, type(reason).__name__, reason, why)
