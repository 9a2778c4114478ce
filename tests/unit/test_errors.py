"""`errors.ERRORS` is the one table of error codes: every code the service raises is in it, every entry is raised
somewhere, each raising site's class answers its code's status, and the API docs explain each status from it.

The codes are read from the source (ast), so a branch no test reaches is checked too. A code is written in one of
three places: a `code=` argument, an assignment to a name `code` (a class's own code, or a local passed on), or a
`"code":` entry of a literal body.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from errors import ERRORS, InvalidInput, NotFound, ServiceError, Unavailable
from web import api_docs
from web.http_errors import _STATUS_CODES, HttpError

ROOT = Path(__file__).resolve().parents[2]
NOT_SERVICE = {"tests", "bench", "docs", "voices", "cache", "data", "deploy", "playground", "models"}
"""Top-level folders that raise no service error: tests and benchmarks only expect codes; the rest is not code."""


@cache
def service_sources() -> tuple[tuple[str, ast.Module], ...]:
    """(path, syntax tree) of each module of the service."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        if parts[0].startswith(".") or parts[0] in NOT_SERVICE or "__pycache__" in parts:
            continue
        found.append((str(path.relative_to(ROOT)), ast.parse(path.read_text(encoding="utf-8"), str(path))))
    return tuple(found)


def _strings(node: ast.AST) -> set[str]:
    """The codes an expression may give: its string constants (a `""` is no code: nothing was refused)."""
    return {c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value}


def _assigned(targets: list[ast.expr], value: ast.expr) -> Iterator[ast.expr]:
    """What `code` is assigned in `targets = value`, pairing the elements of `a, code = x, y` (in both branches
    of a conditional of pairs)."""
    for target in targets:
        if isinstance(target, ast.Name) and target.id == "code":
            yield value
        elif isinstance(target, ast.Tuple) and any(isinstance(n, ast.Name) and n.id == "code" for n in target.elts):
            for choice in [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]:
                assert isinstance(choice, ast.Tuple) and len(choice.elts) == len(target.elts), ast.unparse(value)
                for element, given in zip(target.elts, choice.elts, strict=True):
                    yield from _assigned([element], given)


@cache
def error_classes() -> dict[str, str]:
    """Every ServiceError class of the service by name -> the code it answers when raised without one."""
    bases: dict[str, list[str]] = {}
    own: dict[str, str] = {}
    for _, tree in service_sources():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            bases[node.name] = [ast.unparse(base).rpartition(".")[2] for base in node.bases]
            for statement in node.body:
                if isinstance(statement, ast.Assign | ast.AnnAssign) and isinstance(statement.value, ast.Constant):
                    targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                    if any(isinstance(target, ast.Name) and target.id == "code" for target in targets):
                        own[node.name] = str(statement.value.value)

    def is_error(name: str) -> bool:
        return name == "ServiceError" or any(is_error(base) for base in bases.get(name, []))

    def code_of(name: str) -> str:
        return own.get(name) or next(code_of(base) for base in bases[name] if is_error(base))

    return {name: code_of(name) for name in bases if is_error(name)}


class _Codes(ast.NodeVisitor):
    """The codes one module writes, with their lines: `code=` arguments, `code` assigned in a function or in the
    body of an error class, and `"code": "..."` entries of literal bodies."""

    def __init__(self) -> None:
        self.scopes: list[str | None] = []
        """Enclosing class names, None for a function."""
        self.found: list[tuple[str, int]] = []

    def _add(self, value: ast.expr, line: int) -> None:
        assert not isinstance(value, ast.JoinedStr), f"line {line}: a code is one whole string, not a template"
        self.found += [(code, line) for code in _strings(value)]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scopes.append(node.name)
        self.generic_visit(node)
        self.scopes.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scopes.append(None)
        self.generic_visit(node)
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def _assignment(self, targets: list[ast.expr], value: ast.expr | None, line: int) -> None:
        scope = self.scopes[-1] if self.scopes else ""
        if value is not None and (scope is None or scope in error_classes()):
            for given in _assigned(targets, value):
                self._add(given, line)

    def visit_Assign(self, node: ast.Assign) -> None:
        self._assignment(node.targets, node.value, node.lineno)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._assignment([node.target], node.value, node.lineno)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        for keyword in node.keywords:
            if keyword.arg == "code":
                self._add(keyword.value, node.lineno)
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        for key, value in zip(node.keys, node.values, strict=True):
            if isinstance(key, ast.Constant) and key.value == "code" and isinstance(value, ast.Constant):
                self._add(value, node.lineno)
        self.generic_visit(node)


