"""Answers too large for one frame: a tool result is cut to fit, the approval list is paged.

brokerd runs in this process on real sockets, with a real audit writer and a
recording runtime that returns what each test needs; bxctl's commands run here
too, against the same sockets.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from boxmaker.brokerd.config import MAX_OUTPUT_BYTES, load_config
from boxmaker.bxctl.chat_turns import handle_pending
from boxmaker.bxctl.main import main as bxctl
from boxmaker.core.audit.records import ResultEvent
from boxmaker.core.errors import ConfigError
from boxmaker.core.hashes import sha256_hex
from boxmaker.core.wire.broker import PendingApprovalResponse, ResultResponse, ToolRequest
from boxmaker.core.wire.broker_admin import ApprovalList, Approvals, PendingApproval
from boxmaker.core.wire.envelope import encode_envelope
from boxmaker.core.wire.frame_fit import FRAME_BUDGET, envelope_size
from boxmaker.core.wire.frames import MAX_FRAME
from boxmaker.sandbox.runner import RunOutput
from boxmaker.testing.daemons import InProcessBrokerd, running_brokerd
from boxmaker.testing.homes import verify_log, write_grant
from boxmaker.testing.runtime import RecordingRuntime

ASKS = 10
QUOTES = 32_000  # 64 KB of arguments each, 128 KB on the wire once escaped again


@pytest.fixture
def brokerd(tmp_path: Path) -> Iterator[InProcessBrokerd]:
    grants = tmp_path / "grants"
    write_grant(grants, "notes-read", tool="read_file", paths=[str(tmp_path / "notes")])
    scratch = tmp_path / "scratch"
    write_grant(grants, "scratch-shell", tool="shell", mode="ask", paths=[str(scratch)])
    with running_brokerd(tmp_path, runtime=RecordingRuntime()) as b:
        yield b


def read(tmp_path: Path, call: str = "c1") -> ToolRequest:
    arguments = orjson.dumps({"path": str(tmp_path / "notes" / "big.txt")}).decode()
    return ToolRequest(session="chat-1", call=call, tool="read_file", arguments=arguments)


@pytest.mark.parametrize(
    "content",
    [
        pytest.param("a" * 2_000_000, id="2-MB-of-ascii"),
        pytest.param("\x01" * 200_000, id="200-KB-escaped-to-1.2-MB"),
        pytest.param("é" * 600_000, id="1.2-MB-of-two-byte-characters"),
    ],
)
def test_a_result_too_large_for_a_frame_is_cut_marked_and_recorded_as_sent(
    brokerd: InProcessBrokerd, tmp_path: Path, content: str
) -> None:
    brokerd.runtime.answer = RunOutput(content=content, truncated=False)
    (answer,) = brokerd.tool(read(tmp_path), "c1")
    message = answer.message
    assert isinstance(message, ResultResponse)
    assert message.truncated
    assert content.startswith(message.content)
    assert len(message.content) > 100_000
    assert len(encode_envelope(answer)) <= FRAME_BUDGET
    (result,) = [r.event for r in brokerd.records() if isinstance(r.event, ResultEvent)]
    assert isinstance(result, ResultEvent)
    sent = message.content.encode()
    assert (result.bytes, result.sha256, result.truncated) == (len(sent), sha256_hex(sent), True)
    assert verify_log(brokerd.home).ok


def test_a_result_that_fits_is_sent_whole(brokerd: InProcessBrokerd, tmp_path: Path) -> None:
    brokerd.runtime.answer = RunOutput(content="b" * 500_000, truncated=False)
    message = brokerd.tool(read(tmp_path), "c1")[-1].message
    assert isinstance(message, ResultResponse)
    assert message.content == "b" * 500_000
    assert not message.truncated


def ask(tmp_path: Path, n: int) -> ToolRequest:
    arguments = orjson.dumps({"command": '"' * QUOTES, "cwd": str(tmp_path / "scratch")})
    return ToolRequest(session="chat-1", call=f"s{n}", tool="shell", arguments=arguments.decode())


@pytest.fixture
def waiting(brokerd: InProcessBrokerd, tmp_path: Path) -> Iterator[list[int]]:
    calls = [brokerd.open_call(ask(tmp_path, n)) for n in range(ASKS)]
    try:
        ids = []
        for call in calls:
            first = call.first().message
            assert isinstance(first, PendingApprovalResponse)
            ids.append(first.approval)
        yield ids
    finally:
        for call in calls:
            call.drop()


def test_many_large_asks_are_listed_in_pages_that_each_fit(
    brokerd: InProcessBrokerd, waiting: list[int]
) -> None:
    answers = brokerd.admin(Approvals(), "a1")
    assert len(answers) > 1
    assert [a.final for a in answers] == [False] * (len(answers) - 1) + [True]
    items: list[PendingApproval] = []
    for answer in answers:
        assert answer.id == "a1"
        assert isinstance(answer.message, ApprovalList)
        assert envelope_size(answer.message, "a1", final=answer.final) <= MAX_FRAME
        items += answer.message.items
    assert [i.approval for i in items] == sorted(waiting)


def test_bxctl_approvals_shows_every_large_ask(
    brokerd: InProcessBrokerd, waiting: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    status = bxctl(["approvals", "--admin-socket", str(brokerd.admin_socket)])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    heads = [line.split()[0] for line in captured.out.splitlines() if not line.startswith(" ")]
    assert heads == [str(n) for n in sorted(waiting)]


def test_chat_finds_a_large_ask_on_a_later_page(
    brokerd: InProcessBrokerd, waiting: list[int]
) -> None:
    out = io.StringIO()
    handle_pending(brokerd.admin_socket, max(waiting), False, brokerd.clock(), io.StringIO(), out)
    text = out.getvalue()
    assert text.startswith(f"{max(waiting)}  "), text[:200]  # not a terminal: no reset
    assert "no longer pending" not in text


def test_output_bytes_is_capped_at_load(tmp_path: Path) -> None:
    path = tmp_path / "brokerd.toml"
    path.write_text(f"[runner]\noutput_bytes = {MAX_OUTPUT_BYTES}\n")
    assert load_config(path, {}).runner.output_bytes == MAX_OUTPUT_BYTES
    assert load_config(None, {}).runner.output_bytes == MAX_OUTPUT_BYTES
    path.write_text(f"[runner]\noutput_bytes = {MAX_OUTPUT_BYTES + 1}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, {})
    assert "`runner.output_bytes`" in str(caught.value)
    assert "\n" not in str(caught.value)
