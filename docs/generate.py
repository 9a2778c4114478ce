"""Writes the references of docs/ that are declared once in code: `settings.md` from the docstrings of the
settings (`settings.Settings` as composed: the service's own, the fair queue's and each engine family's), `errors.md`
from `errors.ERRORS`.

    python -m docs.generate           # rewrite them
    python -m docs.generate --check   # exit 1 when one is stale

The unit tests run the check, so a setting or an error code changed without its reference fails them.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import logging
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import annotated_types
from pydantic import AliasChoices
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

from engines import ENGINE_SPECS
from engines.base import ENV_PREFIX
from errors import ERRORS
from gpu.scheduling_settings import SchedulingSettings
from jobs.job_settings import JobSettings
from settings import PROJECT_ROOT, Settings

log = logging.getLogger("polytts.docs")

DOCS = Path(__file__).resolve().parent
REFRESH = "python -m docs.generate"
WIDTH = 120
_MIB = 1024 * 1024


def _notice(source: str) -> str:
    return f"<!-- Generated from {source} by `{REFRESH}`: edit those, then run it; not this file. -->"


# --- settings ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Source:
    """What the source of one field says that its `FieldInfo` does not."""

    annotation: str
    """Its type as written, for a reader."""
    doc: str | None
    factory: str | None
    """The default factory as written (`socket.gethostname`), if it has one."""


def _field_sources(cls: type) -> dict[str, _Source]:
    """Each field `cls` declares itself, read from the class's source."""
    (tree,) = ast.parse(textwrap.dedent(inspect.getsource(cls))).body
    assert isinstance(tree, ast.ClassDef)
    found = {}
    for statement, after in zip(tree.body, [*tree.body[1:], None], strict=True):
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            doc = None
            if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                doc = inspect.cleandoc(str(after.value.value))
            keywords = statement.value.keywords if isinstance(statement.value, ast.Call) else []
            factory = next((ast.unparse(kw.value) for kw in keywords if kw.arg == "default_factory"), None)
            found[statement.target.id] = _Source(_annotation(statement.annotation), doc, factory)
    return found


def _prose(text: str) -> str:
    """Text of a docstring as Markdown on one line: `<` outside code spans is a character, not a tag."""
    spans = " ".join(text.split()).split("`")
    return "`".join(span if index % 2 else span.replace("<", "&lt;") for index, span in enumerate(spans))


def _annotation(node: ast.expr) -> str:
    """A field's type as a reader sets it: `Annotated[...]` unwrapped, a `Literal` as its choices."""
    if isinstance(node, ast.Subscript) and ast.unparse(node.value) == "Annotated":
        assert isinstance(node.slice, ast.Tuple)
        return _annotation(node.slice.elts[0])
    if isinstance(node, ast.Subscript) and ast.unparse(node.value) == "Literal":
        choices = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return "one of " + ", ".join(f"`{ast.literal_eval(choice)}`" for choice in choices)
    return f"`{ast.unparse(node)}`"


def _variables(name: str, field: FieldInfo) -> list[str]:
    """The environment variables a field reads: its alias (or aliases) where it has one, else POLYTTS_<NAME>."""
    alias = field.validation_alias
    if isinstance(alias, str):
        return [alias.upper()]
    if isinstance(alias, AliasChoices):
        return [choice.upper() for choice in alias.choices if isinstance(choice, str)]
    return [f"{ENV_PREFIX}{name.upper()}"]


def _default(field: FieldInfo, factory: str | None) -> str:
    if field.default_factory is not None:
        return f"`{factory}()`"
    value = field.default
    if value is PydanticUndefined:
        return "none (required)"
    if value is None:
        return "unset"
    if isinstance(value, Path):
        shown = f"<checkout>/{value.relative_to(PROJECT_ROOT)}" if value.is_relative_to(PROJECT_ROOT) else value
        return f"`{shown}`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    if isinstance(value, int) and value >= _MIB and value % _MIB == 0:
        return f"`{value}` ({value // _MIB} MiB)"
    if isinstance(value, str):
        return f"`{value}`" if value else "empty"
    if isinstance(value, dict | list):
        return f"`{json.dumps(value)}`"
    return f"`{value}`"


_BOUNDS: dict[type, tuple[str, str]] = {
    annotated_types.Ge: ("ge", "at least"),
    annotated_types.Gt: ("gt", "above"),
    annotated_types.Le: ("le", "at most"),
    annotated_types.Lt: ("lt", "below"),
}


