"""`gatewayd serve` killed and started again: the owner's messages sent meanwhile are answered once.

The real daemon against the fake Mattermost (served in this process on
127.0.0.1) and a scripted loopd on a real loop.sock. The fake server's clock is
moved back to make posts that are older than `[mattermost] catch_up_s`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from boxmaker.core.home.layout import Home
from boxmaker.core.wire.loop import Turn, TurnDone
from boxmaker.gatewayd.watermark import decode_watermark
from boxmaker.testing.fake_mattermost import BOT_TOKEN, FakeMattermost
from boxmaker.testing.fake_mattermost_web import running
from boxmaker.testing.homes import make_home
from boxmaker.testing.processes import DaemonProcess
from boxmaker.testing.sockets import Peer, ScriptedServer
from boxmaker.testing.waiting import wait_until

pytestmark = pytest.mark.e2e

HOUR_MS = 3_600_000
HELD = "hold this one"  # the scripted loopd never answers a turn with this text


def write_config(tmp_path: Path, home: Path, url: str, owner: str, extra: str = "") -> Path:
    token_file = tmp_path / "token"
    token_file.write_text(BOT_TOKEN + "\n", encoding="utf-8")
    token_file.chmod(0o600)
    config = tmp_path / "gatewayd.toml"
    config.write_text(
        f'[paths]\nhome = "{home}"\n'
        f'[mattermost]\nurl = "{url}"\nowner = "{owner}"\n{extra}'
        f'[secrets.mattermost_token]\nfile = "{token_file}"\n',
        encoding="utf-8",
    )
    return config


def answer_with_text(peer: Peer) -> None:
    turn = peer.request.message
    assert isinstance(turn, Turn)
    if turn.text == HELD:
        peer.hold()
        return
    peer.send(
        TurnDone(session=turn.session, content=f"answer: {turn.text}", untrusted=False),
        final=True,
    )


class Clock:
    """The fake server's clock: the real one, moved by `offset_ms`."""

    def __init__(self) -> None:
        self.offset_ms = 0

    def __call__(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset_ms


def replies(fake: FakeMattermost, post: dict[str, Any]) -> list[dict[str, Any]]:
    """gatewayd's posts in the thread of the owner's `post`."""
    with fake.lock:
        return [
            p
            for p in fake.posts.values()
            if p["user_id"] == fake.bot.id and p["root_id"] == post["id"]
        ]


def answered(fake: FakeMattermost, post: dict[str, Any]) -> bool:
    return any(p["message"] == f"answer: {post['message']}" for p in replies(fake, post))


def turns_in_flight(home: Path) -> dict[str, str]:
    """The turns the watermark file says are running (none without a file)."""
    path = Home(home).gateway / "watermark.json"
    return dict(decode_watermark(path.read_bytes()).in_flight) if path.exists() else {}


@contextmanager
def gatewayd_running(config: Path, home: Path, *, settle: bool = True) -> Iterator[DaemonProcess]:
    """gatewayd serving; SIGKILLed on the way out, as a crash ends it (once its turns
    have ended, unless `settle` is false)."""
    with DaemonProcess(config, role="gatewayd") as gatewayd:
        gatewayd.wait_serving([Home(home).gateway_socket])
        yield gatewayd
        if settle:
            wait_until(lambda: not turns_in_flight(home), 20.0, "no turn in flight")
        gatewayd.process.kill()
        gatewayd.process.wait(10)


def say(fake: FakeMattermost, dm: str, text: str) -> dict[str, Any]:
    return fake.post_as(fake.owner, dm, text)


def test_messages_sent_while_gatewayd_is_down_are_answered_once(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    clock = Clock()
    fake = FakeMattermost(auth_cutoff_s=0.5, clock=clock)
    with ScriptedServer(Home(home).loop_socket, answer_with_text), running(fake) as url:
        config = write_config(tmp_path, home, url, fake.owner.id)
        dm = fake.direct(fake.bot, fake.owner)
        clock.offset_ms = -2 * HOUR_MS  # the first run was two hours ago
        with gatewayd_running(config, home):
            first = say(fake, dm, "before the crash")
            wait_until(lambda: answered(fake, first), 20.0, "the first answer")
        clock.offset_ms = -HOUR_MS - 60_000  # older than catch_up_s (one hour)
        old = say(fake, dm, "too old to answer")
        clock.offset_ms = 0
        missed = [say(fake, dm, f"sent while down {n}") for n in range(3)]
        with gatewayd_running(config, home) as gatewayd:
            wait_until(lambda: all(answered(fake, p) for p in missed), 20.0, "three answers")
            live = say(fake, dm, "after the restart")
            wait_until(lambda: answered(fake, live), 20.0, "the live answer")
        with gatewayd_running(config, home) as again:  # a second crash answers nothing again
            last = say(fake, dm, "after the second restart")
            wait_until(lambda: answered(fake, last), 20.0, "the last answer")
        for post in (first, *missed, live, last):
            assert len(replies(fake, post)) == 1, (post["message"], gatewayd.stderr, again.stderr)
        assert replies(fake, old) == []


def test_a_damaged_watermark_is_named_and_nothing_before_the_start_is_answered(
    tmp_path: Path,
) -> None:
    home = make_home(tmp_path)
    mark = Home(home).gateway / "watermark.json"
    mark.parent.mkdir(mode=0o700)
    mark.write_bytes(b'{"version": 1, "newest_ms": ')
    fake = FakeMattermost(auth_cutoff_s=0.5)
    with ScriptedServer(Home(home).loop_socket, answer_with_text), running(fake) as url:
        config = write_config(tmp_path, home, url, fake.owner.id)
        dm = fake.direct(fake.bot, fake.owner)
        before = say(fake, dm, "sent before the start")
        with gatewayd_running(config, home) as gatewayd:
            after = say(fake, dm, "sent after the start")
            wait_until(lambda: answered(fake, after), 20.0, "the answer")
        assert replies(fake, before) == []
        (warning,) = [line for line in gatewayd.stderr_lines() if "watermark_damaged" in line]
        assert str(mark) in warning


def test_a_turn_cut_by_a_crash_is_said_so_after_the_restart_and_not_run_again(
    tmp_path: Path,
) -> None:
    home = make_home(tmp_path)
    fake = FakeMattermost(auth_cutoff_s=0.5)
    loopd = ScriptedServer(Home(home).loop_socket, answer_with_text)
    with loopd, running(fake) as url:
        config = write_config(tmp_path, home, url, fake.owner.id)
        dm = fake.direct(fake.bot, fake.owner)
        with gatewayd_running(config, home, settle=False):
            held = say(fake, dm, HELD)
            wait_until(lambda: replies(fake, held), 20.0, "the answer post")
            loopd.wait_for_requests(1)
            assert list(turns_in_flight(home)) == [held["id"]]
        with gatewayd_running(config, home):
            wait_until(lambda: len(replies(fake, held)) == 2, 20.0, "the notice")
            live = say(fake, dm, "and now")
            wait_until(lambda: answered(fake, live), 20.0, "the live answer")
        notice = replies(fake, held)[-1]["message"]
        assert "not run again" in notice
        assert [r.message.text for r in loopd.requests] == [HELD, "and now"]  # type: ignore[union-attr]


def test_a_message_that_cannot_be_recorded_is_not_run(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    fake = FakeMattermost(auth_cutoff_s=0.5)
    loopd = ScriptedServer(Home(home).loop_socket, answer_with_text)
    with loopd, running(fake) as url:
        config = write_config(tmp_path, home, url, fake.owner.id)
        dm = fake.direct(fake.bot, fake.owner)
        with gatewayd_running(config, home) as gatewayd:
            (Home(home).gateway / "watermark.json.tmp").mkdir()  # no atomic write can be made
            refused = say(fake, dm, "not recorded")
            wait_until(lambda: replies(fake, refused), 20.0, "the refusal")
        (reply,) = replies(fake, refused)
        assert reply["message"].startswith("this message was not taken: gatewayd cannot record")
        assert loopd.requests == []
        assert "event=watermark_unwritable" in gatewayd.stderr
