"""The import rules of design.md section 2: import-linter's contracts in `.importlinter`.

`lint-imports` (tox -e lint) checks them. Here the real tree must keep every
contract, and a copy of the tree with one forbidden import planted must break
the contract named for it: each contract is shown able to fail, so a misspelt
module or a rule that matches nothing cannot pass unseen. import-linter is a
test dependency (setup.cfg's `test` extra); without it these tests fail.
"""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / ".importlinter"
SECTION = "importlinter:contract:"


def _contract_names() -> dict[str, str]:
    """Each contract's id and the name lint-imports reports it by."""
    parser = configparser.ConfigParser()
    parser.read_string(CONFIG.read_text())
    return {
        section.removeprefix(SECTION): parser[section]["name"]
        for section in parser.sections()
        if section.startswith(SECTION)
    }


def _lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` over the `boxmaker` package in `tree`, with the config there."""
    script = Path(sysconfig.get_path("scripts")) / "lint-imports"
    assert script.exists(), f"{script} is missing: install import-linter (the `test` extra)"
    environment = {**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [str(script), "--no-cache", str(tree / ".importlinter")],
        cwd=tree,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_tree_keeps_every_contract() -> None:
    names = _contract_names()
    assert len(names) >= 7, "the contracts were not read"
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    for name in names.values():
        assert f"{name} KEPT" in result.stdout, result.stdout


# (where the planted module goes, what it imports, the contract it breaks)
PLANTED = [
    ("core", "import boxmaker.brokerd.config", "core-imports-no-role"),
    ("core", "from boxmaker import loopd", "core-imports-no-role"),
    ("core", "from boxmaker.testing import runtime", "core-imports-no-role"),
    ("core", "import socket", "core-does-no-io"),
    ("core", "from subprocess import run", "core-does-no-io"),
    ("loopd", "from boxmaker.brokerd import config", "roles-are-independent"),
    ("bxctl", "from ..loopd import model", "roles-are-independent"),
    ("loopd", "from boxmaker.sandbox import runner", "sandbox-is-brokerds"),
    ("sandbox", "import boxmaker.brokerd.config", "sandbox-imports-no-role"),
    ("brokerd", "from boxmaker.testing import runtime", "nothing-imports-testing"),
    ("ipc", "from boxmaker.loopd import model", "layers"),
    ("core", "import boxmaker.ipc", "layers"),
    ("sandbox", "import boxmaker.ipc", "layers"),
    ("newpart", "", "layers"),  # a subpackage given no layer
    ("loopd", "from boxmaker.core.home.secrets import Secret", "loopd-holds-no-secrets"),
    ("loopd", "import boxmaker.ipc.secrets", "loopd-holds-no-secrets"),
    ("core/grants", "from boxmaker.core.wire import envelope", "core-layers"),
    ("core/model", "from boxmaker.core.audit import chain", "core-layers"),
    ("core/home", "from boxmaker.core.grants import tools", "core-layers"),
    ("core", "", "core-layers"),  # a module put directly in core, given no layer
]


@pytest.mark.parametrize(("package", "source", "contract"), PLANTED)
def test_a_planted_import_breaks_its_contract(
    tmp_path: Path, package: str, source: str, contract: str
) -> None:
    shutil.copytree(
        ROOT / "boxmaker", tmp_path / "boxmaker", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(CONFIG, tmp_path / ".importlinter")
    where = tmp_path / "boxmaker" / package
    where.mkdir(exist_ok=True)
    (where / "__init__.py").touch()
    (where / "planted.py").write_text(f"{source}\n")
    result = _lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{_contract_names()[contract]} BROKEN" in result.stdout, result.stdout


def test_every_contract_is_shown_able_to_fail() -> None:
    assert {contract for _, _, contract in PLANTED} == set(_contract_names())