def _bounds(field: FieldInfo) -> list[str]:
    found = []
    for constraint in field.metadata:
        if type(constraint) in _BOUNDS:
            attribute, words = _BOUNDS[type(constraint)]
            found.append(f"{words} {getattr(constraint, attribute):_}".replace("_", ","))
    return found


def _declaring_classes(settings: type[BaseSettings]) -> Iterator[tuple[type, list[str]]]:
    """Each class of `settings`' bases that declares fields, in its order, with the fields it declares."""
    fields = settings.model_fields
    claimed: set[str] = set()
    for cls in settings.__mro__:
        own = [name for name in cls.__dict__.get("__annotations__", {}) if name in fields and name not in claimed]
        claimed.update(own)
        if own:
            yield cls, own


def _section_title(cls: type) -> str:
    """Named by the engine families whose settings compose `cls` (one, or several that share a variable), else the
    scheduling's or the service's."""
    families = [f"`{spec.family}`" for spec in ENGINE_SPECS if issubclass(spec.settings, cls)]
    what = (
        "Scheduling"
        if cls is SchedulingSettings
        else "Jobs"
        if cls is JobSettings
        else "The service"
        if not families
        else f"Engine {families[0]}"
        if len(families) == 1
        else "Engines " + " and ".join(families)
    )
    return f"## {what}: `{cls.__module__}.{cls.__qualname__}`"


def settings_reference(settings: type[BaseSettings] = Settings) -> str:
    """docs/settings.md: every field of `settings`, grouped by the class that declares it."""
    lines = [
        _notice(
            "the settings' docstrings (settings.py, gpu/scheduling_settings.py and each engine family's settings class)"
        ),
        "",
        "# Settings",
        "",
        *_wrap(
            f"Every setting is an environment variable, `{ENV_PREFIX}<FIELD>` (case-insensitive). An invalid value stops "
            "the server at start (exit 2) with a message naming the variable. JSON values (objects, lists) are written "
            "as JSON; a list may also be comma-separated where its entry says so."
        ),
    ]
    for cls, names in _declaring_classes(settings):
        sources = _field_sources(cls)
        lines += ["", _section_title(cls), "", *_wrap(_prose(inspect.cleandoc(cls.__doc__ or ""))), ""]
        for name in names:
            source = sources[name]
            if source.doc is None:
                raise ValueError(f"{cls.__qualname__}.{name} has no docstring: say what it does")
            field = settings.model_fields[name]
            variables = ", ".join(f"`{variable}`" for variable in _variables(name, field))
            facts = ", ".join([source.annotation, *_bounds(field), f"default {_default(field, source.factory)}"])
            lines += _wrap(f"- **{variables}** ({facts}). {_prose(source.doc)}", indent="  ")
    return "\n".join(lines) + "\n"


def _wrap(text: str, indent: str = "") -> list[str]:
    return textwrap.wrap(text, WIDTH, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False)


# --- error codes ---------------------------------------------------------------------------------------------------


def errors_reference() -> str:
    """docs/errors.md: every error code with its status and meaning, by status."""
    lines = [
        _notice("`errors.ERRORS`"),
        "",
        "# Error codes",
        "",
        *_wrap(
            'Every error answers `{"code", "message", "detail"?}` (on `/v1/` routes OpenAI\'s `{"error": {"message", '
            '"type", "param", "code"}}`, with the same statuses and codes); the code is stable and machine-readable. '
            "429 and 503 carry `Retry-After`. The same codes are the `outcome` of `polytts_requests_total`, and the "
            '`code` of a live WebSocket\'s `{"type": "error"}` message.'
        ),
        "",
        "| code | status | meaning |",
        "|---|---|---|",
    ]
    for code, entry in sorted(ERRORS.items(), key=lambda item: item[1].status or 1000):
        status = entry.status if entry.status is not None else "the framework's"
        meaning = entry.meaning.replace("|", r"\|")
        lines.append(f"| `{code}` | {status} | {meaning} |")
    return "\n".join(lines) + "\n"


GENERATED: dict[str, Callable[[], str]] = {"settings.md": settings_reference, "errors.md": errors_reference}
"""Each generated file of docs/ and what writes it."""


def stale() -> list[str]:
    """The generated files whose content is not what their source gives now."""
    return [name for name, make in GENERATED.items() if _read(DOCS / name) != make()]


def _read(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.is_file() else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=REFRESH, description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file is stale")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.check:
        outdated = stale()
        for name in outdated:
            log.error("docs/%s is stale: run %s", name, REFRESH)
        return 1 if outdated else 0
    for name, make in GENERATED.items():
        (DOCS / name).write_text(make(), encoding="utf-8")
        log.info("wrote docs/%s", name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
