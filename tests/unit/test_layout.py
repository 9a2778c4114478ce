"""The layout holds: engines never reach the service's settings, backends import leaf modules, settings.py is
on no import cycle, and nothing below the web layer imports it or a web framework.

Every project module's imports are read from its source (ast): top-level ones, those under `TYPE_CHECKING` and
those inside functions alike, since each is a dependency a reader has to follow.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIPPED = {"voices", "cache", "data", "deploy", "playground", "__pycache__"}
"""Folders at the top that hold no project code (data, configuration, static files)."""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def project_modules() -> dict[str, Path]:
    """Every Python module of the project by its dotted name, virtual environments and data folders left out."""
    modules: dict[str, Path] = {}
    for path in ROOT.rglob("*.py"):
        top = path.relative_to(ROOT).parts[0]
        if top.startswith(".") or top in SKIPPED or "__pycache__" in path.parts:
            continue
        modules[module_name(path)] = path
    return modules


def imported(name: str) -> Iterator[tuple[str, list[str]]]:
    """(module, names) for each import statement of module `name`, relative ones resolved; `names` is what a
    `from ... import` takes (empty for a plain `import`)."""
    path = project_modules()[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield base, [alias.name for alias in node.names]


@cache
def import_graph(packages: bool) -> dict[str, frozenset[str]]:
    """Project module -> the project modules it imports: the named module and each submodule a `from package
    import name` takes; with `packages`, also each package above a named module (Python runs those first)."""
    modules = project_modules()
    graph: dict[str, frozenset[str]] = {}
    for name in modules:
        targets: set[str] = set()
        for module, names in imported(name):
            candidates = [module, *(f"{module}.{n}" for n in names)]
            if packages:
                parts = module.split(".")
                candidates += [".".join(parts[:depth]) for depth in range(1, len(parts))]
            targets.update(c for c in candidates if c in modules and c != name)
        graph[name] = frozenset(targets)
    return graph


def path_between(start: str, goal: str, packages: bool = True) -> list[str] | None:
    """A shortest import chain from `start` to `goal` (both included), or None."""
    graph, previous = import_graph(packages), {start: start}
    frontier = [start]
    while frontier:
        following = []
        for module in frontier:
            for target in sorted(graph[module]):
                if target == goal:
                    chain = [goal, module]
                    while chain[-1] != start:
                        chain.append(previous[chain[-1]])
                    return chain[::-1]
                if target not in previous:
                    previous[target] = module
                    following.append(target)
        frontier = following
    return None


def engine_modules() -> list[str]:
    return sorted(name for name in project_modules() if name == "engines" or name.startswith("engines."))


def test_no_engine_module_imports_the_service_settings() -> None:
    offenders = [
        f"{name} imports {module}"
        for name in engine_modules()
        for module, _ in imported(name)
        if module == "settings" or module.startswith("settings.")
    ]
    assert not offenders, "engines receive their own settings and an EngineContext, never settings.py: " + "; ".join(
        offenders
    )


def test_backends_never_import_their_parent_package() -> None:
    """A module of an engine family imports the family's leaf modules by name, never what the package's __init__
    holds (which would run it, and tie the module to the whole family)."""
    modules = project_modules()
    offenders = []
    for name in engine_modules():
        package = name.rpartition(".")[0]
        if package.count(".") != 1 or modules[name].name == "__init__.py":
            continue  # only the modules inside a family package (engines/<family>/<module>.py)
        for module, names in imported(name):
            if module == package and any(f"{package}.{n}" not in modules for n in names or ["*"]):
                offenders.append(f"{name}: from {module} import {', '.join(names) or '(the package)'}")
    assert not offenders, "; ".join(offenders)


def test_no_import_cycle_among_the_engine_modules() -> None:
    """Backends and engines import downwards only: the engine builds its backends, a backend never imports the
    engine. (The packages above a module, which Python imports first, do not count here: every module is below
    `engines`, whose __init__ lists the families.)"""
    cycles = {" -> ".join(chain) for name in engine_modules() if (chain := path_between(name, name, packages=False))}
    assert not cycles, "; ".join(sorted(cycles))


def test_settings_is_on_no_import_cycle() -> None:
    assert "settings" in project_modules()
    chain = path_between("settings", "settings")
    assert chain is None, "settings.py is on an import cycle: " + " -> ".join(chain or [])


WEB_FRAMEWORKS = ("fastapi", "starlette")
BELOW_THE_WEB = ("lifecycle", "gpu", "text", "audio", "voicebank", "engines", "jobs", "lexicons")
"""Packages the web layer builds on: none of them may import it, or a web framework."""


def test_only_the_web_layer_imports_the_web_frameworks_or_the_web_package() -> None:
    offenders = []
    for name in project_modules():
        if name.split(".")[0] not in BELOW_THE_WEB:
            continue
        for module, _ in imported(name):
            top = module.split(".")[0]
            if top in WEB_FRAMEWORKS or top == "web":
                offenders.append(f"{name} imports {module}")
    assert not offenders, "\n".join(offenders)


def test_live_text_and_the_lifecycle_are_on_no_import_cycle() -> None:
    for name in ("text.live_text", "lifecycle.synthesis"):
        cycle = path_between(name, name)
        assert cycle is None, " -> ".join(cycle)


def modules_of(*packages: str) -> list[str]:
    """The project modules inside these top-level packages (the packages themselves included)."""
    return sorted(name for name in project_modules() if name.split(".")[0] in packages)


def test_the_gpu_layer_never_imports_the_lifecycle_or_the_web_layer() -> None:
    """gpu/ sits below the lifecycle: what it measures it hands up (stats read at scrape time, a callback per
    engine load), never by importing lifecycle.metrics."""
    offenders = [
        f"{name} imports {module}"
        for name in modules_of("gpu")
        for module, _ in imported(name)
        if module.split(".")[0] in ("lifecycle", "web")
    ]
    assert not offenders, "\n".join(offenders)


def test_engines_never_import_the_gpu_layer_or_the_lifecycle() -> None:
    """The engines sit below gpu/ (whose pool builds them): device plumbing they need is `engines.device`."""
    offenders = [
        f"{name} imports {module}"
        for name in engine_modules()
        for module, _ in imported(name)
        if module.split(".")[0] in ("gpu", "lifecycle")
    ]
    assert not offenders, "\n".join(offenders)


FAIR_QUEUE_INSIDES = (
    "gpu.fairness",
    "gpu.queue_state",
    "gpu.admission",
    "gpu.retry_line",
    "gpu.ordering",
    "gpu.slow_readers",
    "gpu.queue_stats",
)
"""The fair queue and its parts: the scheduler (`gpu.scheduler.Scheduler`) drives the queue; above gpu/ nothing
reaches inside (tests do)."""
FAIR_QUEUE = ("gpu.scheduler", "gpu.scheduling_settings", *FAIR_QUEUE_INSIDES)


def test_only_the_gpu_layer_reaches_inside_the_fair_queue() -> None:
    assert set(FAIR_QUEUE) <= set(project_modules())
    offenders = [
        f"{name} imports {module} {' '.join(names)}".rstrip()
        for name in project_modules()
        if name.split(".")[0] not in ("gpu", "tests")
        for module, names in imported(name)
        if module in FAIR_QUEUE_INSIDES or any(f"{module}.{n}" in FAIR_QUEUE_INSIDES for n in names)
    ]
    assert not offenders, "\n".join(offenders)


def test_the_fair_queue_reads_its_own_settings_only() -> None:
    """The queue and the scheduler take `SchedulingSettings`, never the service's whole settings.py."""
    offenders = [
        f"{name} imports {module}" for name in FAIR_QUEUE for module, _ in imported(name) if module == "settings"
    ]
    assert not offenders, "\n".join(offenders)


