"""Checkpoints against cut and rewritten logs: `bxctl audit verify --expect-head` and
`--checkpoints`, `bxctl audit keygen`, through the installed console script; the
chain of sealed lines and the remembered head against rolled-back checkpoint files."""

from __future__ import annotations

import gc
import hashlib
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from boxmaker.brokerd.audit_startup import Started, start_audit
from boxmaker.core.audit.names import audit_file_name
from boxmaker.core.audit.records import DecisionEvent, decode_record, encode_line
from boxmaker.core.grants.decisions import DeniedRecord, DenyReason
from boxmaker.core.hashes import ZERO_HASH
from boxmaker.core.labels import DataClass

BXCTL = str(Path(sys.executable).parent / "bxctl")
DAY = "2026-11-30"
LOG = audit_file_name(f"{DAY}T08:00:00.000Z")
RECORDS = 120
BELOW = "see runbook.md#audit-below-checkpoint\n"
ROLLED_BACK = "see runbook.md#audit-checkpoints-broken\n"


@pytest.fixture(autouse=True)
def owner_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The owner's state directory (where verify remembers its head), per test."""
    state = tmp_path / "owner-state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return state


def head_file(state: Path) -> Path:
    return state / "boxmaker" / "audit-head"


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
    remembered = head_file(tmp_path / "owner-state")  # the first verify remembered seq 9
    assert done.stdout == (
        f"{kept}:4: record 9 is missing: the log ends at seq 8\n"
        f"{remembered}: record 9 is missing: the log ends at seq 8\n"
    )


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


def sealed(key: Path, text: str, prev: str = ZERO_HASH) -> str:
    """`text` (`SEQ:HEAD TIME`) signed with the private key file `key` after the sealed
    line whose hash is `prev` (the genesis value for a first line), as bxctl signs."""
    from boxmaker.bxctl.seal import load_private, seal
    from boxmaker.core.audit.checkpoints import format_line, parse_line

    parsed = parse_line(text)
    assert parsed is not None
    return format_line(parsed.checkpoint, seal(load_private(key), parsed.checkpoint, prev))


def chain_of(key: Path, texts: list[str]) -> list[str]:
    """Sealed lines for `texts`, each naming the sha256 of the line before it."""
    lines, prev = [], ZERO_HASH
    for text in texts:
        lines.append(sealed(key, text, prev))
        prev = hashlib.sha256(lines[-1].encode("ascii")).hexdigest()
    return lines


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
    owner_id = sealed(tmp_path / "owner.key", text).split(" ")[3]
    forged = sealed(tmp_path / "intruder.key", text).split(" ")
    assert owner_id.startswith("key=")
    forged[3] = owner_id
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


# --- the chain of sealed lines, and rollback ---------------------------------------


def test_a_v1_sealed_line_is_refused_saying_what_to_do(tmp_path: Path) -> None:
    home = tmp_path / "home"
    text = f"{append(home, 2)} {time_of(1)}"
    kept = tmp_path / "checkpoints.txt"
    kept.write_text(f"{text} key=0123456789abcdef sig={'A' * 86}==\n", encoding="utf-8")
    done = verify(home, "--checkpoints", str(kept))
    assert done.returncode == 1
    assert done.stdout.startswith(f"{kept}:1: a v1 sealed line")
    assert len(done.stdout.splitlines()) == 1


@pytest.mark.parametrize("seen", ["remembered", "expect-head"])
def test_a_rolled_back_checkpoint_file_is_refused(tmp_path: Path, seen: str) -> None:
    home = tmp_path / "home"
    older = f"{append(home, 3)} {time_of(2)}"
    newer = f"{append(home, 3, first=3)} {time_of(5)}"
    public = keygen(tmp_path / "owner.key")
    lines = chain_of(tmp_path / "owner.key", [older, newer])
    kept = tmp_path / "checkpoints.txt"
    kept.write_text("\n".join(lines) + "\n", encoding="utf-8")
    check = ("--checkpoints", str(kept), "--public-key", str(public))
    extra: tuple[str, ...] = ()
    source = "--expect-head 1"
    if seen == "remembered":
        done = verify(home, *check)
        assert done.returncode == 0, done.stdout + done.stderr
        source = f"{head_file(tmp_path / 'owner-state')}"
    else:
        extra = ("--expect-head", newer.split(" ")[0], "--head-file", str(tmp_path / "fresh"))
    kept.write_text(lines[0] + "\n", encoding="utf-8")  # the newer line deleted
    cut(home, 3)  # and the log cut after the older one
    done = verify(home, *check, *extra)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        f"{kept}:1: rolled back: the newest checkpoint is seq 2, older than seq 5 seen"
        f" before ({source})",
        f"{source}: record 5 is missing: the log ends at seq 2",
    ]
    assert ROLLED_BACK in done.stderr
    assert BELOW in done.stderr


