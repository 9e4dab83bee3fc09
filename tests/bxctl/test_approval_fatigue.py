"""`bxctl approvals --stats` and `bxctl grants suggest` over a frozen fixture log.

The log in tests/fixtures/approvals/audit/ was written by the real AuditWriter
(`write_fixture_log` below; `test_the_fixture_is_what_the_writer_writes` holds it
to that, and running this file as a script regenerates it). It holds, besides
allowed and denied calls, 11 asks by three grants (tests/fixtures/approvals/grants/):

    #   grant          day  call                                       answer     after
    1   projects-read  1    read  /home/kyle/projects/boxmaker/README.md  approved   4 s
    2   projects-read  1    read  .../boxmaker/src/main.py               approved  10 s
    3   projects-read  1    read  .../boxmaker/docs/a.md                 approved   6 s
    5   projects-read  1    read  /home/kyle/projects/other/secret.txt    refused    8 s
    6   docs-fetch     1    https://docs.python.org/3/library/json.html approved   2 s
    8   docs-fetch     1    https://evil.python.org/x                   refused    5 s
    9   docs-fetch     1    https://peps.python.org/pep-0008/           expired  900 s
    10  scratch-shell  1    make in /home/kyle/scratch/build            refused   20 s
    4   projects-read  2    read  .../boxmaker/setup.cfg                 approved  30 s
    7   docs-fetch     2    https://docs.python.org/3/                  approved   3 s
    11  scratch-shell  2    make test in /home/kyle/scratch/build       (none: abandoned)

Hand count (answer times: approved and refused only; nearest rank):
    projects-read  5 asks, 4 approved, 1 refused; rate 4/5; times 4 6 8 10 30: median 8, p90 30
    docs-fetch     4 asks, 2 approved, 1 refused, 1 expired; rate 2/4; times 2 3 5: median 3, p90 5
    scratch-shell  2 asks, 1 refused, 1 abandoned; rate 0/1; times 20: median 20, p90 20
    total          11 asks, 6 approved, 3 refused, 1 expired, 1 abandoned; rate 6/10;
                   times 2 3 4 5 6 8 10 20 30: median 6 (5th of 9), p90 30 (9th of 9)
    since day 2    asks 4, 7, 11: 3 asks, 2 approved, 1 abandoned; rate 2/2; times 3 30
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from boxmaker.brokerd.audit_startup import Started, start_audit
from boxmaker.core.audit.records import (
    ApprovalAnswer,
    ApprovalEvent,
    AuditEvent,
    DecisionEvent,
    ResultEvent,
    ResultStatus,
)
from boxmaker.core.grants.decisions import (
    AllowedRecord,
    AskRecord,
    DecisionRecord,
    DeniedRecord,
    DenyReason,
)
from boxmaker.core.grants.loading import parse_grant_file
from boxmaker.core.grants.model import Mode
from boxmaker.core.hashes import sha256_hex
from boxmaker.core.labels import DataClass

BXCTL = str(Path(sys.executable).parent / "bxctl")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "approvals"
AUDIT = FIXTURES / "audit"
GRANTS = FIXTURES / "grants"
DAY1, DAY2 = "2026-11-30", "2026-12-01"

# --- the fixture log -----------------------------------------------------------------


def _grant_hash(grant: str) -> str | None:
    path = GRANTS / f"{grant}.toml"
    return sha256_hex(path.read_bytes()) if path.exists() else None


class _Log:
    """Appends the fixture's records through the real writer."""

    def __init__(self, audit_dir: Path) -> None:
        started = start_audit(audit_dir, f"{DAY1}T08:00:00.000Z")
        assert isinstance(started, Started)
        self.writer = started.writer
        self.calls = 0

    def append(self, event: AuditEvent, time: str) -> int:
        return self.writer.append(event, time).seq

    def decide(
        self, tool: str, arguments: dict[str, str], grant: str | None, outcome: str, at: str
    ) -> tuple[str, int]:
        self.calls += 1
        call = f"c{self.calls}"
        records: dict[str, DecisionRecord] = {
            "ask": AskRecord(),
            "allowed": AllowedRecord(),
            "denied": DeniedRecord(reason=DenyReason.NO_GRANT),
        }
        record = records[outcome]
        seq = self.append(
            DecisionEvent(
                session="chat-1",
                call=call,
                tool=tool,
                arguments=json.dumps(arguments, separators=(",", ":")),
                outcome=record,
                grant=grant,
                grant_sha256=None if grant is None else _grant_hash(grant),
                taint=DataClass.PRIVATE,
                untrusted=False,
            ),
            at,
        )
        return call, seq

    def answer(self, call: str, seq: int, grant: str, answer: ApprovalAnswer, at: str) -> None:
        approved = answer is ApprovalAnswer.APPROVED
        reason = {
            ApprovalAnswer.APPROVED: None,
            ApprovalAnswer.REFUSED: DenyReason.APPROVAL_REFUSED,
            ApprovalAnswer.EXPIRED: DenyReason.APPROVAL_EXPIRED,
        }[answer]
        self.append(
            ApprovalEvent(
                session="chat-1",
                call=call,
                decision=seq,
                answer=answer,
                by=None if answer is ApprovalAnswer.EXPIRED else "bxctl",
                reason="not that one" if answer is ApprovalAnswer.REFUSED else None,
                outcome=AskRecord() if reason is None else DeniedRecord(reason=reason),
                grant=grant if approved else None,
                grant_sha256=_grant_hash(grant) if approved else None,
                taint=DataClass.PRIVATE,
                untrusted=False,
            ),
            at,
        )

    def result(self, call: str, seq: int, at: str) -> None:
        self.append(
            ResultEvent(
                session="chat-1",
                call=call,
                decision=seq,
                status=ResultStatus.RESULT,
                class_=DataClass.PRIVATE,
                untrusted=False,
                truncated=False,
                bytes=2,
                sha256=sha256_hex(b"ok"),
                taint_after=DataClass.PRIVATE,
            ),
            at,
        )