def test_the_scheduling_settings_are_declared_once_and_composed_into_the_service_settings() -> None:
    from gpu.scheduling_settings import SchedulingSettings
    from settings import Settings

    assert issubclass(Settings, SchedulingSettings)
    for name, field in SchedulingSettings.model_fields.items():
        composed = Settings.model_fields.get(name)
        assert composed is not None, f"{name} is not a setting of Settings"
        assert (composed.default, composed.metadata) == (field.default, field.metadata), name
        declaring = [cls.__qualname__ for cls in Settings.__mro__ if name in cls.__dict__.get("__annotations__", {})]
        assert declaring == ["SchedulingSettings"], f"{name} is declared by {declaring}"


def family_packages() -> set[str]:
    """The engine family packages (`engines/<family>/`), whatever families there are."""
    return {
        name
        for name, path in project_modules().items()
        if name.startswith("engines.") and name.count(".") == 1 and path.name == "__init__.py"
    }


EXERCISE_FAMILIES = ("tests", "bench")
"""Code that exercises a family itself (its tests, its benchmarks) imports it by name; the service never does."""


def test_no_module_outside_engines_imports_an_engine_family_package() -> None:
    """What the service needs of a family it reads from the family's `EngineSpec` (`engines.FAMILIES`): only
    `engines`, `engines.base` and the modules families share are imported from outside engines/."""
    families = family_packages()
    assert "engines.kokoro" in families
    offenders = []
    for name in project_modules():
        if name.split(".")[0] in ("engines", *EXERCISE_FAMILIES):
            continue
        for module, names in imported(name):
            reached = {module, *(f"{module}.{n}" for n in names)}
            if any(target == family or target.startswith(family + ".") for target in reached for family in families):
                offenders.append(f"{name} imports {module}")
    assert not offenders, "\n".join(offenders)


