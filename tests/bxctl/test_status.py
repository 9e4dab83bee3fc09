"""`bxctl status` asks every role of the tree, memoryd included, on its socket."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from boxmaker import __version__
from boxmaker.bxctl import main as bxctl_main
from boxmaker.core.home.layout import HOME_VARIABLE, Home
from boxmaker.testing.daemons import running_memoryd
from boxmaker.testing.homes import make_home

STARTED = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Home]:
    """A home where only memoryd runs (in-process); `BOXMAKER_HOME` names it."""
    home = Home(make_home(tmp_path))
    monkeypatch.setenv(HOME_VARIABLE, str(home.root))
    with running_memoryd(home, lambda: STARTED):
        yield home


def test_status_names_memoryd_and_fails_while_another_role_is_down(
    home: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bxctl_main.main(["status"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["brokerd", "memoryd", "loopd"]
    assert lines[0].startswith("brokerd: cannot reach brokerd at ")
    assert lines[1] == (
        f"memoryd: answers, {__version__}, up since 2026-11-30T12:00:00.000Z; 0 entries indexed"
    )
    assert lines[2].startswith("loopd: cannot reach loopd at ")


def test_status_asks_memoryd_where_memory_socket_says(
    home: Home, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = tmp_path / "nowhere" / "admin.sock"
    assert bxctl_main.main(["status", "--memory-socket", str(elsewhere)]) == 1
    memoryd = capsys.readouterr().out.splitlines()[1]
    assert memoryd.startswith(f"memoryd: cannot reach memoryd at {elsewhere} ")
    assert memoryd.endswith("see runbook.md#memoryd-unavailable")
