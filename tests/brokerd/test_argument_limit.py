"""Arguments over 65,536 bytes: denied invalid_arguments, and never written whole to the log.

brokerd runs in this process on real sockets with a real audit writer; the log
is then checked with `bxctl audit verify`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from boxmaker.bxctl.main import main as bxctl
from boxmaker.core.audit.records import DecisionEvent
from boxmaker.core.grants.argument_size import MAX_ARGUMENT_BYTES
from boxmaker.core.grants.decisions import DeniedRecord, DenyReason
from boxmaker.core.hashes import sha256_hex
from boxmaker.core.wire.broker import DeniedResponse, ResultResponse, ToolRequest
from boxmaker.testing.daemons import InProcessBrokerd, running_brokerd
from boxmaker.testing.homes import read_records, write_grant


@pytest.fixture
def brokerd(tmp_path: Path) -> Iterator[InProcessBrokerd]:
    write_grant(
        tmp_path / "grants", "scratch-write", tool="write_file", paths=[str(tmp_path / "scratch")]
    )
    with running_brokerd(tmp_path) as b:
        yield b


def write(tmp_path: Path, size: int, tool: str = "write_file") -> ToolRequest:
    """A write_file call whose arguments are exactly `size` bytes."""
    fields = {"path": str(tmp_path / "scratch" / "a.md"), "content": ""}
    padding = size - len(orjson.dumps(fields))
    fields["content"] = "x" * padding
    arguments = orjson.dumps(fields).decode()
    assert len(arguments.encode()) == size
    return ToolRequest(session="chat-1", call="c1", tool=tool, arguments=arguments)


def audit_lines(home: Path) -> list[bytes]:
    return [
        line
        for path in sorted((home / "audit").iterdir())
        for line in path.read_bytes().splitlines()
    ]


def test_arguments_over_the_limit_are_denied_and_recorded_as_their_size_and_hash(
    brokerd: InProcessBrokerd, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request = write(tmp_path, 200_000)
    answer = brokerd.tool(request, "c1")[-1].message
    assert answer == DeniedResponse(
        reason=DenyReason.INVALID_ARGUMENTS,
        detail="the arguments are 200000 bytes, over the 65536-byte limit",
    )
    assert brokerd.runtime.count == 0
    (line,) = audit_lines(brokerd.home)
    assert len(line) < 1024
    (record,) = read_records(brokerd.home)
    event = record.event
    assert isinstance(event, DecisionEvent)
    digest = sha256_hex(request.arguments.encode())
    assert event.arguments == (
        f"[arguments not recorded: 200000 bytes, over the 65536-byte limit; sha256 {digest}]"
    )
    assert event.outcome == DeniedRecord(reason=DenyReason.INVALID_ARGUMENTS)

    assert bxctl(["audit", "verify", "--home", str(brokerd.home)]) == 0
    assert capsys.readouterr().out.startswith("audit: ok, 1 records, head ")


def test_a_call_to_an_unknown_tool_never_writes_large_arguments_either(
    brokerd: InProcessBrokerd, tmp_path: Path
) -> None:
    answer = brokerd.tool(write(tmp_path, 900_000, tool="format_disk"), "c1")[-1].message
    assert answer == DeniedResponse(reason=DenyReason.NO_GRANT)
    (line,) = audit_lines(brokerd.home)
    assert len(line) < 1024


def test_arguments_of_exactly_the_limit_are_decided_and_recorded_whole(
    brokerd: InProcessBrokerd, tmp_path: Path
) -> None:
    request = write(tmp_path, MAX_ARGUMENT_BYTES)
    answer = brokerd.tool(request, "c1")[-1].message
    assert isinstance(answer, ResultResponse)
    decision = read_records(brokerd.home)[0].event
    assert isinstance(decision, DecisionEvent)
    assert decision.arguments == request.arguments
