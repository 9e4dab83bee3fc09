"""The import rules of design.md section 2, checked over the source tree.

A role imports boxmaker.core (and itself) and never another role; core imports no
role; boxmaker.sandbox is brokerd's alone; no role imports boxmaker.testing.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "boxmaker"

# who may import whom, by top-level subpackage of boxmaker ("" is boxmaker/__init__)
ALLOWED: dict[str, set[str]] = {
    "": {""},
    "core": {"", "core"},
    "brokerd": {"", "core", "brokerd", "sandbox"},
    "sandbox": {"", "core", "sandbox", "brokerd"},  # the runner seam's types
    "loopd": {"", "core", "loopd"},
    "memoryd": {"", "core", "memoryd"},
    "gatewayd": {"", "core", "gatewayd"},
    "bxctl": {"", "core", "bxctl"},
    "testing": {"", "core", "testing", "brokerd", "loopd", "memoryd", "gatewayd", "sandbox"},
}


def _layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) < 2 or parts[1] not in ALLOWED:
        return ""  # boxmaker itself, or a name defined in boxmaker/__init__.py
    return parts[1]


def _module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(source: str, module: str, is_package: bool) -> list[str]:
    """Every boxmaker module that `source` (the text of `module`) imports."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.append(target)
            found.extend(f"{target}.{alias.name}" for alias in node.names)
    return [m for m in found if m == "boxmaker" or m.startswith("boxmaker.")]


def violations(files: dict[str, str]) -> list[str]:
    """`module imports other` for every import that breaks the rules."""
    problems: list[str] = []
    for module, source in sorted(files.items()):
        parts = module.split(".")
        if len(parts) > 2 and parts[1] not in ALLOWED:
            problems.append(f"{module}: unknown subpackage {parts[1]!r}; add it to ALLOWED")
            continue
        allowed = ALLOWED[_layer(module)]
        for target in imported_modules(source, module, module.endswith("__init__")):
            if _layer(target) not in allowed:
                problems.append(f"{module} imports {target}")
    return problems


def _tree() -> dict[str, str]:
    return {_module_name(path): path.read_text() for path in sorted(PACKAGE.rglob("*.py"))}


def test_the_tree_keeps_the_import_rules() -> None:
    files = _tree()
    assert len(files) > 10, "the search for modules is broken"
    assert violations(files) == []


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("boxmaker.loopd.x", "from boxmaker.brokerd import ledger"),
        ("boxmaker.loopd.x", "import boxmaker.bxctl.main"),
        ("boxmaker.core.x", "from boxmaker.brokerd.serve import main"),
        ("boxmaker.core.x", "from boxmaker import loopd"),
        ("boxmaker.loopd.x", "from boxmaker.sandbox import bwrap"),
        ("boxmaker.brokerd.x", "from boxmaker.testing import fakes"),
        ("boxmaker.loopd.x", "from ..brokerd import ledger"),
    ],
    ids=[
        "role-imports-role",
        "plain-import",
        "core-imports-role",
        "core-imports-role-package",
        "sandbox-is-brokerd-only",
        "role-imports-testing",
        "relative-import",
    ],
)
def test_a_violation_is_found(module: str, source: str) -> None:
    assert violations({module: source}) != []


def test_allowed_imports_pass() -> None:
    assert violations({"boxmaker.brokerd.x": "from boxmaker.core import policy\nimport os"}) == []


def test_an_unknown_subpackage_is_reported() -> None:
    assert violations({"boxmaker.newrole.x": "import os"}) != []