APPROVED, REFUSED, EXPIRED = ApprovalAnswer.APPROVED, ApprovalAnswer.REFUSED, ApprovalAnswer.EXPIRED
P = "/home/kyle/projects"
ASKS = [  # (grant, tool, arguments, asked, answer, answered): the table above, in log order
    (
        "projects-read",
        "read_file",
        {"path": f"{P}/boxmaker/README.md"},
        "09:01:00.000",
        APPROVED,
        "09:01:04.000",
    ),
    (
        "projects-read",
        "read_file",
        {"path": f"{P}/boxmaker/src/main.py"},
        "09:05:00.000",
        APPROVED,
        "09:05:10.000",
    ),
    (
        "projects-read",
        "read_file",
        {"path": f"{P}/boxmaker/docs/a.md"},
        "09:10:00.000",
        APPROVED,
        "09:10:06.000",
    ),
    (
        "projects-read",
        "read_file",
        {"path": f"{P}/other/secret.txt"},
        "09:20:00.000",
        REFUSED,
        "09:20:08.000",
    ),
    (
        "docs-fetch",
        "http_fetch",
        {"url": "https://docs.python.org/3/library/json.html"},
        "10:00:00.000",
        APPROVED,
        "10:00:02.000",
    ),
    (
        "docs-fetch",
        "http_fetch",
        {"url": "https://evil.python.org/x"},
        "10:05:00.000",
        REFUSED,
        "10:05:05.000",
    ),
    (
        "docs-fetch",
        "http_fetch",
        {"url": "https://peps.python.org/pep-0008/"},
        "10:10:00.000",
        EXPIRED,
        "10:25:00.000",
    ),
    (
        "scratch-shell",
        "shell",
        {"command": "make", "cwd": "/home/kyle/scratch/build"},
        "11:00:00.000",
        REFUSED,
        "11:00:20.000",
    ),
]
ASKS_DAY2 = [
    (
        "projects-read",
        "read_file",
        {"path": f"{P}/boxmaker/setup.cfg"},
        "08:00:00.000",
        APPROVED,
        "08:00:30.000",
    ),
    (
        "docs-fetch",
        "http_fetch",
        {"url": "https://docs.python.org/3/"},
        "08:10:00.000",
        APPROVED,
        "08:10:03.000",
    ),
    (
        "scratch-shell",
        "shell",
        {"command": "make test", "cwd": "/home/kyle/scratch/build"},
        "08:20:00.000",
        None,
        None,
    ),
]


