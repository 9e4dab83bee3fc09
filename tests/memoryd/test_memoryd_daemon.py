"""The real `memoryd serve --config` process: its sockets and modes, an answer on
each, SIGTERM, and a bad configuration."""

from __future__ import annotations

import signal
import stat
import subprocess
from pathlib import Path

import pytest

from boxmaker.core.home.layout import Home
from boxmaker.core.labels import DataClass
from boxmaker.core.wire.broker import ResultResponse
from boxmaker.core.wire.memory import MemoryBlock, MemoryBlockReply, MemoryCall, Reindex, Reindexed
from boxmaker.testing.homes import make_home
from boxmaker.testing.processes import clean_environment, console_script
from boxmaker.testing.sockets import accepts, exchange
from boxmaker.testing.waiting import wait_until

pytestmark = pytest.mark.e2e


def _sockets(home: Path) -> list[Path]:
    place = Home(home)
    return [place.loop_memory_socket, place.broker_memory_socket, place.owner_memory_socket]


def _start(config: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*console_script("memoryd"), "serve", "--config", str(config)],
        env=clean_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_memoryd_serves_its_three_sockets_and_stops_on_sigterm(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    config = tmp_path / "memoryd.toml"
    config.write_text(f'[paths]\nhome = "{home}"\n')
    process = _start(config)
    try:
        wait_until(
            lambda: process.poll() is not None or all(accepts(p) for p in _sockets(home)),
            30.0,
            "memoryd accepting connections",
        )
        assert process.poll() is None, process.communicate()[0]
        for path in _sockets(home):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        place = Home(home)
        noted = exchange(
            place.broker_memory_socket,
            MemoryCall(
                session="chat-1",
                call="c1",
                tool="memory_add",
                arguments='{"kind":"memory","text":"Prefers tabs."}',
                taint=DataClass.PRIVATE,
                untrusted=False,
            ),
        )[-1].message
        assert isinstance(noted, ResultResponse)
        block = exchange(place.loop_memory_socket, MemoryBlock(session="chat-1"))[-1].message
        assert isinstance(block, MemoryBlockReply)
        assert (block.text, block.excluded) == ("## Memory\n\nPrefers tabs.", 0)
        assert exchange(place.owner_memory_socket, Reindex())[-1].message == Reindexed(entries=1)
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, output
    assert "event=stopped" in output
    assert not any(p.exists() for p in _sockets(home))


def test_a_bad_configuration_exits_2_with_one_line(tmp_path: Path) -> None:
    config = tmp_path / "memoryd.toml"
    config.write_text('[paths]\nhome = "/tmp/x"\n[sockets]\ngroup_acces = true\n')
    process = _start(config)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 2
    lines = output.splitlines()
    assert len(lines) == 1, output
    assert "group_acces" in lines[0]


def test_a_damaged_memory_file_stops_memoryd_from_starting(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    (home / "memory").mkdir()
    (home / "memory" / "memory.md").write_text("stray text\n")
    config = tmp_path / "memoryd.toml"
    config.write_text(f'[paths]\nhome = "{home}"\n')
    process = _start(config)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 1
    assert "memory.md:1" in output
    assert not any(p.exists() for p in _sockets(home))
