"""The checked-in pins (constraints.txt, written by scripts/update-constraints) cover
everything the test command installs, and what is generated from a pinned package was
generated from that very version."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

from boxmaker.core.sanitize import unicode_tables

ROOT = Path(__file__).resolve().parent.parent
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: `{line}` is not pinned with =="
            pins[_canonical(name)] = version
    return pins


def _names(lines: str) -> set[str]:
    found = set()
    for line in lines.splitlines():
        line = line.split("#", 1)[0].strip()
        if line and (match := _NAME.match(line)):
            found.add(_canonical(match.group()))
    return found


def _wanted() -> set[str]:
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    wanted = _names(setup["options"]["install_requires"])
    for extra in setup["options.extras_require"].values():
        wanted |= _names(extra)
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    for section in tox.sections():
        wanted |= _names(tox[section].get("deps", ""))
    return wanted | _names((ROOT / "requirements" / "tools.in").read_text())


def test_every_requirement_of_the_test_command_is_pinned() -> None:
    missing = sorted(_wanted() - set(_pins()))
    assert not missing, f"not in constraints.txt: {missing}; run scripts/update-constraints"


def test_the_unicode_tables_come_from_the_pinned_regex() -> None:
    assert _pins()["regex"] == unicode_tables.REGEX_VERSION, (
        "boxmaker/core/sanitize/unicode_tables.py was generated from another `regex` than"
        " constraints.txt pins: run scripts/update-constraints"
    )


def test_tox_installs_with_the_pins() -> None:
    tox = (ROOT / "tox.ini").read_text()
    assert "PIP_CONSTRAINT = {toxinidir}/constraints.txt" in tox
    assert 'export PIP_CONSTRAINT="$PWD/constraints.txt"' in (ROOT / "scripts/test").read_text()
