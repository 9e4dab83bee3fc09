"""The exception tree of `boxmaker/core/errors.py`: every exception class of boxmaker is in it.

House style ("Errors"): one small tree, drawn in the docstring of core/errors.py.
These tests import every module of the package and fail for an exception class
that does not derive from `BoxmakerError`, for a public one the drawing leaves
out, and for one drawn under a parent it does not have; so a class added
anywhere in the tree, or moved in it, must be drawn where it is. Local misuse of
the connection code is a `MisuseError`, never the peer's `ProtocolError`
(the frame codec's is in test_frames.py).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import boxmaker
from boxmaker.core import errors
from boxmaker.core.errors import BoxmakerError, MisuseError, ProtocolError
from boxmaker.core.wire.broker_admin import Approvals
from boxmaker.core.wire.common import Ok
from boxmaker.core.wire.connection import ClientConnection, ServerConnection

PACKAGE = Path(boxmaker.__file__).parent

# Exempt, each for its reason (the test below checks the reason still holds):
# the toolkit runs inside the sandbox as a program of its own (`python3 -I -S -c`),
# imports nothing of boxmaker, and its errors leave it only as failure codes.
EXEMPT = {"boxmaker.sandbox.toolkit.ToolError"}

_ROOT = re.compile(r"^ {4}(?P<name>BoxmakerError)$")
_BRANCH = re.compile(r"^ {4}(?P<lead>(?:[│ ] {3})*)[├└]── (?P<name>\w+)")


def _exception_classes() -> Iterator[type[BaseException]]:
    """Every exception class defined in a module of boxmaker (or in a class there)."""
    for found in pkgutil.walk_packages(boxmaker.__path__, "boxmaker."):
        module = importlib.import_module(found.name)
        todo, seen = list(vars(module).values()), set()
        while todo:
            value = todo.pop()
            if not inspect.isclass(value) or value.__module__ != module.__name__ or value in seen:
                continue
            seen.add(value)
            todo.extend(vars(value).values())
            if issubclass(value, BaseException):
                yield value


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


CLASSES = sorted(set(_exception_classes()), key=_name)
PUBLIC = [c for c in CLASSES if not c.__name__.startswith("_") and _name(c) not in EXEMPT]


def _drawing() -> dict[str, str | None]:
    """Each class the docstring's tree draws, and the class drawn as its parent."""
    parents: dict[str, str | None] = {}
    path: list[str] = []
    for line in (errors.__doc__ or "").splitlines():
        if root := _ROOT.match(line):
            parents[root["name"]] = None
            path = [root["name"]]
        elif path and (branch := _BRANCH.match(line)):
            del path[len(branch["lead"]) // 4 + 1 :]
            parents[branch["name"]] = path[-1]
            path.append(branch["name"])
    return parents


def test_the_walk_finds_the_classes() -> None:
    names = {_name(c) for c in CLASSES}
    assert {
        "boxmaker.core.errors.ProtocolError",
        "boxmaker.brokerd.audit_writer.AuditUnavailableError",
        "boxmaker.loopd.compaction.NoRoomError",
        "boxmaker.ipc.connection.PeerClosedError",
        *EXEMPT,
    } <= names


@pytest.mark.parametrize("cls", CLASSES, ids=_name)
def test_every_exception_class_derives_from_the_root(cls: type[BaseException]) -> None:
    if _name(cls) in EXEMPT:
        assert not issubclass(cls, BoxmakerError), f"{_name(cls)} need not be exempt"
        return
    assert issubclass(cls, BoxmakerError), (
        f"{_name(cls)} derives from {[b.__name__ for b in cls.__mro__[1:]]}: give it a base"
        " from boxmaker/core/errors.py (keeping a built-in base its callers catch it by)"
    )


def test_the_exempt_toolkit_imports_nothing_of_boxmaker() -> None:
    tree = ast.parse((PACKAGE / "sandbox" / "toolkit.py").read_text())
    imported: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            imported.append(node.module or "")
    assert not [name for name in imported if name.split(".")[0] == "boxmaker"]


def _hidden_in(source: str) -> list[str]:
    """The exception classes `source` defines inside a function (the walk cannot see them)."""
    hidden: list[str] = []
    todo: list[tuple[ast.AST, bool]] = [(ast.parse(source), False)]
    while todo:
        node, in_function = todo.pop()
        if (
            in_function
            and isinstance(node, ast.ClassDef)
            and any(re.search(r"(Error|Exception)$", ast.unparse(b)) for b in node.bases)
        ):
            hidden.append(node.name)
        inside = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        todo.extend((child, inside) for child in ast.iter_child_nodes(node))
    return hidden


def test_a_class_in_a_function_body_is_found() -> None:
    planted = "def f():\n    class LateError(ValueError):\n        pass\n"
    assert _hidden_in(planted) == ["LateError"]


def test_no_exception_class_is_defined_inside_a_function() -> None:
    hidden = {
        str(path.relative_to(PACKAGE)): found
        for path in sorted(PACKAGE.rglob("*.py"))
        if (found := _hidden_in(path.read_text()))
    }
    assert not hidden, "define these at module level, where the walk sees them"


def test_public_names_are_unique() -> None:
    names = [c.__name__ for c in PUBLIC]
    assert sorted(set(names)) == sorted(names), "two exception classes share a name"


@pytest.mark.parametrize("cls", PUBLIC, ids=_name)
def test_every_public_class_is_drawn_under_its_parent(cls: type[BaseException]) -> None:
    drawing = _drawing()
    assert cls.__name__ in drawing, f"draw {cls.__name__} in boxmaker/core/errors.py"
    parent = drawing[cls.__name__]
    bases = [b.__name__ for b in cls.__bases__ if issubclass(b, BoxmakerError)]
    if parent is None:
        assert cls is BoxmakerError
    else:
        assert bases == [parent], f"{cls.__name__} is drawn under {parent}, derives from {bases}"


def test_the_drawing_names_only_classes_that_exist() -> None:
    assert set(_drawing()) == {c.__name__ for c in PUBLIC}


# -- local misuse is not the peer's ProtocolError ------------------------------


def test_an_answer_after_the_final_one_is_misuse() -> None:
    server = ServerConnection()
    request = ClientConnection("r1").request(Approvals())
    assert server.receive(request) is not None
    server.answer(Ok(), final=True)
    with pytest.raises(MisuseError) as caught:
        server.answer(Ok(), final=True)
    assert not isinstance(caught.value, ProtocolError)


def test_an_answer_with_no_request_is_misuse() -> None:
    with pytest.raises(MisuseError) as caught:
        ServerConnection().answer(Ok(), final=True)
    assert not isinstance(caught.value, ProtocolError)


def test_a_second_request_is_misuse() -> None:
    client = ClientConnection("r1")
    client.request(Approvals())
    with pytest.raises(MisuseError) as caught:
        client.request(Approvals())
    assert not isinstance(caught.value, ProtocolError)
