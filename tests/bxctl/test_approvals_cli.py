"""`bxctl approvals`, `approve`, `refuse` and `grants check` against a real brokerd.

brokerd runs in this process on real Unix sockets (with a real audit writer and
the recording runtime); bxctl's `main` runs here too, so its output and exit
status are read directly. What is printed comes from brokerd, and arguments are
printed as data: no control, invisible or direction character reaches the
terminal, and the printed text is still exactly the arguments.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from boxmaker.bxctl.main import main as bxctl
from boxmaker.core.audit.records import ApprovalEvent, DecisionEvent
from boxmaker.core.grants.decisions import DenyReason
from boxmaker.core.wire.broker import (
    DeniedResponse,
    PendingApprovalResponse,
    ResultResponse,
    ToolRequest,
)
from boxmaker.testing.daemons import InProcessBrokerd, running_brokerd
from boxmaker.testing.homes import write_grant
from boxmaker.testing.hostile_text import CONTROLS
from boxmaker.testing.sockets import OpenCall

UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
NO_SUCH = "{}: no such approval (already answered or expired)\n"


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    return tmp_path / "scratch"


@pytest.fixture
def brokerd(tmp_path: Path, scratch: Path) -> Iterator[InProcessBrokerd]:
    write_grant(
        tmp_path / "grants", "scratch-shell", tool="shell", mode="ask", paths=[str(scratch)]
    )
    with running_brokerd(tmp_path) as b:
        yield b


def run(
    b: InProcessBrokerd, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    status = bxctl([*args, "--admin-socket", str(b.admin_socket)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def ask(b: InProcessBrokerd, arguments: str, call: str = "c1") -> tuple[OpenCall, int]:
    request = ToolRequest(session="chat-1", call=call, tool="shell", arguments=arguments)
    open_call = b.open_call(request)
    first = open_call.first().message
    assert isinstance(first, PendingApprovalResponse)
    return open_call, first.approval


# --- approvals ------------------------------------------------------------------------


def test_no_approvals(brokerd: InProcessBrokerd, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(brokerd, capsys, "approvals") == (0, "no approvals pending\n", "")


def test_arguments_full_of_escape_sequences_are_printed_as_data(
    brokerd: InProcessBrokerd, scratch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    command = CONTROLS
    arguments = orjson.dumps({"command": command, "cwd": str(scratch)}).decode()
    call, approval = ask(brokerd, arguments)
    with call:
        status, out, err = run(brokerd, capsys, "approvals")
    assert (status, err) == (0, "")
    head, body = out.splitlines()
    assert re.fullmatch(
        rf"{approval}  \d+ s ago  expires in (15|14) min  session chat-1"
        r"  grant scratch-shell  taint private  digest [0-9a-f]{12}",
        head,
    ), head
    assert UNSAFE.search(out.replace("\n", "")) is None
    assert body.startswith("    shell {")
    shown = body.removeprefix("    shell ")
    for code in ("\\u202e", "\\u200b", "\\u2066", "\\u2069", "\\ufeff", "\\u001b", "\\u009b"):
        assert code in shown, code
    assert json.loads(shown) == {"command": command, "cwd": str(scratch)}


# invisible characters a terminal shows as nothing (or acts on), and their JSON spelling
INVISIBLE = [
    pytest.param("\u00ad", "\\u00ad", id="soft-hyphen"),
    pytest.param("\u034f", "\\u034f", id="combining-grapheme-joiner"),
    pytest.param("\u061c", "\\u061c", id="arabic-letter-mark"),
    pytest.param("\u115f", "\\u115f", id="hangul-choseong-filler"),
    pytest.param("\u17b5", "\\u17b5", id="khmer-vowel-inherent-aa"),
    pytest.param("\u180b", "\\u180b", id="mongolian-variation-selector"),
    pytest.param("\u2064", "\\u2064", id="invisible-plus"),
    pytest.param("\u3164", "\\u3164", id="hangul-filler"),
    pytest.param("\ufe0f", "\\ufe0f", id="variation-selector-16"),
    pytest.param("\uffa0", "\\uffa0", id="halfwidth-hangul-filler"),
    pytest.param("\U0001bca1", "\\ud82f\\udca1", id="shorthand-format"),
    pytest.param("\U0001d17a", "\\ud834\\udd7a", id="musical-end-phrase"),
    pytest.param("\U000e0001", "\\udb40\\udc01", id="language-tag"),
    pytest.param("\U000e0041", "\\udb40\\udc41", id="tag-latin-a"),
    pytest.param("\U000e007f", "\\udb40\\udc7f", id="cancel-tag"),
    pytest.param("\U000e0100", "\\udb40\\udd00", id="variation-selector-17"),
    pytest.param("\u0600", "\\u0600", id="arabic-number-sign"),
    pytest.param("\u2029", "\\u2029", id="paragraph-separator"),
    pytest.param("\ue000", "\\ue000", id="private-use"),
    pytest.param("\U000ffffd", "\\udbbf\\udffd", id="plane-15-private-use"),
    pytest.param("\u0378", "\\u0378", id="unassigned"),
    pytest.param("\ufffe", "\\ufffe", id="noncharacter"),
    pytest.param("\u2800", "\\u2800", id="braille-pattern-blank"),
    pytest.param("\u1160", "\\u1160", id="hangul-jungseong-filler"),
]


@pytest.mark.parametrize(("char", "spelled"), INVISIBLE)
def test_invisible_characters_in_arguments_are_shown_escaped(
    brokerd: InProcessBrokerd,
    scratch: Path,
    capsys: pytest.CaptureFixture[str],
    char: str,
    spelled: str,
) -> None:
    command = f"rm -rf {char}/ build{char}"
    arguments = orjson.dumps({"command": command, "cwd": str(scratch)}).decode()
    assert char in arguments  # sent raw, not as a JSON escape
    call, _ = ask(brokerd, arguments)
    with call:
        status, out, err = run(brokerd, capsys, "approvals")
    assert (status, err) == (0, "")
    assert char not in out
    shown = out.splitlines()[1].removeprefix("    shell ")
    assert f"rm -rf {spelled}/ build{spelled}" in shown
    assert json.loads(shown) == {"command": command, "cwd": str(scratch)}


def test_an_escaped_slash_in_the_request_is_shown_as_a_slash(
    brokerd: InProcessBrokerd, scratch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cwd = "\\u002f" + str(scratch)[1:]
    arguments = '{"command":"cat \\u002fetc/passwd","cwd":"' + cwd + '"}'
    call, _ = ask(brokerd, arguments)
    with call:
        status, out, _ = run(brokerd, capsys, "approvals")
    assert status == 0
    body = out.splitlines()[1]
    assert (
        body
        == "    shell " + orjson.dumps({"command": "cat /etc/passwd", "cwd": str(scratch)}).decode()
    )
    assert "\\u002f" not in out
    decision = brokerd.records()[-1].event
    assert isinstance(decision, DecisionEvent)
    assert decision.arguments == arguments  # the log keeps the raw text


# --- approve and refuse -------------------------------------------------------------------


def test_approve_prints_runs(
    brokerd: InProcessBrokerd, scratch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    call, approval = ask(brokerd, orjson.dumps({"command": "make", "cwd": str(scratch)}).decode())
    with call:
        assert run(brokerd, capsys, "approve", str(approval)) == (
            0,
            f"approved {approval}: runs\n",
            "",
        )
        assert isinstance(call.final().message, ResultResponse)
    assert brokerd.runtime.count == 1


def test_approve_with_a_digest_that_does_not_match_refuses_and_leaves_it_pending(
    brokerd: InProcessBrokerd, scratch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    call, approval = ask(brokerd, orjson.dumps({"command": "make", "cwd": str(scratch)}).decode())
    with call:
        status, out, _ = run(brokerd, capsys, "approvals")
        shown = re.search(r"  digest ([0-9a-f]{12})$", out.splitlines()[0])
        assert shown is not None
        digest = shown.group(1)
        wrong = ("0" if digest[0] != "0" else "1") + digest[1:]
        status, out, err = run(brokerd, capsys, "approve", str(approval), "--digest", wrong)
        assert (status, out) == (1, "")
        assert err == (
            f"bxctl: brokerd refused the request: digest_mismatch: approval {approval} has digest"
            f" {digest}, not {wrong}; it is still pending\n"
        )
        assert brokerd.runtime.count == 0
        assert run(brokerd, capsys, "approve", str(approval), "--digest", digest) == (
            0,
            f"approved {approval}: runs\n",
            "",
        )
        assert isinstance(call.final().message, ResultResponse)
    assert brokerd.runtime.count == 1


@pytest.mark.parametrize("digest", ["3f2a", "3F2A9C01B4DE", "3f2a9c01b4dz"])
def test_a_digest_that_is_not_hex_of_12_to_64_is_a_usage_error(
    brokerd: InProcessBrokerd, capsys: pytest.CaptureFixture[str], digest: str
) -> None:
    status, out, err = run(brokerd, capsys, "approve", "41", "--digest", digest)
    assert (status, out) == (2, "")
    assert len(err.splitlines()) == 1
    assert "is not a digest" in err


def test_approvals_names_the_call_that_made_the_session_untrusted(
    brokerd: InProcessBrokerd, tmp_path: Path, scratch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    web = tmp_path / "web"
    write_grant(brokerd.grants_dir, "web-read", tool="read_file", untrusted=True, paths=[str(web)])
    arguments = orjson.dumps({"path": str(web / "page")}).decode()
    read = ToolRequest(session="chat-1", call="r1", tool="read_file", arguments=arguments)
    assert isinstance(brokerd.tool(read, "r1")[-1].message, ResultResponse)
    call, approval = ask(brokerd, orjson.dumps({"command": "make", "cwd": str(scratch)}).decode())
    with call:
        status, out, err = run(brokerd, capsys, "approvals")
        assert (status, err) == (0, "")
        head, _body, since = out.splitlines()
        assert head.startswith(f"{approval}  ")
        assert since == "    untrusted since call r1 (read_file) of session chat-1"
        run(brokerd, capsys, "refuse", str(approval))
        call.final()


def test_approve_that_is_stale_says_why(
    brokerd: InProcessBrokerd, scratch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    call, approval = ask(brokerd, orjson.dumps({"command": "make", "cwd": str(scratch)}).decode())
    with call:
        write_grant(
            brokerd.grants_dir,
            "scratch-shell",
            tool="shell",
            mode="ask",
            paths=[str(scratch)],
            result_class="public",
        )
        assert run(brokerd, capsys, "approve", str(approval)) == (
            1,
            f"approved {approval}: denied (approval_stale): its grant or the session's taint"
            " changed since it was asked\n",
            "",
        )
        assert call.final().message == DeniedResponse(reason=DenyReason.APPROVAL_STALE)
    assert brokerd.runtime.count == 0


def test_approve_that_is_denied_prints_the_reason(
    brokerd: InProcessBrokerd, scratch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    call, approval = ask(brokerd, orjson.dumps({"command": "make", "cwd": str(scratch)}).decode())
    with call:
        (brokerd.grants_dir / "scratch-shell.toml").unlink()
        assert run(brokerd, capsys, "approve", str(approval)) == (
            1,
            f"approved {approval}: denied (no_grant)\n",
            "",
        )
        assert call.final().message == DeniedResponse(reason=DenyReason.NO_GRANT)
    assert brokerd.runtime.count == 0


def test_approve_when_the_audit_log_cannot_be_written(
    brokerd: InProcessBrokerd, scratch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    call, approval = ask(brokerd, orjson.dumps({"command": "make", "cwd": str(scratch)}).decode())
    with call:
        brokerd.files.fail_now()
        assert run(brokerd, capsys, "approve", str(approval)) == (
            1,
            f"approved {approval}: denied (audit_unavailable)\n",
            "",
        )
        assert call.final().message == DeniedResponse(reason=DenyReason.AUDIT_UNAVAILABLE)
    assert brokerd.runtime.count == 0


def test_refuse_prints_refused_and_records_the_reason(
    brokerd: InProcessBrokerd, scratch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    call, approval = ask(brokerd, orjson.dumps({"command": "make", "cwd": str(scratch)}).decode())
    reason = "not while I am away"
    with call:
        assert run(brokerd, capsys, "refuse", str(approval), "--reason", reason) == (
            0,
            f"refused {approval}\n",
            "",
        )
        assert call.final().message == DeniedResponse(reason=DenyReason.APPROVAL_REFUSED)
    event = brokerd.records()[-1].event
    assert isinstance(event, ApprovalEvent)
    assert event.reason == reason


@pytest.mark.parametrize("command", ["approve", "refuse"])
def test_an_id_not_pending(
    brokerd: InProcessBrokerd, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    assert run(brokerd, capsys, command, "41") == (1, NO_SUCH.format(41), "")


@pytest.mark.parametrize("first", ["approve", "refuse"])
def test_an_id_already_answered(
    brokerd: InProcessBrokerd, scratch: Path, capsys: pytest.CaptureFixture[str], first: str
) -> None:
    call, approval = ask(brokerd, orjson.dumps({"command": "make", "cwd": str(scratch)}).decode())
    with call:
        assert run(brokerd, capsys, first, str(approval))[0] == 0
        for again in ("approve", "refuse"):
            assert run(brokerd, capsys, again, str(approval)) == (1, NO_SUCH.format(approval), "")


def test_the_admin_socket_defaults_to_the_one_under_boxmaker_home(
    brokerd: InProcessBrokerd, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BOXMAKER_HOME", str(brokerd.home))
    assert bxctl(["approvals"]) == 0
    assert capsys.readouterr().out == "no approvals pending\n"


# --- grants check, asking brokerd ------------------------------------------------------------


def test_grants_check_without_dir_asks_brokerd(
    brokerd: InProcessBrokerd, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(brokerd, capsys, "grants", "check") == (0, "grants: ok\n", "")
    (brokerd.grants_dir / "bad-deny.toml").write_text(
        'tool = "read_file"\nmode = "deny"\nmax_taint = "private"\nresult_class = "private"\n'
        '[constraints]\npaths = ["/home/owner/keys"]\n'
    )
    (brokerd.grants_dir / "Bad_Name.toml").write_text("")
    status, out, err = run(brokerd, capsys, "grants", "check")
    assert status == 1
    assert err == "see runbook.md#grants-invalid\n"
    assert "bad-deny.toml" in out
    assert "Bad_Name.toml" in out
    # the same lines as reading the directory directly
    assert bxctl(["grants", "check", "--dir", str(brokerd.grants_dir)]) == 1
    assert capsys.readouterr().out == out


def test_grants_check_without_dir_needs_brokerd(
    brokerd: InProcessBrokerd, capsys: pytest.CaptureFixture[str]
) -> None:
    brokerd.stop()
    status, out, err = run(brokerd, capsys, "grants", "check")
    assert (status, out) == (1, "")
    assert err.rstrip().endswith("see runbook.md#broker-unavailable")