MAX_MODULE_LINES = 400
"""A module of the lifecycle or the voice bank longer than this holds more than one idea: split it by idea."""


def test_the_lifecycle_and_the_voice_bank_stay_split_by_idea() -> None:
    modules = project_modules()
    long = {
        name: lines
        for name, path in modules.items()
        if name.split(".")[0] in ("lifecycle", "voicebank")
        and (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"over {MAX_MODULE_LINES} lines: {long}"
    # The service and the registry are composed of their parts; the parts live in modules of their own.
    for name, only in (("lifecycle.synthesis", "SynthesisService"), ("voicebank.registry", "VoiceRegistry")):
        tree = ast.parse(modules[name].read_text(encoding="utf-8"))
        classes = [node.name for node in tree.body if isinstance(node, ast.ClassDef)]
        assert classes == [only], f"{name} defines {classes}; it holds {only} alone"


def test_no_module_of_the_lifecycle_the_voice_bank_or_text_is_on_an_import_cycle() -> None:
    cycles = {
        " -> ".join(chain)
        for name in project_modules()
        if name.split(".")[0] in ("lifecycle", "voicebank", "text") and (chain := path_between(name, name))
    }
    assert not cycles, "; ".join(sorted(cycles))


CLEANING = "text.cleaning"
SPEECH_PATHS = {"lifecycle.plan": ("Planner", "plan"), "text.live_text": ("LiveText", "add")}
"""Where text enters a synthesis: the whole text of a request, and each piece of a live request's text."""


def cleans_text(node: ast.AST) -> bool:
    """Whether the source of `node` holds the cleaning itself: a lone-surrogate test, or the format category."""
    for constant in ast.walk(node):
        if isinstance(constant, ast.Constant) and isinstance(constant.value, str):
            if constant.value == "Cf" or any("\ud800" <= char <= "\udfff" for char in constant.value):
                return True
    return False


def test_input_cleaning_is_one_function_every_speech_path_calls() -> None:
    """`text.cleaning` is the only module that refuses lone surrogates or drops format characters, and both ways text
    enters a synthesis call its `clean_text`: every route's text is cleaned the same way, the live ones' too."""
    modules = project_modules()
    elsewhere = [
        name
        for name, path in modules.items()
        if name != CLEANING
        and name.split(".")[0] != "tests"
        and cleans_text(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert not elsewhere, f"text is cleaned outside {CLEANING}: {elsewhere}"
    for name, (owner, method) in SPEECH_PATHS.items():
        tree = ast.parse(modules[name].read_text(encoding="utf-8"))
        (cls,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == owner]
        (function,) = [
            node
            for node in cls.body
            if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef) and node.name == method
        ]
        calls = {
            call.func.id
            for call in ast.walk(function)
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
        }
        assert "clean_text" in calls, f"{name}.{owner}.{method} does not clean its text ({CLEANING}.clean_text)"
        assert (CLEANING, ["clean_text"]) in list(imported(name)), f"{name} takes clean_text from elsewhere"


FRONTS_PACKAGE = "web.fronts"
SHARED_FRONT_CODE = "web.fronts.shared"
"""What the fronts share; it is no front, and imports none."""


def front_packages() -> list[str]:
    """Each front's package: every package right under web/fronts/ but the shared code."""
    folder = ROOT / "web" / "fronts"
    packages = [f"{FRONTS_PACKAGE}.{path.parent.name}" for path in folder.glob("*/__init__.py")]
    return sorted(package for package in packages if package != SHARED_FRONT_CODE)


def fronts_imported(name: str) -> set[str]:
    """The packages of web.fronts that module `name` imports: a front's, the shared code's, or the list itself
    (`web.fronts`, for `from web.fronts import FRONTS`)."""
    packages = [*front_packages(), SHARED_FRONT_CODE]
    found = set()
    for module, names in imported(name):
        for target in [module, *(f"{module}.{n}" for n in names)]:
            owner = next((p for p in packages if target == p or target.startswith(p + ".")), None)
            if owner is not None:
                found.add(owner)
            elif target == FRONTS_PACKAGE:
                found.add(FRONTS_PACKAGE)
    return found


def test_a_front_never_imports_another_front() -> None:
    """What two fronts share lives in web.fronts.shared, which imports no front."""
    fronts = front_packages()
    assert {"web.fronts.native", "web.fronts.openai", "web.fronts.elevenlabs", "web.fronts.cartesia"} <= set(fronts)
    offenders = []
    for name in project_modules():
        owner = next((p for p in [*fronts, SHARED_FRONT_CODE] if name == p or name.startswith(p + ".")), None)
        if owner is None:
            continue
        others = {package for package in fronts_imported(name) if package not in (owner, SHARED_FRONT_CODE)}
        offenders += [f"{name} imports {package}" for package in sorted(others)]
    assert not offenders, "\n".join(offenders)


def test_only_the_app_factory_and_the_tests_import_the_fronts_from_outside_the_fronts() -> None:
    """The modules of web/ beside the fronts (errors, API docs, keys, redaction, middleware, the other routes) are
    given the fronts by the app factory and name none; the app factory (web/app.py) imports the list, FRONTS, and no
    front itself."""
    offenders = []
    for name in project_modules():
        if name == FRONTS_PACKAGE or name.startswith(FRONTS_PACKAGE + ".") or name.split(".")[0] == "tests":
            continue
        allowed = {FRONTS_PACKAGE} if name == "web.app" else set()
        offenders += [f"{name} imports {package}" for package in sorted(fronts_imported(name) - allowed)]
    assert not offenders, "\n".join(offenders)


def test_every_front_package_is_in_the_list_of_fronts_once() -> None:
    """A front is mounted, documented and answered in its error shape only through FRONTS: a package left out of
    it would serve nothing. Each front is named after its package."""
    from web.fronts import FRONTS

    listed = [f"{FRONTS_PACKAGE}.{front.name}" for front in FRONTS]
    assert sorted(listed) == front_packages()
    assert [front.prefix for front in FRONTS].count("") == 1, "one front, the native API, is at the root"
