"""loopd's own budget for the memory block (issue 28): whole entries in memoryd's
order, counted with the model's tokenizer as the model is shown them, the rest named
in a log line; and new sessions start against a store of 10 MiB of identity entries.

memoryd runs in this process on its real loop-memory socket (`running_memoryd`), or
a `ScriptedServer` stands in for one whose spans are wrong; the turn loop asks
through the real `MemoryPort`. The scripted model's tokens are characters, so an
`é` is one token and two bytes: a budget counted in bytes would keep less.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import tomli_w

from boxmaker.core.errors import ErrorCode
from boxmaker.core.home.layout import Home
from boxmaker.core.model.chat_format import GEMMA
from boxmaker.core.model.dialect import from_format
from boxmaker.core.sanitize import neutralise
from boxmaker.core.wire.memory import BlockSpan, MemoryBlock, MemoryBlockReply
from boxmaker.loopd.config import load_config
from boxmaker.loopd.limits import TurnLimits
from boxmaker.loopd.main import turn_limits
from boxmaker.loopd.memory_port import MemoryPort
from boxmaker.loopd.session_log import SessionLogs
from boxmaker.loopd.turn import TurnLoop, TurnRefusedError
from boxmaker.memoryd.files import Entry, render_entries
from boxmaker.testing.daemons import running_memoryd
from boxmaker.testing.homes import make_home
from boxmaker.testing.scripted_model import ScriptedModel
from boxmaker.testing.sockets import Peer, ScriptedServer

AT = "2026-11-30T12:00:00.000Z"
IMAGE = "<start_of_image>"
MARKERS = (IMAGE,)
GEMMA_TAGS = (IMAGE, "<bos>", "<start_of_turn>", "<end_of_turn>", "<eos>")
LOG = "boxmaker.loopd.memory_fit"


class Place:
    def __init__(self, base: Path) -> None:
        self.home = make_home(base)
        self.made = self.home.parent if self.home.parent != base else None
        self.layout = Home(self.home)
        self.layout.memory.mkdir(mode=0o700, parents=True, exist_ok=True)

    def loop(self, model: ScriptedModel, limits: TurnLimits) -> TurnLoop:
        port = MemoryPort(self.layout.loop_memory_socket, 10_000)
        logs = SessionLogs(self.home)
        return TurnLoop(model, from_format(GEMMA), logs, None, limits, markers=MARKERS, memory=port)

    def write(self, name: str, entries: list[Entry]) -> None:
        (self.layout.memory / name).write_bytes(render_entries(entries))

    def logged_block(self, session: str) -> str | None:
        path = self.layout.loop_sessions / f"{session}.jsonl"
        for line in path.read_bytes().splitlines():
            entry = orjson.loads(line)
            if entry["type"] == "memory":
                text = entry["text"]
                assert isinstance(text, str)
                return text
        return None


@pytest.fixture
def place(tmp_path: Path) -> Iterator[Place]:
    made = Place(tmp_path)
    yield made
    if made.made is not None:
        shutil.rmtree(made.made)


def ignore(event: object) -> None:
    pass


def _entries(count: int) -> list[Entry]:
    return [Entry(f"m-{n}", "memory", f"{n} " + "é" * 40, False, AT) for n in range(count)]


def test_the_block_keeps_whole_entries_in_order_within_its_tokens_and_names_the_rest(
    place: Place, caplog: pytest.LogCaptureFixture
) -> None:
    entries = _entries(5)
    place.write("memory.md", entries)
    kept = "\n\n".join(["## Memory", entries[0].text, entries[1].text])
    budget = len(kept)  # characters: the scripted model's tokens
    assert len(kept.encode()) > budget  # so bytes would keep less
    with running_memoryd(place.layout), caplog.at_level(logging.WARNING, logger=LOG):
        done = place.loop(ScriptedModel(["Hi."]), TurnLimits(block_tokens=budget)).run(
            "n1", "hello", False, ignore
        )
    assert done.content == "Hi."
    assert place.logged_block("n1") == kept
    assert (
        f"event=memory_block_over_budget session=n1 tokens={budget} count=3 "
        "ids=memory/m-2,memory/m-3,memory/m-4 more=0"
    ) in caplog.text
    assert "é" * 40 not in caplog.text


def test_an_entry_is_never_cut_even_where_its_own_blank_lines_and_headings_would_fit(
    place: Place,
) -> None:
    tricky = "first part\n\n## About the owner\n\n" + "x" * 200
    place.write("memory.md", [Entry("m-1", "memory", tricky, False, AT)])
    place.write("user.md", [Entry("u-1", "user", "The owner is Kyle.", False, AT)])
    (place.layout.memory / "soul.md").write_text("I am careful.\n", encoding="utf-8")
    with running_memoryd(place.layout):
        place.loop(ScriptedModel(["Hi."]), TurnLimits(block_tokens=100)).run(
            "n1", "hello", False, ignore
        )
    # the block up to the entry's own heading would fit; the entry does not, so it and
    # everything after it are left out whole
    assert place.logged_block("n1") == "I am careful."


def test_a_fitted_block_is_neutralised_as_a_whole_one_is(place: Place) -> None:
    soul = f"You are careful.{IMAGE}<end_of_turn>"  # soul.md is the owner's: never checked
    (place.layout.memory / "soul.md").write_text(soul, encoding="utf-8")
    entries = _entries(3)
    place.write("memory.md", entries)
    shown = neutralise("\n\n".join([soul, "## Memory", entries[0].text]), GEMMA_TAGS).text
    assert IMAGE not in shown
    with running_memoryd(place.layout):
        place.loop(ScriptedModel(["Hi."]), TurnLimits(block_tokens=len(shown))).run(
            "n1", "hello", False, ignore
        )
    assert place.logged_block("n1") == shown


def test_a_soul_longer_than_the_budget_is_cut_and_no_entry_kept(
    place: Place, caplog: pytest.LogCaptureFixture
) -> None:
    (place.layout.memory / "soul.md").write_text("s" * 500 + "\n", encoding="utf-8")
    place.write("memory.md", _entries(1))
    with running_memoryd(place.layout), caplog.at_level(logging.WARNING, logger=LOG):
        place.loop(ScriptedModel(["Hi."]), TurnLimits(block_tokens=64)).run(
            "n1", "hello", False, ignore
        )
    assert place.logged_block("n1") == "s" * 64
    assert "event=memory_soul_cut session=n1 tokens=64" in caplog.text
    assert "ids=memory/m-0 more=0" in caplog.text


def test_without_a_budget_the_block_is_as_memoryd_sent_it(place: Place) -> None:
    entries = _entries(5)
    place.write("memory.md", entries)
    with running_memoryd(place.layout):
        place.loop(ScriptedModel(["Hi."]), TurnLimits()).run("n1", "hello", False, ignore)
    assert place.logged_block("n1") == "\n\n".join(["## Memory", *(e.text for e in entries)])


def test_a_block_whose_spans_do_not_match_its_text_refuses_the_new_session(
    place: Place,
) -> None:
    def lying(peer: Peer) -> None:
        assert isinstance(peer.request.message, MemoryBlock)
        wrong = BlockSpan(id="m-1", kind="memory", start=0, end=4)
        reply = MemoryBlockReply(text="## Memory\n\nTabs.", excluded=0, entries=(wrong,))
        peer.send(reply, final=True)

    with ScriptedServer(place.layout.loop_memory_socket, lying):
        loop = place.loop(ScriptedModel(["Hi."]), TurnLimits(block_tokens=1_000))
        with pytest.raises(TurnRefusedError, match="does not match its entries") as refused:
            loop.run("n1", "hello", False, ignore)
    assert refused.value.code is ErrorCode.UNAVAILABLE
    assert not (place.layout.loop_sessions / "n1.jsonl").exists()


# --- the setting --------------------------------------------------------------------


def _config(tmp_path: Path, memory: dict[str, object]) -> Path:
    path = tmp_path / "loopd.toml"
    path.write_text(tomli_w.dumps({"paths": {"home": str(tmp_path)}, "memory": memory}))
    return path


@pytest.mark.parametrize(
    ("memory", "context", "expected"),
    [
        pytest.param({}, 8_192, 1_024, id="default-an-eighth"),
        pytest.param({"block_tokens": 300}, 8_192, 300, id="as-set"),
        pytest.param({"block_tokens": 100_000}, 8_192, 2_048, id="at-most-a-quarter"),
    ],
)
def test_block_tokens_defaults_to_an_eighth_of_the_context_and_is_clamped(
    tmp_path: Path, memory: dict[str, object], context: int, expected: int
) -> None:
    config = load_config(_config(tmp_path, memory), {})
    assert turn_limits(config, context).block_tokens == expected


def test_a_negative_block_tokens_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="block_tokens"):
        load_config(_config(tmp_path, {"block_tokens": -1}), {})


# --- done when: a store of 10 MiB of identity entries ------------------------------


def test_new_sessions_start_against_a_store_of_10_mib_of_identity_entries(
    place: Place, tmp_path: Path
) -> None:
    text = "The owner keeps notes in folders by year; " * 1_560  # 64 KiB each
    place.write(
        "memory.md", [Entry(f"m-{n:04d}", "memory", f"{n}: {text}", False, AT) for n in range(165)]
    )
    place.write("user.md", [Entry("u-0001", "user", "The owner is Kyle.", False, AT)])
    assert (place.layout.memory / "memory.md").stat().st_size > 10 * 2**20
    (place.layout.memory / "soul.md").write_text("I am careful.\n", encoding="utf-8")
    limits = turn_limits(load_config(_config(tmp_path, {}), {}), 2_048)
    assert limits.block_tokens == 256
    with running_memoryd(place.layout):
        loop = place.loop(ScriptedModel(["One.", "Two."]), limits)
        assert loop.run("n1", "hello", False, ignore).content == "One."
        assert loop.run("n2", "hello again", False, ignore).content == "Two."
    for session in ("n1", "n2"):
        assert place.logged_block(session) == "I am careful."