def test_verify_remembers_the_newest_head_in_the_owner_state(tmp_path: Path) -> None:
    home = tmp_path / "home"
    early = f"{append(home, 3)} {time_of(2)}"
    late = f"{append(home, 3, first=3)} {time_of(5)}"
    kept = tmp_path / "checkpoints.txt"
    kept.write_text(f"{early}\n{late}\n", encoding="utf-8")
    done = verify(home, "--checkpoints", str(kept))
    assert done.returncode == 0, done.stdout + done.stderr
    remembered = head_file(tmp_path / "owner-state")
    assert done.stdout.splitlines()[-2:] == [
        f"audit: head remembered in {remembered}: seq 5",
        "audit: checkpoints hold: 2, the latest at seq 5",
    ]
    assert remembered.read_text(encoding="ascii").splitlines()[-1] == late
    assert stat.S_IMODE(remembered.stat().st_mode) == 0o600
    assert verify(home).returncode == 0  # a plain verify neither reads nor needs it
    kept.write_text(f"{early}\n", encoding="utf-8")
    done = verify(home, "--checkpoints", str(kept))
    assert done.returncode == 1
    assert done.stdout.startswith(f"{kept}:1: rolled back: the newest checkpoint is seq 2,")
    assert remembered.read_text(encoding="ascii").splitlines()[-1] == late  # kept as it was


def test_a_head_file_inside_the_home_or_damaged_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    kept = tmp_path / "checkpoints.txt"
    kept.write_text(f"{append(home, 2)} {time_of(1)}\n", encoding="utf-8")
    inside = verify(home, "--checkpoints", str(kept), "--head-file", str(home / "head"))
    assert inside.returncode == 2
    assert "is inside boxmaker's home" in inside.stderr
    assert len(inside.stderr.splitlines()) == 1
    damaged = tmp_path / "head"
    damaged.write_text("something else\n", encoding="utf-8")
    done = verify(home, "--checkpoints", str(kept), "--head-file", str(damaged))
    assert done.returncode == 1
    assert done.stderr.startswith(f"bxctl: {damaged}: not a head file")
    assert "remove it" in done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_checkpoint_with_a_key_needs_the_file_it_chains_to(tmp_path: Path) -> None:
    keygen(tmp_path / "owner.key")
    done = bxctl("checkpoint", "--home", str(tmp_path), "--key", str(tmp_path / "owner.key"))
    assert done.returncode == 2
    assert done.stderr.startswith("bxctl: --key chains the new line")
    assert "--append FILE" in done.stderr


def test_a_new_sealed_line_chains_to_the_last_sealed_line_of_its_file(tmp_path: Path) -> None:
    from boxmaker.bxctl.audit_checkpoint_cmd import chain_prev
    from boxmaker.bxctl.cli import CliError

    keygen(tmp_path / "owner.key")
    kept = tmp_path / "checkpoints.txt"
    assert chain_prev(kept) == ZERO_HASH  # no file yet: the chain starts
    kept.write_text(f"# notes\n3:{'ab' * 32} {time_of(3)}\n", encoding="utf-8")
    assert chain_prev(kept) == ZERO_HASH  # a plain line is outside the chain
    lines = chain_of(tmp_path / "owner.key", [f"3:{'ab' * 32} {time_of(3)}"] * 2)
    kept.write_text("\n".join(lines) + f"\n3:{'ab' * 32} {time_of(4)}\n\n", encoding="utf-8")
    assert chain_prev(kept) == hashlib.sha256(lines[1].encode("ascii")).hexdigest()
    kept.write_text(lines[0] + "\nnot a line\n", encoding="utf-8")
    with pytest.raises(CliError, match=rf"^{kept}:2: not a checkpoint line"):
        chain_prev(kept)


