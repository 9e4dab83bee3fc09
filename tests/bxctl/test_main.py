"""bxctl's entry point: each command line imports only the module of its command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from boxmaker.bxctl import main as bxctl_main


def test_every_command_is_found_by_its_name() -> None:
    parser = bxctl_main.build_parser()
    commands = next(a for a in parser._actions if a.dest == "command")
    assert set(commands.choices) == set(bxctl_main.COMMAND_MODULES)  # type: ignore[arg-type]
    for name, module in bxctl_main.COMMAND_MODULES.items():
        only = bxctl_main.build_parser([name])
        action = next(a for a in only._actions if a.dest == "command")
        assert name in action.choices, (name, module)  # type: ignore[operator]


@pytest.mark.parametrize("argv", [["--help"], ["nonsense"]], ids=["help", "unknown"])
def test_help_and_mistakes_list_every_command(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        status = bxctl_main.main(argv)  # a mistake: one line and a status
    except SystemExit as exc:  # --help: argparse prints and exits
        status = exc.code  # type: ignore[assignment]
    assert status == (0 if argv == ["--help"] else 2)
    shown = capsys.readouterr()
    for name in bxctl_main.COMMAND_MODULES:
        assert name in shown.out + shown.err


def test_audit_verify_does_not_import_pydantic(tmp_path: Path) -> None:
    """A quick check of a big log should not pay for the wire models it does not use."""
    (tmp_path / "audit").mkdir()
    code = (
        "import sys\n"
        "from boxmaker.bxctl.main import main\n"
        f"status = main(['audit', 'verify', '--home', {str(tmp_path)!r}])\n"
        "assert status == 0, status\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pydantic'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["audit: ok, 0 records, head none", "[]"]
