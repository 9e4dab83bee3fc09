"""gatewayd's Mattermost client against the fake server: REST, retries, the WebSocket.

Every test talks to `FakeMattermost` over real TCP on 127.0.0.1. Waits (retry
back-off, reconnect back-off) go through a recording `sleep` that does not wait,
so nothing here depends on timing: what is checked is the fake's call log and
the waits the client asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import itertools
import re
import socket
import sys
import types
from collections.abc import Coroutine, Iterator
from random import Random
from typing import Any, TypeVar

import aiohttp
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmaker.gatewayd.mattermost import Backoff, MattermostClient, RetryPolicy, retry_after
from boxmaker.gatewayd.mm_delivery import Delivery
from boxmaker.gatewayd.mm_events import EventStream
from boxmaker.gatewayd.mm_model import (
    Event,
    Frame,
    Hello,
    MattermostAuthError,
    MattermostError,
    Post,
    Posted,
    PostEdited,
    Reaction,
    ReactionAdded,
    decode_event,
)
from boxmaker.testing.fake_mattermost import BOT_TOKEN, FakeMattermost
from boxmaker.testing.fake_mattermost_web import running

T = TypeVar("T")


def _stub_fetches(message: str, props: dict[str, Any], previews: bool = True) -> list[str]:
    return re.findall(r"https?://[^\s)>]+", message) if previews else []


@pytest.fixture(autouse=True)
def fetch_simulator(monkeypatch: pytest.MonkeyPatch) -> None:
    """TEMPORARY: a stand-in for boxmaker.testing.fetch_simulator until that module
    lands (another part of issue 17); used only when it cannot be imported."""
    try:
        importlib.import_module("boxmaker.testing.fetch_simulator")
    except ModuleNotFoundError:
        stub = types.ModuleType("boxmaker.testing.fetch_simulator")
        stub.fetches = _stub_fetches  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, stub.__name__, stub)


class Waits:
    """A `sleep` that records what was asked and does not wait; while `gate` is
    set, it waits for the gate instead (to hold a reconnect until the test says)."""

    def __init__(self) -> None:
        self.asked: list[float] = []
        self.gate: asyncio.Event | None = None

    async def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)
        if self.gate is not None:
            await self.gate.wait()
        await asyncio.sleep(0)


@pytest.fixture
def fake() -> FakeMattermost:
    ticks = itertools.count(1_767_225_600_000)  # one millisecond per change
    return FakeMattermost(clock=lambda: next(ticks), auth_cutoff_s=0.2)


@pytest.fixture
def url(fake: FakeMattermost) -> Iterator[str]:
    with running(fake) as base:
        yield base


@pytest.fixture
def waits() -> Waits:
    return Waits()


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coroutine, 30)

    return asyncio.run(bounded())


def client(url: str, waits: Waits, token: str = BOT_TOKEN, attempts: int = 5) -> MattermostClient:
    retry = RetryPolicy(attempts=attempts)
    return MattermostClient(url, token, retry=retry, random=Random(17), sleep=waits)  # noqa: S311


async def take(stream: EventStream, n: int) -> list[Event]:
    return [await asyncio.wait_for(anext(stream), 10) for _ in range(n)]


def messages(events: list[Event]) -> list[str]:
    return [event.post.message for event in events if isinstance(event, Posted)]


# --- REST -------------------------------------------------------------------------


def test_me_and_direct_channel(fake: FakeMattermost, url: str, waits: Waits) -> None:
    async def scenario() -> None:
        async with client(url, waits) as mm:
            me = await mm.me()
            assert (me.id, me.username, me.is_bot) == (fake.bot.id, "boxmaker", True)
            channel = await mm.direct_channel(me.id, fake.owner.id)
            again = await mm.direct_channel(fake.owner.id, me.id)
            assert channel == again
            assert channel.id == fake.direct(fake.bot, fake.owner)
            assert channel.name == "__".join(sorted([fake.bot.id, fake.owner.id]))
            assert channel.type == "D"

    run(scenario())
    assert [call.path for call in fake.calls][:2] == ["/api/v4/users/me", "/api/v4/channels/direct"]
    assert all(call.authorized for call in fake.calls)


def test_create_get_patch_and_fetch_record(fake: FakeMattermost, url: str, waits: Waits) -> None:
    channel = fake.direct(fake.bot, fake.owner)
    simulator = importlib.import_module("boxmaker.testing.fetch_simulator")

    async def scenario() -> None:
        async with client(url, waits) as mm:
            props = {"unsafe_links": ["https://a.example/x"], "keep": 1}
            post = await mm.create_post(channel, "see https://a.example/x", props=props)
            assert (post.channel_id, post.user_id, post.props) == (channel, fake.bot.id, props)
            assert post.pending_post_id
            assert post.create_at == post.update_at
            assert post.edit_at == 0
            assert await mm.get_post(post.id) == post.model_copy(update={"pending_post_id": ""})
            assert fake.fetched[post.id] == simulator.fetches(post.message, props, previews=True)

            edited = await mm.patch_post(post.id, "now plain", {"only": True})
            assert edited.message == "now plain"
            assert edited.props == {"only": True}  # replaced wholesale: "keep" is gone
            assert edited.edit_at >= post.create_at
            assert edited.edit_at == edited.update_at
            assert fake.fetched[post.id] == simulator.fetches("now plain", {"only": True})
            assert [post_id for post_id, _ in fake.fetch_history] == [post.id, post.id]

            reply = await mm.create_post(channel, "a reply", root_id=post.id)
            assert reply.root_id == post.id

    run(scenario())
    pending = [call.pending_post_id for call in fake.calls_to("POST", "/api/v4/posts")]
    assert len(pending) == 2
    assert all(pending)
    assert pending[0] != pending[1]


def test_posts_since_recent_posts_and_reactions(
    fake: FakeMattermost, url: str, waits: Waits
) -> None:
    channel = fake.direct(fake.bot, fake.owner)
    first = fake.post_as(fake.owner, channel, "one")
    second = fake.post_as(fake.owner, channel, "two")

    async def scenario() -> None:
        async with client(url, waits) as mm:
            assert [p.message for p in await mm.recent_posts(channel, 1)] == ["two"]
            assert [p.message for p in await mm.posts_since(channel, 1)] == ["one", "two"]
            since = second["update_at"]
            assert await mm.posts_since(channel, since) == []
            reaction = await mm.add_reaction(first["id"], "white_check_mark")
            assert (reaction.user_id, reaction.post_id) == (fake.bot.id, first["id"])
            fake.react_as(fake.owner, first["id"], "thumbsup")
            changed = await mm.posts_since(channel, since)
            assert [(p.id, p.has_reactions) for p in changed] == [(first["id"], True)]
            emoji = [r.emoji_name for r in await mm.reactions(first["id"])]
            assert emoji == ["white_check_mark", "thumbsup"]
            assert await mm.reactions(second["id"]) == []

    run(scenario())
    assert fake.calls_to("GET", f"/api/v4/channels/{channel}/posts")[1].query == {"since": "1"}


def test_a_retried_create_posts_once(fake: FakeMattermost, url: str, waits: Waits) -> None:
    """The server made the post but its answer was lost (502 after the work): the
    retry carries the same pending_post_id and gets the first post back."""
    channel = fake.direct(fake.bot, fake.owner)
    fake.fail_next(1, 502, after=True)

    async def scenario() -> str:
        async with client(url, waits) as mm:
            return (await mm.create_post(channel, "exactly once")).id

    post_id = run(scenario())
    creates = fake.calls_to("POST", "/api/v4/posts")
    assert [call.status for call in creates] == [502, 201]
    assert creates[0].pending_post_id == creates[1].pending_post_id
    assert [post["id"] for post in fake.posts.values()] == [post_id]
    assert len(waits.asked) == 1


def test_429_waits_as_retry_after_says(fake: FakeMattermost, url: str, waits: Waits) -> None:
    fake.fail_next(2, 429, retry_after=3)

    async def scenario() -> None:
        async with client(url, waits) as mm:
            await mm.me()

    run(scenario())
    assert [call.status for call in fake.calls] == [429, 429, 200]
    assert waits.asked == [3.0, 3.0]


def test_5xx_backs_off_then_gives_up(fake: FakeMattermost, url: str, waits: Waits) -> None:
    fake.fail_next(5, 503)

    async def scenario() -> None:
        async with client(url, waits) as mm:
            await mm.me()

    with pytest.raises(MattermostError) as caught:
        run(scenario())
    assert caught.value.status == 503
    assert str(caught.value) == "mattermost: GET /users/me: status 503: gave up after 5 tries"
    assert len(fake.calls) == 5
    ceilings = [0.5, 1.0, 2.0, 4.0]
    assert all(c / 2 <= wait <= c for c, wait in zip(ceilings, waits.asked, strict=True))


def test_4xx_is_not_retried(fake: FakeMattermost, url: str, waits: Waits) -> None:
    async def scenario() -> None:
        async with client(url, waits) as mm:
            await mm.get_post("nosuchpost")

    with pytest.raises(MattermostError) as caught:
        run(scenario())
    assert caught.value.status == 404
    assert "app.post.get.app_error" in str(caught.value)
    assert len(fake.calls) == 1
    assert waits.asked == []


def test_a_refused_token_is_a_clear_error(fake: FakeMattermost, url: str, waits: Waits) -> None:
    async def scenario() -> None:
        async with client(url, waits, token="not-the-token") as mm:
            await mm.me()

    with pytest.raises(MattermostAuthError) as caught:
        run(scenario())
    assert str(caught.value) == ("mattermost: GET /users/me: status 401: the bot token was refused")
    assert "not-the-token" not in repr(caught.value)
    assert [(call.status, call.authorized) for call in fake.calls] == [(401, False)]
    assert waits.asked == []


def test_connection_errors_are_retried(waits: Waits) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there

    async def scenario() -> None:
        async with client(f"http://127.0.0.1:{port}", waits, attempts=3) as mm:
            await mm.me()

    with pytest.raises(MattermostError) as caught:
        run(scenario())
    assert caught.value.status is None
    assert len(waits.asked) == 2


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "2"}, 2.0),
        ({"Retry-After": "0.5", "X-RateLimit-Reset": "9"}, 0.5),
        ({"X-RateLimit-Reset": "4"}, 4.0),
        ({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, None),
        ({"Retry-After": "-1"}, None),
        ({}, None),
    ],
    ids=["retry-after", "retry-after-first", "ratelimit-reset", "http-date", "negative", "none"],
)
def test_retry_after_headers(headers: dict[str, str], expected: float | None) -> None:
    assert retry_after(headers) == expected


def test_backoff_grows_to_its_cap_with_jitter() -> None:
    backoff, rnd = Backoff(base_s=0.5, cap_s=8.0), Random(3)  # noqa: S311
    for attempt in range(100):
        ceiling = min(8.0, 0.5 * 2**attempt)
        assert ceiling / 2 <= backoff.delay(attempt, rnd) <= ceiling


def test_the_token_stays_out_of_repr(url: str, waits: Waits) -> None:
    assert BOT_TOKEN not in repr(client(url, waits))


# --- the WebSocket ------------------------------------------------------------------


def test_hello_then_events_in_order(fake: FakeMattermost, url: str, waits: Waits) -> None:
    channel = fake.direct(fake.bot, fake.owner)
    elsewhere = fake.direct(fake.bot, fake.other)
    fake.post_as(fake.owner, channel, "history")

    async def scenario() -> list[Event]:
        async with client(url, waits) as mm, EventStream(mm, [channel]) as stream:
            await stream.wait_live()
            assert stream.user_id == fake.bot.id
            first = fake.post_as(fake.owner, channel, "one")
            fake.post_as(fake.other, elsewhere, "not watched")
            fake.post_as(fake.owner, channel, "two")
            fake.edit_as(fake.owner, first["id"], "one, edited")
            fake.react_as(fake.owner, first["id"], "thumbsup")
            return await take(stream, 4)

    events = run(scenario())
    assert messages(events) == ["one", "two"]
    edited, reacted = events[2], events[3]
    assert isinstance(edited, PostEdited)
    assert edited.post.message == "one, edited"
    assert isinstance(reacted, ReactionAdded)
    assert reacted.reaction.emoji_name == "thumbsup"
    assert reacted.channel_id == channel
    assert not any(event.replayed for event in events)
    assert fake.ws_accepted == 1


async def _sentinel(fake: FakeMattermost, stream: EventStream, channel: str) -> list[Event]:
    """Every event up to a last post: nothing delivered twice shows up before it."""
    fake.post_as(fake.owner, channel, "sentinel")
    seen: list[Event] = []
    while messages(seen[-1:]) != ["sentinel"]:
        seen += await take(stream, 1)
    return seen[:-1]


def test_a_drop_mid_stream_loses_nothing_and_repeats_nothing(
    fake: FakeMattermost, url: str, waits: Waits
) -> None:
    channel = fake.direct(fake.bot, fake.owner)

    async def scenario() -> tuple[list[Event], list[Event], EventStream]:
        async with client(url, waits) as mm, EventStream(mm, [channel]) as stream:
            await stream.wait_live()
            posted = [fake.post_as(fake.owner, channel, f"m{i}") for i in range(3)]
            early = await take(stream, 3)
            fake.post_as(fake.owner, channel, "m3")
            fake.post_as(fake.owner, channel, "m4")
            waits.gate = asyncio.Event()  # hold the reconnect until the gap is made
            fake.drop_websockets()
            for i in range(5, 10):
                fake.post_as(fake.owner, channel, f"m{i}")
            fake.react_as(fake.owner, posted[0]["id"], "thumbsup")
            waits.gate.set()
            rest = await take(stream, 8)
            return early + rest, await _sentinel(fake, stream, channel), stream

    events, extra, stream = run(scenario())
    assert messages(events) == [f"m{i}" for i in range(10)]
    assert extra == []
    assert all(event.replayed for event in events if messages([event]) >= ["m5"])
    reacted = [event for event in events if isinstance(event, ReactionAdded)]
    assert len(reacted) == 1
    assert reacted[0].replayed
    assert stream.connections == 2
    assert stream.catch_ups == 1
    assert len(waits.asked) == 1


def test_a_restart_loses_nothing(fake: FakeMattermost, url: str, waits: Waits) -> None:
    channel = fake.direct(fake.bot, fake.owner)

    async def scenario() -> tuple[list[Event], list[Event]]:
        async with client(url, waits) as mm, EventStream(mm, [channel]) as stream:
            await stream.wait_live()
            fake.post_as(fake.owner, channel, "before")
            first = await take(stream, 1)
            waits.gate = asyncio.Event()
            fake.restart()
            fake.post_as(fake.owner, channel, "during")
            waits.gate.set()
            second = await take(stream, 1)
            return first + second, await _sentinel(fake, stream, channel)

    events, extra = run(scenario())
    assert messages(events) == ["before", "during"]
    assert events[1].replayed
    assert extra == []
    assert fake.ws_accepted == 2


def test_a_bad_token_ends_the_stream(fake: FakeMattermost, url: str, waits: Waits) -> None:
    channel = fake.direct(fake.bot, fake.owner)

    async def scenario() -> None:
        async with client(url, waits, token="wrong") as mm, EventStream(mm, [channel]) as stream:
            await take(stream, 1)

    with pytest.raises(MattermostAuthError):
        run(scenario())
    assert fake.ws_cut_off == 1
    assert fake.ws_accepted == 0


def test_the_fake_cuts_off_unauthenticated_sockets(fake: FakeMattermost, url: str) -> None:
    async def frames(headers: dict[str, str], challenge: str | None) -> list[str]:
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(f"{url}/api/v4/websocket", headers=headers) as ws,
        ):
            if challenge is not None:
                data = {"token": challenge}
                await ws.send_json({"seq": 1, "action": "authentication_challenge", "data": data})
            got: list[str] = []
            async for message in ws:
                got.append(message.data)
                if '"hello"' in message.data:
                    break
            return got

    assert run(frames({}, None)) == []
    assert '"status":"FAIL"' in run(frames({}, "wrong"))[0]
    accepted = run(frames({}, BOT_TOKEN))
    assert '"seq_reply":1' in accepted[0]
    assert '"seq":0' in accepted[1]
    assert '"event":"hello"' in run(frames({"Authorization": f"Bearer {BOT_TOKEN}"}, None))[0]
    assert (fake.ws_cut_off, fake.ws_accepted) == (2, 2)


# --- the pure parts: frames and exactly-once bookkeeping -----------------------------


def _post(post_id: str, create_at: int, **fields: Any) -> Post:
    return Post(id=post_id, channel_id="c", user_id="u", create_at=create_at,
                update_at=fields.pop("update_at", create_at), **fields)  # fmt: skip


def test_frames_decode_as_mattermost_sends_them() -> None:
    post = orjson.dumps({"id": "p1", "channel_id": "c", "user_id": "u", "message": "hi"})
    posted = {"event": "posted", "data": {"post": post.decode()}, "broadcast": {}, "seq": 4}
    frame = decode_event(orjson.dumps(posted))
    assert frame.seq == 4
    assert isinstance(frame.event, Posted)
    assert frame.event.post.message == "hi"
    reaction = orjson.dumps({"user_id": "u", "post_id": "p1", "emoji_name": "x", "create_at": 9})
    added = {"event": "reaction_added", "data": {"reaction": reaction.decode()},
             "broadcast": {"channel_id": "c"}, "seq": 5}  # fmt: skip
    event = decode_event(orjson.dumps(added)).event
    assert isinstance(event, ReactionAdded)
    assert event.channel_id == "c"
    hello = {"event": "hello", "data": {"server_version": "10"}, "broadcast": {"user_id": "b"}}
    assert decode_event(orjson.dumps({**hello, "seq": 0})).event == Hello("b", "10")
    assert decode_event('{"status": "OK", "seq_reply": 2}') == Frame(None, None)
    assert decode_event('{"event": "typing", "data": {}, "seq": 7}') == Frame(7, None)


@pytest.mark.parametrize(
    "text",
    ["", "[]", '{"event": "posted"}', '{"event": "posted", "seq": 1, "data": {"post": {}}}',
     '{"event": "posted", "seq": 1, "data": {"post": "{\\"id\\": 1}"}}', "{"],
    ids=["empty", "array", "no-seq", "post-not-a-string", "post-wrong-type", "not-json"],
)  # fmt: skip
def test_unreadable_frames_are_mattermost_errors(text: str) -> None:
    with pytest.raises(MattermostError):
        decode_event(text)


@given(st.text() | st.binary())
def test_any_frame_decodes_or_raises_the_one_error(text: str | bytes) -> None:
    with contextlib.suppress(MattermostError):
        decode_event(text)


def test_delivery_counts_each_happening_once() -> None:
    delivery = Delivery(since_ms=1000, margin_ms=100)
    seen = _post("a", 1100)
    assert delivery.fresh(Posted(seen))
    assert not delivery.fresh(Posted(seen))
    since = delivery.since()
    assert since == 1000
    edited_in_gap = _post("a", 1100, edit_at=1300, update_at=1300)
    new_and_edited = _post("b", 1200, edit_at=1250, update_at=1250)
    deleted = _post("c", 1210, delete_at=1220, update_at=1220)
    old_reacted = _post("d", 10, update_at=1400, has_reactions=True)
    reaction = Reaction(user_id="u", post_id="d", emoji_name="x", create_at=1400)
    posts = [old_reacted, edited_in_gap, new_and_edited, deleted]  # one version of each
    assert Delivery.wants_reactions(old_reacted, since)
    replayed = delivery.replay(since, posts, {"d": [reaction]})
    assert replayed == [
        Posted(new_and_edited, replayed=True),
        PostEdited(edited_in_gap, replayed=True),
        ReactionAdded(reaction, "c", replayed=True),
    ]
    assert delivery.watermark_ms == 1400
    assert delivery.replay(since, posts, {"d": [reaction]}) == []
    assert not delivery.fresh(PostEdited(new_and_edited))  # delivered with its post
