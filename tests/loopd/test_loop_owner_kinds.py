"""loop.sock as a root install serves it: the owner's kinds for the owner's uid alone.

Real users, as `tests/e2e/test_tree_root.py` makes them: an owner, a stand-in for
gatewayd's user and one more member, all three in the socket's group, and one
user outside it. loopd runs in this process (root) with `group_access = true`
and `[sockets] owner_user` naming the owner, over the scripted model; each request
is sent by a child process running as one of the users (`runuser`, the
standard-library Python), and its answer frames are read back here. Per kind
and peer: the owner gets every kind answered; gatewayd's stand-in and the other
member get `turn` and `status` answered and `forbidden` for `sessions`,
`session_show` and `compact`; the outsider is refused by the kernel.

Needs root (CI runs as root); elsewhere it is skipped, and says so. The users
and the group it made are removed afterwards, whatever happens.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from support.skips import skip_or_fail

from boxmaker.core.errors import ErrorCode
from boxmaker.core.home.layout import Home
from boxmaker.core.home.links import LOOP
from boxmaker.core.model.chat_format import GEMMA
from boxmaker.core.model.compaction_plan import SUMMARY_INSTRUCTION
from boxmaker.core.model.dialect import from_format
from boxmaker.core.wire.common import Error, Status, StatusReport
from boxmaker.core.wire.connection import ClientConnection
from boxmaker.core.wire.envelope import Envelope, Message, decode_envelope
from boxmaker.core.wire.frames import FrameDecoder
from boxmaker.core.wire.loop import (
    Compact,
    ContextCompactedEvent,
    SessionEntries,
    SessionList,
    Sessions,
    SessionShow,
    Turn,
    TurnDone,
    TurnEvent,
)
from boxmaker.loopd.config import (
    BrokerSection,
    LoopdConfig,
    MemorySection,
    PathsSection,
    SocketsSection,
)
from boxmaker.loopd.limits import TurnLimits
from boxmaker.loopd.serve import Loopd
from boxmaker.testing.scripted_model import ScriptedModel

if os.geteuid() != 0:
    skip_or_fail(
        "real peers need root to make users: loop.sock's owner-kind tests did NOT run",
        allow_module_level=True,
    )

PYTHON = "/usr/bin/python3"  # the users' own: the suite's may live under /root
GROUP = "bxpk-loop-clients"
OWNER = "bxpk-owner"
GATEWAY = "bxpk-gateway"  # gatewayd's user stands in: any uid not the owner's
MEMBER = "bxpk-member"
OUTSIDER = "bxpk-outsider"
MEMBERS = (OWNER, GATEWAY, MEMBER)
USERS = (*MEMBERS, OUTSIDER)
SESSION = "chat-1"  # the owner's: three long turns, enough to compact
# tokens are characters (the scripted model): three turns pass 85% of 3,000
LIMITS = TurnLimits(
    stream_interval_s=0, context=3_000, compact_at=0.85, summary_tokens=200, keep_turns=1
)
PROBE = (
    "import socket,sys\n"
    "s=socket.socket(socket.AF_UNIX)\n"
    "s.settimeout(60)\n"
    "try:\n s.connect(sys.argv[1])\n"
    "except PermissionError:\n print('EACCES'); sys.exit(0)\n"
    "s.sendall(bytes.fromhex(sys.argv[2]))\n"
    "data=b''\n"
    "while chunk:=s.recv(65536): data+=chunk\n"
    "print(data.hex())\n"
)


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def _remove_accounts() -> None:
    for user in USERS:
        _run("userdel", user)
    for group in (GROUP, *USERS):
        _run("groupdel", group)


def reply(prompt: str) -> str:
    """The scripted model: a summary when asked for one, else a short answer."""
    last = prompt.rsplit("<start_of_turn>user", 1)[-1]
    return "Summary: the owner talked." if SUMMARY_INSTRUCTION in last else "Noted."


@dataclass(frozen=True)
class Served:
    socket: Path
    uids: dict[str, int]


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    """The users and the group, and loopd serving loop.sock as a root install does."""
    if not shutil.which("runuser") or not Path(PYTHON).exists():
        skip_or_fail(f"runuser and {PYTHON} are needed: loop.sock's peer tests did NOT run")
    _remove_accounts()
    base = Path(tempfile.mkdtemp(prefix="bx-peers-"))
    daemon: Loopd | None = None
    try:
        assert _run("groupadd", GROUP).returncode == 0
        for user in USERS:
            made = _run("useradd", "--no-create-home", "--user-group", user)
            assert made.returncode == 0, made.stderr
        for user in MEMBERS:
            assert _run("gpasswd", "--add", user, GROUP).returncode == 0
        base.chmod(0o711)  # the users pass through; the home is the install's
        home = base / "home"
        run = Home(home).link_directory(LOOP)
        run.mkdir(parents=True)
        for part in (home, home / "run"):
            part.chmod(0o755)
        # as `bxctl install` leaves it: the link's group, set-group-id 2750
        os.chown(run, 0, grp.getgrnam(GROUP).gr_gid)
        run.chmod(0o2750)
        config = LoopdConfig(
            paths=PathsSection(home=str(home)),
            broker=BrokerSection(socket="none"),
            memory=MemorySection(socket="none"),
            sockets=SocketsSection(group_access=True, owner_user=OWNER),
        )
        model = ScriptedModel([reply] * 50)
        daemon = Loopd(
            config, model, from_format(GEMMA), LIMITS, "peers test", clock=lambda: datetime.now(UTC)
        )
        daemon.start()
        uids = {user: pwd.getpwnam(user).pw_uid for user in USERS}
        served = Served(daemon.path, uids)
        for n in range(3):  # the owner's session, long enough to compact
            turn = Turn(session=SESSION, text=f"{n}: " + "m" * 250, resume=n > 0)
            answers = send(served, OWNER, turn)
            assert isinstance(answers[-1].message, TurnDone), answers[-1]
        yield served
    finally:
        if daemon is not None:
            daemon.stop()
        _remove_accounts()
        shutil.rmtree(base, ignore_errors=True)


def send(served: Served, user: str, message: Message) -> list[Envelope]:
    """`message` sent on loop.sock by a process running as `user`; every answer."""
    request = ClientConnection("p1").request(message)
    done = _run("runuser", "-u", user, "--", PYTHON, "-c", PROBE, str(served.socket), request.hex())
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() != "EACCES", f"{user} cannot reach loop.sock"
    frames = FrameDecoder().feed(bytes.fromhex(done.stdout.strip()))
    return [decode_envelope(frame) for frame in frames]


def forbidden(served: Served, user: str, kind: str) -> Error:
    return Error(
        code=ErrorCode.FORBIDDEN,
        message=f"{kind} on loop.sock is for the owner only, and this peer (uid"
        f" {served.uids[user]}) is not; see runbook.md#socket-owner-only",
    )


KEPT = [
    pytest.param(Sessions(), id="sessions"),
    pytest.param(SessionShow(session=SESSION), id="session_show"),
    pytest.param(Compact(session=SESSION), id="compact"),
]
OPEN = [
    pytest.param(lambda user: Turn(session=f"mm-{user}", text="hi"), TurnDone, id="turn"),
    pytest.param(lambda _: Status(), StatusReport, id="status"),
]
OTHERS = [pytest.param(GATEWAY, id="gatewayd"), pytest.param(MEMBER, id="another-member")]


@pytest.mark.parametrize("user", OTHERS)
@pytest.mark.parametrize("message", KEPT)
def test_a_member_not_the_owner_is_forbidden_the_owner_s_kinds(
    served: Served, user: str, message: Message
) -> None:
    (answer,) = send(served, user, message)
    assert answer.final
    assert answer.message == forbidden(served, user, message.kind)


@pytest.mark.parametrize("user", OTHERS)
@pytest.mark.parametrize(("make", "answered"), OPEN)
def test_a_member_not_the_owner_still_sends_turns_and_status(
    served: Served, user: str, make: object, answered: type[Message]
) -> None:
    assert callable(make)
    answers = send(served, user, make(user))
    assert isinstance(answers[-1].message, answered), answers[-1]


def test_the_owner_lists_the_sessions(served: Served) -> None:
    (answer,) = send(served, OWNER, Sessions())
    assert isinstance(answer.message, SessionList)
    assert SESSION in {item.session for item in answer.message.items}


def test_the_owner_reads_a_session(served: Served) -> None:
    (answer,) = send(served, OWNER, SessionShow(session=SESSION))
    assert isinstance(answer.message, SessionEntries)
    assert answer.message.entries[0].text.startswith("0: m")


def test_the_owner_compacts_a_session(served: Served) -> None:
    *events, done = send(served, OWNER, Compact(session=SESSION))
    assert isinstance(done.message, TurnDone), done
    assert any(
        isinstance(e.message, TurnEvent) and isinstance(e.message.event, ContextCompactedEvent)
        for e in events
    )


@pytest.mark.parametrize(("make", "answered"), OPEN)
def test_the_owner_sends_turns_and_status(served: Served, make: object, answered: type) -> None:
    assert callable(make)
    answers = send(served, OWNER, make(OWNER))
    assert isinstance(answers[-1].message, answered), answers[-1]


def test_a_user_outside_the_group_is_refused_by_the_kernel(served: Served) -> None:
    request = ClientConnection("p1").request(Status()).hex()
    done = _run("runuser", "-u", OUTSIDER, "--", PYTHON, "-c", PROBE, str(served.socket), request)
    assert done.stdout.strip() == "EACCES"