@pytest.fixture(scope="module")
def thousand(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str]]:
    """A home whose log has 1,000 records, a public key, and 1,000 sealed checkpoints,
    one per record, built by the functions bxctl and brokerd use (no daemon)."""
    root = tmp_path_factory.mktemp("thousand")
    home = root / "home"
    (home / "audit").mkdir(parents=True)
    records, prev = [], ZERO_HASH
    for i in range(1000):
        records.append(encode_line(i, time_of(i // 20), prev, event(f"c{i}")))
        prev = hashlib.sha256(records[-1]).hexdigest()
    (home / "audit" / LOG).write_bytes(b"".join(line + b"\n" for line in records))
    public = keygen(root / "owner.key")
    texts = [
        f"{i}:{hashlib.sha256(r).hexdigest()} {time_of(i // 20)}" for i, r in enumerate(records)
    ]
    return home, public, chain_of(root / "owner.key", texts)


def verify_here(*argv: str) -> int:
    """`bxctl audit verify ...` in this process (faster than a console script per case)."""
    from boxmaker.bxctl.main import main

    try:
        return main(["audit", "verify", *argv])
    finally:
        gc.enable()  # verify turns the cycle collector off for its own run


@pytest.mark.parametrize("index", [0, 1, 500, 997, 998], ids=lambda i: f"line-{i + 1}")
def test_a_chain_of_1000_with_one_line_deleted_fails_at_that_line(
    thousand: tuple[Path, Path, list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    index: int,
) -> None:
    home, public, lines = thousand
    kept = tmp_path / "checkpoints.txt"
    kept.write_text("\n".join(lines) + "\n", encoding="utf-8")
    check = ("--home", str(home), "--checkpoints", str(kept), "--public-key", str(public))
    assert verify_here(*check) == 0
    assert "audit: checkpoints hold: 1000, the latest at seq 999" in capsys.readouterr().out
    kept.write_text("\n".join(lines[:index] + lines[index + 1 :]) + "\n", encoding="utf-8")
    assert verify_here(*check) == 1
    done = capsys.readouterr()
    assert done.out.splitlines()[0].startswith(f"{kept}:{index + 1}: seq {index + 1}: ")
    assert len(done.out.splitlines()) == 1
    assert done.err == ROLLED_BACK


def test_a_chain_of_1000_with_its_last_line_deleted_is_a_rollback(
    thousand: tuple[Path, Path, list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    home, public, lines = thousand
    kept = tmp_path / "checkpoints.txt"
    kept.write_text("\n".join(lines) + "\n", encoding="utf-8")
    check = ("--home", str(home), "--checkpoints", str(kept), "--public-key", str(public))
    assert verify_here(*check) == 0
    capsys.readouterr()
    kept.write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    assert verify_here(*check) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{kept}:999: rolled back: the newest checkpoint is seq 998, older than seq 999 seen"
        f" before ({head_file(tmp_path / 'owner-state')})"
    ]


@pytest.mark.parametrize("case", ["moved", "edited", "inserted"])
def test_a_moved_edited_or_inserted_sealed_line_is_named(tmp_path: Path, case: str) -> None:
    home = tmp_path / "home"
    texts = [f"{append(home, 1, first=i)} {time_of(i)}" for i in range(4)]
    public = keygen(tmp_path / "owner.key")
    keygen(tmp_path / "intruder.key")
    lines = chain_of(tmp_path / "owner.key", texts)
    if case == "moved":
        lines[1], lines[2] = lines[2], lines[1]
    elif case == "edited":
        lines[2] = lines[2].replace(time_of(2), time_of(30))
    else:  # a line the intruder signed, linked as the owner's would be
        prev = hashlib.sha256(lines[1].encode("ascii")).hexdigest()
        lines.insert(2, sealed(tmp_path / "intruder.key", texts[1], prev))
    kept = tmp_path / "checkpoints.txt"
    kept.write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = verify(home, "--checkpoints", str(kept), "--public-key", str(public))
    assert done.returncode == 1
    first = done.stdout.splitlines()[0]
    assert first.startswith(f"{kept}:{2 if case == 'moved' else 3}: "), done.stdout