def write_fixture_log(audit_dir: Path) -> None:
    """The fixture log (module docstring), written by the real writer into `audit_dir`."""
    log = _Log(audit_dir)
    # noise: an allowed call with its result, and a denied one
    call, seq = log.decide(
        "read_file",
        {"path": "/home/kyle/notes/a.md"},
        "notes-read",
        "allowed",
        f"{DAY1}T09:00:00.000Z",
    )
    log.result(call, seq, f"{DAY1}T09:00:00.500Z")
    for day, asks in ((DAY1, ASKS), (DAY2, ASKS_DAY2)):
        for grant, tool, arguments, asked, answer, answered in asks:
            call, seq = log.decide(tool, arguments, grant, "ask", f"{day}T{asked}Z")
            if grant == "docs-fetch" and answer is REFUSED:  # another call while it waits
                other, other_seq = log.decide(
                    "read_file",
                    {"path": "/home/kyle/notes/b.md"},
                    "notes-read",
                    "allowed",
                    f"{day}T10:05:01.000Z",
                )
                log.result(other, other_seq, f"{day}T10:05:01.100Z")
            if answer is not None and answered is not None:
                log.answer(call, seq, grant, answer, f"{day}T{answered}Z")
                if answer is APPROVED:
                    log.result(call, seq, f"{day}T{answered[:-3]}500Z")
    log.decide(
        "write_file",
        {"path": "/etc/passwd", "content": "x"},
        None,
        "denied",
        f"{DAY2}T09:00:00.000Z",
    )
    log.writer.close()


def test_the_fixture_is_what_the_writer_writes(tmp_path: Path) -> None:
    write_fixture_log(tmp_path / "audit")
    for day in (DAY1, DAY2):
        name = f"{day}.jsonl"
        assert (tmp_path / "audit" / name).read_bytes() == (AUDIT / name).read_bytes(), name


def test_the_fixture_verifies(tmp_path: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(AUDIT, home / "audit")
    done = bxctl("audit", "verify", "--home", home)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0].startswith("audit: ok, 32 records, head ")