@cache
def written_codes() -> dict[str, list[str]]:
    """Each code the service's source writes -> where (`path:line`)."""
    found: dict[str, list[str]] = {}
    for path, tree in service_sources():
        visitor = _Codes()
        visitor.visit(tree)
        for code, line in visitor.found:
            found.setdefault(code, []).append(f"{path}:{line}")
    return found


def test_every_code_the_service_writes_is_in_the_table() -> None:
    codes = written_codes()
    assert len(codes) > 50  # the collector sees the raising sites
    unknown = {code: where for code, where in codes.items() if code not in ERRORS}
    assert unknown == {}, "add each to errors.ERRORS, with its status and meaning"


def test_every_code_in_the_table_is_written_somewhere() -> None:
    written = set(written_codes()) | set(_STATUS_CODES.values())
    assert [code for code in ERRORS if code not in written] == []


def test_each_raising_site_uses_a_class_of_its_codes_status() -> None:
    """`NotFound(..., code=...)` names a 404 code: the class says the status, as `except NotFound` relies on."""
    classes = error_classes()
    assert {"ServiceError", "NotFound", "HttpError", "JobCancelled"} <= set(classes)
    checked, wrong = 0, []
    for path, tree in service_sources():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in classes):
                continue
            for keyword in node.keywords:
                if keyword.arg == "code" and isinstance(keyword.value, ast.Constant):
                    checked += 1
                    code = str(keyword.value.value)
                    status, own = ERRORS[code].status, ERRORS[classes[node.func.id]].status
                    if own is not None and status != own:
                        wrong.append(f"{path}:{node.lineno}: {node.func.id} ({own}) with {code}")
    assert checked > 50 and wrong == []


def test_the_status_comes_from_the_table() -> None:
    assert NotFound("no voice", code="voice_not_found").status == 404
    assert Unavailable("loading", code="warming", retry_after=2).status == 503
    assert InvalidInput("bad").status == 422 and InvalidInput("bad").code == "invalid_input"
    assert ServiceError("oops").status == 500
    assert NotFound("no voice", code="voice_not_found").body() == {"code": "voice_not_found", "message": "no voice"}
    with pytest.raises(ValueError, match="'no_such_code' is not in errors.ERRORS"):
        InvalidInput("bad", code="no_such_code")
    with pytest.raises(ValueError, match="answers 404, not the 422 of InvalidInput"):
        InvalidInput("bad", code="voice_not_found")
    with pytest.raises(ValueError, match="answers 404, not 410"):
        NotFound("gone", code="voice_not_found", status=410)


def test_a_class_code_must_be_in_the_table_and_a_declared_status_its_own() -> None:
    with pytest.raises(ValueError, match="not in errors.ERRORS"):
        type("Teapot", (ServiceError,), {"code": "teapot"})
    with pytest.raises(TypeError, match="answers 408, not 400"):
        type("Idle", (ServiceError,), {"code": "live_idle_timeout", "status": 400})


def test_errors_the_framework_raises_keep_their_status() -> None:
    for status, code in _STATUS_CODES.items():
        assert ERRORS[code].status == status
        error = HttpError(status, "from the router")
        assert (error.status, error.code) == (status, code)
    teapot = HttpError(418, "short and stout")
    assert (teapot.status, teapot.body()) == (418, {"code": "http_error", "message": "short and stout"})
    with pytest.raises(ValueError, match="has no status of its own"):
        ServiceError("which status?", code="http_error")


def test_every_status_is_explained_from_the_table() -> None:
    documented = set(api_docs._SUMMARY)
    assert {entry.status for entry in ERRORS.values()} - {None} >= documented
    for status in documented:
        description = api_docs.errors(status)[status]["description"]
        for code, entry in ERRORS.items():
            listed = f"- `{code}`: {entry.meaning}" in description
            assert listed == (entry.status == status), (status, code)
