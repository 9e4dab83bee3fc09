"""What the installed package may not lean on (issue 40): nothing under boxmaker/ imports
pytest, gguf or numpy (test-only dependencies), or names a path under tests/ or scripts/
of a checkout (a root install's prepare-sandbox-host is package data, linked from
scripts/)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "boxmaker"
TEST_ONLY = ("pytest", "_pytest", "gguf", "numpy")
CHECKOUT_ONLY = ("tests", "scripts")


def leans_on(source: str) -> list[str]:
    """Each test-only import and checkout path named in `source`, as `import NAME` or
    `path TEXT`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        found += [f"import {n}" for n in names if n.split(".")[0] in TEST_ONLY]
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if text in CHECKOUT_ONLY or ("/" in text and text.split("/")[0] in CHECKOUT_ONLY):
                found.append(f"path {text}")
    return found


def test_the_scan_finds_what_it_looks_for() -> None:
    planted = (
        "import numpy as np\nfrom gguf import GGUFWriter\nimport pytest\n"
        "from pathlib import Path\nROOT = Path(__file__).parents[2] / 'tests' / 'fixtures'\n"
        "FETCH = 'scripts/fetch-vocabularies'\nWORD = 'tests are good'\n"
    )
    assert sorted(leans_on(planted)) == [
        "import gguf",
        "import numpy",
        "import pytest",
        "path scripts/fetch-vocabularies",
        "path tests",
    ]


def test_nothing_in_the_package_leans_on_a_checkout_or_a_test_dependency() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        found += [f"{module}: {what}" for what in leans_on(path.read_text(encoding="utf-8"))]
    assert found == []
