"""Checkpoints against cut and rewritten logs: `bxctl audit verify --expect-head` and
`--checkpoints`, `bxctl audit keygen`, through the installed console script."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from boxmaker.brokerd.audit_startup import Started, start_audit
from boxmaker.core.audit_names import audit_file_name
from boxmaker.core.audit_records import DecisionEvent, decode_record, encode_line
from boxmaker.core.decisions import DeniedRecord, DenyReason
from boxmaker.core.labels import DataClass

BXCTL = str(Path(sys.executable).parent / "bxctl")
DAY = "2026-11-30"
LOG = audit_file_name(f"{DAY}T08:00:00.000Z")
RECORDS = 120
BELOW = "see runbook.md#audit-below-checkpoint\n"


def event(call: str, path: str = "/x") -> DecisionEvent:
    return DecisionEvent(
        session="chat-1",
        call=call,
        tool="read_file",
        arguments=f'{{"path":"{path}"}}',
        outcome=DeniedRecord(reason=DenyReason.NO_GRANT),
        taint=DataClass.PRIVATE,
        untrusted=False,
    )


def time_of(i: int) -> str:
    return f"{DAY}T08:{i // 60:02d}:{i % 60:02d}.000Z"


def append(home: Path, count: int, first: int = 0) -> str:
    """`count` records by the real writer; the checkpoint of the log after them."""
    started = start_audit(home / "audit", time_of(first))
    assert isinstance(started, Started), started
    for i in range(first, first + count):
        started.writer.append(event(f"c{i}"), time_of(i))
    position = started.writer.position
    started.writer.close()
    return f"{position.next_seq - 1}:{position.prev}"


def cut(home: Path, records: int) -> None:
    path = home / "audit" / LOG
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-records]))


def rewrite_from(home: Path, index: int) -> None:
    """Rewrite every record from line `index` (0-based) on, computing the chain again."""
    path = home / "audit" / LOG
    lines = path.read_bytes().splitlines()
    for i in range(index, len(lines)):
        record = decode_record(lines[i])
        prev = record.prev if i == index else hashlib.sha256(lines[i - 1]).hexdigest()
        changed = event(f"c{record.seq}", "/innocent") if i == index else record.event
        lines[i] = encode_line(record.seq, record.time, prev, changed)
    path.write_bytes(b"".join(line + b"\n" for line in lines))


def bxctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BXCTL, "audit", *args], capture_output=True, text=True, check=False, timeout=60
    )


def verify(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return bxctl("verify", "--home", str(home), *args)


def test_a_log_that_holds_its_checkpoint_verifies(tmp_path: Path) -> None:
    head = append(tmp_path, 5)
    done = verify(tmp_path, "--expect-head", head)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0] == f"audit: ok, 5 records, head {head.split(':')[1]}"
    assert done.stdout.splitlines()[-1] == "audit: checkpoints hold: 1, the latest at seq 4"


@pytest.mark.parametrize("records", [1, 2, 100])
def test_a_tail_cut_is_found(tmp_path: Path, records: int) -> None:
    head = append(tmp_path, RECORDS)
    cut(tmp_path, records)
    assert verify(tmp_path).returncode == 0  # the chain alone cannot tell
    done = verify(tmp_path, "--expect-head", head)
    assert done.returncode == 1
    last = RECORDS - 1 - records
    assert done.stdout == (
        f"--expect-head 1: record {RECORDS - 1} is missing: the log ends at seq {last}\n"
    )
    assert done.stderr == BELOW


def test_a_rewritten_last_record_with_its_chain_recomputed_is_found(tmp_path: Path) -> None:
    head = append(tmp_path, 10)
    rewrite_from(tmp_path, 9)
    assert verify(tmp_path).returncode == 0
    done = verify(tmp_path, "--expect-head", head)
    assert done.returncode == 1
    assert done.stdout.startswith("--expect-head 1: record 9 differs: its hash is ")
    assert done.stdout.rstrip().endswith(f"the checkpoint says {head.split(':')[1]}")


def test_a_rewrite_before_the_checkpoint_with_the_chain_recomputed_is_found(
    tmp_path: Path,
) -> None:
    head = append(tmp_path, 10)
    rewrite_from(tmp_path, 3)
    assert verify(tmp_path).returncode == 0
    done = verify(tmp_path, "--expect-head", head)
    assert done.returncode == 1
    assert done.stdout.startswith("--expect-head 1: record 9 differs: ")


@pytest.mark.parametrize("new", [2, 6], ids=["below-the-checkpoint", "past-the-checkpoint"])
def test_a_seq_reused_after_a_cut_is_found(tmp_path: Path, new: int) -> None:
    head = append(tmp_path, 10)
    cut(tmp_path, 3)  # seqs 7, 8 and 9 are gone; no checkpoint.json stops the restart
    append(tmp_path, new, first=20)  # a restarted brokerd numbers on from 7
    assert verify(tmp_path).returncode == 0
    done = verify(tmp_path, "--expect-head", head)
    assert done.returncode == 1
    if new == 2:
        assert done.stdout == "--expect-head 1: record 9 is missing: the log ends at seq 8\n"
    else:
        assert done.stdout.startswith("--expect-head 1: record 9 differs: ")


def test_every_checkpoint_of_a_file_is_checked_with_its_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    early = append(home, 5)
    late = append(home, 5, first=5)
    kept = tmp_path / "checkpoints.txt"
    kept.write_text(
        f"# kept on the laptop\n{early} {time_of(4)}\n\n{late} {time_of(9)}\n", encoding="utf-8"
    )
    assert verify(home, "--checkpoints", str(kept)).stdout.splitlines()[-1] == (
        "audit: checkpoints hold: 2, the latest at seq 9"
    )
    cut(home, 1)
    done = verify(home, "--checkpoints", str(kept), "--expect-head", early)
    assert done.returncode == 1
    assert done.stdout == f"{kept}:4: record 9 is missing: the log ends at seq 8\n"


def test_a_line_that_is_not_a_checkpoint_is_named(tmp_path: Path) -> None:
    home = tmp_path / "home"
    append(home, 3)
    kept = tmp_path / "checkpoints.txt"
    kept.write_text("2:nothex 2026-11-30T08:00:00.000Z\n", encoding="utf-8")
    done = verify(home, "--checkpoints", str(kept))
    assert done.returncode == 1
    assert done.stdout.startswith(f"{kept}:1: not SEQ:HASH")


def test_a_malformed_expect_head_is_a_usage_error(tmp_path: Path) -> None:
    append(tmp_path, 1)
    done = verify(tmp_path, "--expect-head", "9:abc")
    assert done.returncode == 2
    assert done.stderr.startswith("bxctl: --expect-head: not SEQ:HASH")
    assert len(done.stderr.splitlines()) == 1


# --- sealed checkpoints ------------------------------------------------------------


def keygen(path: Path) -> Path:
    done = bxctl("keygen", "--out", str(path))
    assert done.returncode == 0, done.stderr
    public = path.with_name(path.name + ".pub")
    public.write_text(done.stdout, encoding="utf-8")
    assert done.stdout.startswith("ed25519:")
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.read_text(encoding="ascii").startswith("-----BEGIN PRIVATE KEY-----")
    return public


def sealed(key: Path, text: str) -> str:
    """`text` (`SEQ:HEAD TIME`) signed with the private key file `key`, as bxctl signs."""
    from boxmaker.bxctl.seal import load_private, seal
    from boxmaker.core.checkpoints import format_line, parse_line

    parsed = parse_line(text)
    assert parsed is not None
    return format_line(parsed.checkpoint, seal(load_private(key), parsed.checkpoint))


def test_keygen_never_writes_over_a_file(tmp_path: Path) -> None:
    keygen(tmp_path / "key")
    done = bxctl("keygen", "--out", str(tmp_path / "key"))
    assert done.returncode == 1
    assert "never written over" in done.stderr


@pytest.mark.parametrize("case", ["good", "bad", "missing", "another-key"])
def test_signatures_are_checked(tmp_path: Path, case: str) -> None:
    home = tmp_path / "home"
    text = f"{append(home, 4)} {time_of(3)}"
    public = keygen(tmp_path / "owner.key")
    keygen(tmp_path / "intruder.key")
    if case == "good":
        line = sealed(tmp_path / "owner.key", text)
    elif case == "bad":  # a signed line changed afterwards
        line = sealed(tmp_path / "owner.key", text).replace(time_of(3), time_of(59))
    elif case == "missing":
        line = text
    else:
        line = sealed(tmp_path / "intruder.key", text)
    kept = tmp_path / "checkpoints.txt"
    kept.write_text(line + "\n", encoding="utf-8")
    done = verify(home, "--checkpoints", str(kept), "--public-key", str(public))
    expected = {
        "good": "",
        "bad": f"{kept}:1: bad signature: the line was changed or not signed by this key\n",
        "missing": f"{kept}:1: the checkpoint is not signed\n",
        "another-key": f"{kept}:1: signed by key ",
    }[case]
    if case == "good":
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.splitlines()[-1] == "audit: checkpoints hold: 1, the latest at seq 3"
    else:
        assert done.returncode == 1
        assert done.stdout.startswith(expected)
        assert done.stderr == BELOW


def test_an_intruder_key_claiming_the_owner_key_id_is_a_bad_signature(tmp_path: Path) -> None:
    home = tmp_path / "home"
    text = f"{append(home, 2)} {time_of(1)}"
    public = keygen(tmp_path / "owner.key")
    keygen(tmp_path / "intruder.key")
    owner_id = sealed(tmp_path / "owner.key", text).split(" ")[2]
    forged = sealed(tmp_path / "intruder.key", text).split(" ")
    forged[2] = owner_id
    kept = tmp_path / "checkpoints.txt"
    kept.write_text(" ".join(forged) + "\n", encoding="utf-8")
    done = verify(home, "--checkpoints", str(kept), "--public-key", str(public))
    assert done.returncode == 1
    assert done.stdout.startswith(f"{kept}:1: bad signature")


def test_plain_verify_loads_no_cryptography(tmp_path: Path) -> None:
    (tmp_path / "audit").mkdir()
    code = (
        "import sys\n"
        "from boxmaker.bxctl.main import main\n"
        f"assert main(['audit', 'verify', '--home', {str(tmp_path)!r}]) == 0\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('cryptography', 'pydantic')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "[]"


@pytest.mark.parametrize(
    "text",
    ["", "\n\n", "# sealed by the owner\n\n# nothing yet\n"],
    ids=["empty", "blank", "notes"],
)
def test_a_checkpoint_file_with_no_checkpoint_is_refused(tmp_path: Path, text: str) -> None:
    home = tmp_path / "home"
    append(home, 5)
    checkpoints = tmp_path / "checkpoints"
    checkpoints.write_text(text, encoding="utf-8")
    done = verify(home, "--checkpoints", str(checkpoints))
    assert done.returncode == 1, done.stdout
    assert done.stdout == (
        f"{checkpoints}: holds no checkpoint: a checkpoint file has at least one line"
        " (`bxctl audit checkpoint` appends one)\n"
    )
    assert done.stderr == BELOW
