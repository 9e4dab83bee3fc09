"""SIGKILL during writes loses no acknowledged entry (issue 16's kill-loop test).

A child process writes continuously through `MemoryStore` and prints `ack <id>`
after each answered write; it is SIGKILLed at a random moment, many times over one
directory. After every kill the files parse, every acknowledged id is in its file,
and every entry in a file has its journal line (the journal is written first).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from boxmaker.memoryd.files import FILES, read_entries
from boxmaker.memoryd.journal import JOURNAL, read_journal

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