def bxctl(*args: str | Path, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if home is not None:
        env["BOXMAKER_HOME"] = str(home)
    return subprocess.run(
        [BXCTL, *map(str, args)], capture_output=True, text=True, check=False, env=env, timeout=60
    )


# --- bxctl approvals --stats -----------------------------------------------------------

TABLE = [
    "grant          asks  approved  refused  expired  abandoned  rate  median     p90",
    "projects-read     5         4        1        0          0   80%   8.0 s  30.0 s",
    "docs-fetch        4         2        1        1          0   50%   3.0 s   5.0 s",
    "scratch-shell     2         0        1        0          1    0%  20.0 s  20.0 s",
    "total            11         6        3        1          1   60%   6.0 s  30.0 s",
]


def test_stats_match_the_hand_count(tmp_path: Path) -> None:
    done = bxctl("approvals", "--stats", "--dir", AUDIT, home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == TABLE
    assert done.stderr == ""


def test_stats_come_from_boxmaker_home_by_default(tmp_path: Path) -> None:
    shutil.copytree(AUDIT, tmp_path / "audit")
    done = bxctl("approvals", "--stats", home=tmp_path)
    assert done.stdout.splitlines() == TABLE


def _row(
    asks: int,
    approved: int,
    refused: int,
    expired: int,
    abandoned: int,
    rate: float | None,
    median: int | None,
    p90: int | None,
) -> dict[str, object]:
    return {
        "asks": asks,
        "approved": approved,
        "refused": refused,
        "expired": expired,
        "abandoned": abandoned,
        "approve_rate": rate,
        "median_answer_ms": median,
        "p90_answer_ms": p90,
    }


def test_stats_json_match_the_hand_count(tmp_path: Path) -> None:
    done = bxctl("approvals", "--stats", "--json", "--dir", AUDIT, home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "since": None,
        "grants": [
            {"grant": "projects-read", **_row(5, 4, 1, 0, 0, 0.8, 8000, 30000)},
            {"grant": "docs-fetch", **_row(4, 2, 1, 1, 0, 0.5, 3000, 5000)},
            {"grant": "scratch-shell", **_row(2, 0, 1, 0, 1, 0.0, 20000, 20000)},
        ],
        "total": _row(11, 6, 3, 1, 1, 0.6, 6000, 30000),
        "skipped_lines": 0,
    }
    assert len(done.stdout.splitlines()) == 1


def test_stats_since_a_day(tmp_path: Path) -> None:
    done = bxctl("approvals", "--stats", "--since", DAY2, "--dir", AUDIT, home=tmp_path)
    assert done.stdout.splitlines() == [
        "grant          asks  approved  refused  expired  abandoned  rate  median     p90",
        "docs-fetch        1         1        0        0          0  100%   3.0 s   3.0 s",
        "projects-read     1         1        0        0          0  100%  30.0 s  30.0 s",
        "scratch-shell     1         0        0        0          1     -       -       -",
        "total             3         2        0        0          1  100%   3.0 s  30.0 s",
    ]
    done = bxctl("approvals", "--stats", "--json", "--since", DAY2, "--dir", AUDIT, home=tmp_path)
    found = json.loads(done.stdout)
    assert found["since"] == DAY2
    assert found["total"] == _row(3, 2, 0, 0, 1, 1.0, 3000, 30000)
    done = bxctl("approvals", "--stats", "--since", "2026-12-02", "--dir", AUDIT, home=tmp_path)
    assert (done.returncode, done.stdout) == (0, "no asks in the audit log since 2026-12-02\n")


def test_stats_skip_a_torn_line_and_say_so(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    shutil.copytree(AUDIT, audit)
    with (audit / f"{DAY2}.jsonl").open("ab") as file:
        file.write(b'{"seq":32')
    done = bxctl("approvals", "--stats", home=tmp_path)
    assert done.returncode == 0
    assert done.stdout.splitlines() == TABLE
    assert done.stderr == "approvals: skipped 1 lines that are not audit records\n"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--stats", "--since", "2026-13-01"), "--since: not a day"),
        (("--stats", "--since", "yesterday"), "--since: not a day"),
        (("--json",), "go with --stats"),
    ],
    ids=["no-such-month", "not-a-date", "json-without-stats"],
)
def test_stats_usage_errors_are_one_line(
    tmp_path: Path, args: tuple[str, ...], needle: str
) -> None:
    done = bxctl("approvals", *args, "--dir", AUDIT, home=tmp_path)
    assert done.returncode == 2
    assert needle in done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_stats_of_a_missing_directory_is_one_line(tmp_path: Path) -> None:
    done = bxctl("approvals", "--stats", "--dir", tmp_path / "nowhere", home=tmp_path)
    assert done.returncode == 1
    assert len(done.stderr.splitlines()) == 1
    assert "Traceback" not in done.stderr


# --- bxctl grants suggest -----------------------------------------------------------------


def suggest(tmp_path: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    args: tuple[str | Path, ...] = ("--dir", AUDIT, "--grants", GRANTS, "--out", out, *extra)
    return bxctl("grants", "suggest", *args, home=tmp_path / "home")


def test_suggest_writes_the_narrower_grant(tmp_path: Path) -> None:
    out = tmp_path / "projects-boxmaker.toml"
    done = suggest(tmp_path, out)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"wrote {out}: grant projects-read narrowed to /home/kyle/projects/boxmaker,"
        " mode auto, from 4 approvals",
        f"not applied: review it, then move it into {GRANTS} by hand",
    ]
    text = out.read_text()
    grant, problems = parse_grant_file(out.name, text.encode())
    assert problems == []
    assert grant is not None
    assert (grant.id, grant.tool, grant.mode) == ("projects-boxmaker", "read_file", Mode.AUTO)
    assert grant.paths == ("/home/kyle/projects/boxmaker",)
    assert (grant.max_taint, grant.result_class) == (DataClass.PRIVATE, DataClass.PRIVATE)
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert header[0] == ("# Suggested by `bxctl grants suggest` from 4 approvals of asks by")
    assert header[1] == (
        "# grant projects-read (read_file), asked between 2026-11-30T09:01:00.000Z"
        " and 2026-12-01T08:00:00.000Z."
    )
    assert "NOT APPLIED" in text
    assert "move it into the grants" in text


def test_suggest_with_fewer_approvals_lists_the_hosts_too(tmp_path: Path) -> None:
    out = tmp_path / "suggested.toml"
    done = suggest(tmp_path, out, "--min-approvals", "2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == (
        "also qualifies: grant docs-fetch narrowed to docs.python.org, 2 approvals"
    )
    grant, _problems = parse_grant_file(out.name, out.read_bytes())
    assert grant is not None
    assert grant.paths == ("/home/kyle/projects/boxmaker",)


def test_suggest_keeps_the_labels_of_the_grant_it_narrows(tmp_path: Path) -> None:
    grants = tmp_path / "grants"
    shutil.copytree(GRANTS, grants)
    (grants / "projects-read.toml").unlink()  # only docs-fetch is left to narrow
    out = tmp_path / "docs.toml"
    args = ("--dir", AUDIT, "--grants", grants, "--out", out, "--min-approvals", "2")
    done = bxctl("grants", "suggest", *args, home=tmp_path / "home")
    assert done.returncode == 0, done.stderr
    grant, problems = parse_grant_file(out.name, out.read_bytes())
    assert problems == []
    assert grant is not None
    assert (grant.tool, grant.mode, grant.hosts, grant.paths) == (
        "http_fetch",
        Mode.AUTO,
        ("docs.python.org",),
        (),
    )
    assert (grant.max_taint, grant.result_class, grant.untrusted) == (
        DataClass.SECRET,
        DataClass.PUBLIC,
        True,
    )
    assert grant.expires == "2027-06-01T00:00:00.000Z"


def test_suggest_with_nothing_qualifying_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "suggested.toml"
    done = suggest(tmp_path, out, "--min-approvals", "5")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("nothing to suggest: ")
    assert len(done.stdout.splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize("where", ["grants", "home"])
def test_suggest_refuses_an_out_in_the_grants_dir_or_home(tmp_path: Path, where: str) -> None:
    grants = tmp_path / "grants"
    shutil.copytree(GRANTS, grants)
    home = tmp_path / "home"
    (home / "audit").mkdir(parents=True)
    target = {"grants": grants, "home": home / "audit"}[where] / "projects-boxmaker.toml"
    args = ("--dir", AUDIT, "--grants", grants, "--out", target)
    done = bxctl("grants", "suggest", *args, home=home)
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1
    assert "write the suggestion elsewhere" in done.stderr
    assert not target.exists()
    assert sorted(p.name for p in grants.iterdir()) == sorted(p.name for p in GRANTS.iterdir())


def test_suggest_refuses_a_name_that_is_no_grant_file_and_an_existing_file(tmp_path: Path) -> None:
    done = suggest(tmp_path, tmp_path / "Suggested.txt")
    assert done.returncode == 2
    assert "a grant file name is" in done.stderr
    out = tmp_path / "taken.toml"
    out.write_text("mine\n")
    done = suggest(tmp_path, out)
    assert done.returncode == 1
    assert "exists already" in done.stderr
    assert out.read_text() == "mine\n"


if __name__ == "__main__":  # regenerate the fixture: python tests/bxctl/test_approval_fatigue.py
    for old in AUDIT.glob("*.jsonl"):
        old.unlink()
    write_fixture_log(AUDIT)
    (AUDIT / ".lock").unlink(missing_ok=True)
