"""SIGKILL during writes loses no acknowledged entry (issue 16's kill-loop tests).

First a child process writes continuously through `MemoryStore` and prints `ack
<id>` after each answered write; it is SIGKILLed at a random moment, many times
over one directory. Then the real `memoryd serve` is SIGKILLed, many times, while
a writer sends it `memory_call`s on broker-memory as brokerd does: an answered
write is acknowledged. After every kill the files parse, every acknowledged id
is in its file, and every entry in a file has its journal line (the journal is
written first); a restarted memoryd indexes every entry.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest

from boxmaker.core.errors import RequestError
from boxmaker.core.home.layout import Home
from boxmaker.core.labels import DataClass
from boxmaker.core.wire.broker import ResultResponse
from boxmaker.core.wire.memory import MemoryCall, Reindex, Reindexed
from boxmaker.ipc.client import Request
from boxmaker.memoryd.files import FILES, read_entries
from boxmaker.memoryd.journal import JOURNAL, read_journal
from boxmaker.testing.homes import make_home
from boxmaker.testing.processes import DaemonProcess
from boxmaker.testing.sockets import exchange
from boxmaker.testing.waiting import wait_until

ROUNDS = 30

DRIVER = """
import sys
from datetime import UTC, datetime
from pathlib import Path
from boxmaker.core.labels import DataClass
from boxmaker.memoryd.store import MemoryStore, Provenance

store = MemoryStore(Path(sys.argv[1]), lambda: datetime.now(UTC))
who = Provenance("kill", "c", DataClass.PRIVATE, untrusted=False)
n = 0
while True:
    n += 1
    if n % 3 == 0:
        result = store.note(f"note {n}", who)
    else:
        result = store.add("memory" if n % 2 else "user", f"entry {n}", who)
    assert result.ok and result.entry is not None, result
    print("ack", result.entry.kind, result.entry.id, flush=True)
"""


def _run_and_kill(directory: Path, rng: random.Random) -> list[tuple[str, str]]:
    child = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(directory)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    first = child.stdout.readline()  # the first answered write: the child is warm
    assert first.startswith("ack "), first
    time.sleep(rng.uniform(0.0, 0.1))  # a random moment to kill at, not a wait for something
    os.kill(child.pid, signal.SIGKILL)
    out, _ = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL
    acked = []
    for line in (first + out).splitlines(keepends=True):
        if line.endswith("\n"):  # a line cut short by the kill was never read as an ack
            _, kind, entry_id = line.split()
            acked.append((kind, entry_id))
    return acked


@pytest.mark.slow
def test_sigkill_during_writes_loses_no_acknowledged_entry(tmp_path: Path) -> None:
    rng = random.Random(16)  # noqa: S311 (when to kill, not a secret)
    acked: list[tuple[str, str]] = []
    for _ in range(ROUNDS):
        acked += _run_and_kill(tmp_path, rng)
        on_disk = {
            kind: {e.id for e in read_entries(tmp_path / f, kind)} for kind, f in FILES.items()
        }
        journalled = {r.entry for r in read_journal(tmp_path / JOURNAL)}
        lost = [(kind, i) for kind, i in acked if i not in on_disk[kind]]
        assert lost == [], f"acknowledged but lost: {lost}"
        unjournalled = set().union(*on_disk.values()) - journalled
        assert unjournalled == set(), f"in a file without a journal line: {unjournalled}"
    assert len(acked) > 2 * ROUNDS  # the child really wrote between kills


# --- the daemon itself, killed while brokerd's socket writes to it ----------------------

DAEMON_ROUNDS = 8
ANSWER_ID = re.compile(r"\((?P<id>[mun]-[0-9a-f]{12})\)\.$")


def _write_until_refused(socket: Path, acked: list[tuple[str, str]], stop: threading.Event) -> None:
    """Write over broker-memory as brokerd would, recording each answered id."""
    n = 0
    while not stop.is_set():
        n += 1
        kind = "note" if n % 3 == 0 else "memory"
        arguments = (
            {"text": f"note {n}"} if kind == "note" else {"kind": kind, "text": f"entry {n}"}
        )
        call = MemoryCall(
            session="kill",
            call=f"c{n}",
            tool="memory_note" if kind == "note" else "memory_add",
            arguments=orjson.dumps(arguments).decode(),
            taint=DataClass.PRIVATE,
            untrusted=False,
        )
        try:
            answers = list(Request(socket, call, call.call, 5.0).answers())
        except RequestError:
            return  # memoryd is gone: whatever was not answered was not acknowledged
        answer = answers[-1].message
        assert isinstance(answer, ResultResponse), answer
        found = ANSWER_ID.search(answer.content)
        assert found is not None, answer.content
        acked.append((kind, found["id"]))


@pytest.mark.slow
def test_sigkill_of_memoryd_while_it_answers_writes_loses_no_acknowledged_entry(
    tmp_path: Path,
) -> None:
    rng = random.Random(61)  # noqa: S311 (when to kill, not a secret)
    home = make_home(tmp_path)
    place = Home(home)
    config = tmp_path / "memoryd.toml"
    config.write_text(f'[paths]\nhome = "{home}"\n', encoding="utf-8")
    acked: list[tuple[str, str]] = []
    for _ in range(DAEMON_ROUNDS):
        memoryd = DaemonProcess(config, role="memoryd")
        try:
            memoryd.wait_serving([place.broker_memory_socket])
            stop = threading.Event()
            writer = threading.Thread(
                target=_write_until_refused, args=(place.broker_memory_socket, acked, stop)
            )
            before = len(acked)
            writer.start()
            wait_until(lambda: len(acked) > before, 10.0, "a first answered write")  # noqa: B023
            time.sleep(rng.uniform(0.0, 0.2))  # a random moment to kill at
            os.kill(memoryd.process.pid, signal.SIGKILL)
            memoryd.wait_exit()
            stop.set()
            writer.join(10)
            assert not writer.is_alive()
        finally:
            memoryd.stop(timeout_s=5)
        on_disk = {
            kind: {e.id for e in read_entries(place.memory / f, kind)} for kind, f in FILES.items()
        }
        lost = [(kind, i) for kind, i in acked if i not in on_disk[kind]]
        assert lost == [], f"acknowledged but lost: {lost}"
        journalled = {r.entry for r in read_journal(place.memory / JOURNAL)}
        assert set().union(*on_disk.values()) <= journalled
    assert len(acked) > 2 * DAEMON_ROUNDS
    # a restarted memoryd serves over what the kills left: its index holds every entry
    with DaemonProcess(config, role="memoryd") as memoryd:
        memoryd.wait_serving([place.owner_memory_socket])
        reindexed = exchange(place.owner_memory_socket, Reindex())[-1].message
    assert reindexed == Reindexed(entries=sum(len(ids) for ids in on_disk.values()))
