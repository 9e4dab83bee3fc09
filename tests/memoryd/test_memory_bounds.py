"""memoryd bounded (issue 28): a write that could never fit the block is refused, a
recall of any size answers in pages that fit a frame, and the owner's `memory_log`
names what the block leaves out. memoryd is served in this process on real sockets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from boxmaker.core.home.layout import Home
from boxmaker.core.labels import DataClass
from boxmaker.core.wire.broker import FailedResponse, ResultResponse
from boxmaker.core.wire.envelope import Message, encode_envelope
from boxmaker.core.wire.frames import MAX_FRAME
from boxmaker.core.wire.memory import (
    MemoryBlock,
    MemoryBlockReply,
    MemoryCall,
    MemoryLog,
    MemoryLogReply,
    Reindex,
    Reindexed,
)
from boxmaker.memoryd.files import Entry, render_entries
from boxmaker.memoryd.journal import JOURNAL
from boxmaker.testing.daemons import running_memoryd
from boxmaker.testing.homes import make_home
from boxmaker.testing.sockets import exchange

AT = "2026-11-30T12:00:00.000Z"
BLOCK_BYTES = 16_384  # docs/memoryd.md: the block's budget
KEY = "my token is ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


def _clock() -> datetime:
    return datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@dataclass
class Served:
    home: Home

    def ask(self, path: Path, message: Message) -> Message:
        answers = exchange(path, message)
        assert [a.final for a in answers] == [True]
        assert len(encode_envelope(answers[0])) <= MAX_FRAME
        return answers[0].message

    def call(self, tool: str, arguments: object) -> Message:
        return self.ask(
            self.home.broker_memory_socket,
            MemoryCall(
                session="chat-1",
                call="c1",
                tool=tool,
                arguments=json.dumps(arguments, separators=(",", ":")),
                taint=DataClass.PRIVATE,
                untrusted=False,
            ),
        )

    def write(self, name: str, entries: list[Entry]) -> None:
        (self.home.memory / name).write_bytes(render_entries(entries))


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    home = Home(make_home(tmp_path))
    with running_memoryd(home, _clock):
        yield Served(home)


# --- a too-large identity write ---------------------------------------------------

HEADING_BYTES = {"memory": len("## Memory\n\n"), "user": len("## About the owner\n\n")}


@pytest.mark.parametrize("kind", ["memory", "user"])
def test_an_identity_write_that_can_never_fit_the_block_is_refused_with_its_sentence(
    served: Served, kind: str
) -> None:
    text = "y" * (BLOCK_BYTES - HEADING_BYTES[kind] + 1)
    answer = served.call("memory_add", {"kind": kind, "text": text})
    assert isinstance(answer, FailedResponse)
    assert answer.message.startswith("not written: ")
    assert "16,384" in answer.message
    assert "memory_note" in answer.message
    assert "\n" not in answer.message
    assert text not in answer.message
    assert not (served.home.memory / f"{kind}.md").exists()
    assert not (served.home.memory / JOURNAL).exists()


def test_a_replace_that_could_never_fit_is_refused_and_the_entry_kept(served: Served) -> None:
    added = served.call("memory_add", {"kind": "memory", "text": "Tabs."})
    assert isinstance(added, ResultResponse)
    entry = added.content.split("(")[1].rstrip(").")
    answer = served.call(
        "memory_replace", {"kind": "memory", "entry": entry, "text": "z" * BLOCK_BYTES}
    )
    assert isinstance(answer, FailedResponse)
    assert "16,384" in answer.message
    block = served.ask(served.home.loop_memory_socket, MemoryBlock(session="chat-1"))
    assert isinstance(block, MemoryBlockReply)
    assert block.text == "## Memory\n\nTabs."


@pytest.mark.parametrize("kind", ["memory", "user"])
def test_an_identity_write_that_just_fits_alone_is_added_and_in_the_block(
    served: Served, kind: str
) -> None:
    text = "y" * (BLOCK_BYTES - HEADING_BYTES[kind])
    assert isinstance(served.call("memory_add", {"kind": kind, "text": text}), ResultResponse)
    block = served.ask(served.home.loop_memory_socket, MemoryBlock(session="chat-1"))
    assert isinstance(block, MemoryBlockReply)
    assert len(block.text.encode()) == BLOCK_BYTES
    assert block.excluded == 0


def test_a_long_note_is_still_saved(served: Served) -> None:
    answer = served.call("memory_note", {"text": "n" * 60_000})
    assert isinstance(answer, ResultResponse)
    assert answer.content.startswith("saved in notes.md")


# --- recall in pages ----------------------------------------------------------------


def _recall(served: Served, **arguments: Any) -> tuple[ResultResponse, dict[str, Any]]:
    answer = served.call("memory_recall", {"query": "deploy", **arguments})
    assert isinstance(answer, ResultResponse), answer
    return answer, json.loads(answer.content)


def _large_entries(count: int, size: int) -> list[Entry]:
    # quotes and backslashes double when escaped, and again inside the content string
    filler = 'a "quoted" \\path\\ word ' * (size // 24)
    return [Entry(f"m-{n:04d}", "memory", f"{n} deploy {filler}", False, AT) for n in range(count)]


def test_a_50_entry_recall_of_large_entries_answers_pages_that_each_fit_a_frame(
    served: Served,
) -> None:
    served.write("memory.md", _large_entries(50, 30_000))  # 1.5 MB, as a long-lived store
    assert served.ask(served.home.owner_memory_socket, Reindex()) == Reindexed(entries=50)
    first, shown = _recall(served, limit=50)
    assert shown["page"] == 1
    assert shown["pages"] > 1
    assert "page 2" in shown["more"]
    assert not first.truncated
    seen = [e["id"] for e in shown["entries"]]
    for page in range(2, shown["pages"] + 1):
        _answer, more = _recall(served, limit=50, page=page)
        assert more["page"] == page
        assert more["pages"] == shown["pages"]
        seen += [e["id"] for e in more["entries"]]
    # every entry once, in the one ranking, whole
    assert sorted(seen) == [f"m-{n:04d}" for n in range(50)]
    assert len(set(seen)) == 50
    _answer, past = _recall(served, limit=50, page=shown["pages"] + 1)
    assert past["entries"] == []
    assert str(shown["pages"]) in past["more"]


def test_a_small_recall_answers_as_it_always_did(served: Served) -> None:
    served.write("memory.md", [Entry("m-0001", "memory", "deploy on fridays", False, AT)])
    served.ask(served.home.owner_memory_socket, Reindex())
    answer, shown = _recall(served)
    assert shown == {
        "entries": [
            {
                "id": "m-0001",
                "kind": "memory",
                "text": "deploy on fridays",
                "untrusted": False,
                "time": AT,
            }
        ]
    }
    assert not answer.truncated


def test_a_hand_edited_entry_too_large_for_a_page_is_cut_and_marked(served: Served) -> None:
    huge = "deploy " + "w" * (2 * 2**20)  # 2 MiB: only a hand edit makes one
    served.write("memory.md", [Entry("m-huge", "memory", huge, False, AT)])
    served.ask(served.home.owner_memory_socket, Reindex())
    answer, shown = _recall(served)
    (entry,) = shown["entries"]
    assert entry["cut"] is True
    assert entry["id"] == "m-huge"
    assert huge.startswith(entry["text"])
    assert 0 < len(entry["text"]) < len(huge)
    assert answer.truncated


@pytest.mark.parametrize("page", [0, 51, "2", True])
def test_a_bad_page_fails_naming_it(served: Served, page: object) -> None:
    answer = served.call("memory_recall", {"query": "deploy", "page": page})
    assert isinstance(answer, FailedResponse)
    assert "`page`" in answer.message


# --- memory_log names what the block leaves out -----------------------------------


def test_memory_log_names_the_entries_the_block_leaves_out_and_why(served: Served) -> None:
    big = "x" * 7_000
    served.write(
        "memory.md",
        [
            Entry("m-0001", "memory", f"one {big}", False, AT),
            Entry("m-key", "memory", KEY, False, AT),
            Entry("m-0002", "memory", f"two {big}", False, AT),
            Entry("m-0003", "memory", f"three {big}", False, AT),
        ],
    )
    served.write("user.md", [Entry("u-0001", "user", "The owner is Kyle.", False, AT)])
    reply = served.ask(served.home.owner_memory_socket, MemoryLog(limit=20))
    assert isinstance(reply, MemoryLogReply)
    assert [(e.id, e.kind, e.rule) for e in reply.excluded] == [
        ("m-key", "memory", "secret-github"),
        ("m-0003", "memory", "over-budget"),
        ("u-0001", "user", "over-budget"),
    ]
    assert reply.excluded_more == 0
    block = served.ask(served.home.loop_memory_socket, MemoryBlock(session="chat-1"))
    assert isinstance(block, MemoryBlockReply)
    assert block.excluded == 3


def test_memory_log_of_a_store_that_fits_names_nothing(served: Served) -> None:
    served.write("memory.md", [Entry("m-0001", "memory", "Tabs.", False, AT)])
    reply = served.ask(served.home.owner_memory_socket, MemoryLog(limit=20))
    assert isinstance(reply, MemoryLogReply)
    assert reply.excluded == ()
    assert reply.excluded_more == 0


def test_memory_log_names_the_first_thousand_and_counts_the_rest(served: Served) -> None:
    entries = [Entry(f"m-{n:05d}", "memory", f"fact {n:05d} " * 4, False, AT) for n in range(3_000)]
    served.write("memory.md", entries)
    reply = served.ask(served.home.owner_memory_socket, MemoryLog(limit=1))
    assert isinstance(reply, MemoryLogReply)
    block = served.ask(served.home.loop_memory_socket, MemoryBlock(session="chat-1"))
    assert isinstance(block, MemoryBlockReply)
    assert len(reply.excluded) == 1_000
    assert len(reply.excluded) + reply.excluded_more == block.excluded
    kept = 3_000 - block.excluded
    assert [e.id for e in reply.excluded[:2]] == [f"m-{kept:05d}", f"m-{kept + 1:05d}"]


# --- done when: a store of 10 MiB of identity entries -----------------------------


def test_the_block_of_a_10_mib_store_is_answered_within_its_budget(served: Served) -> None:
    served.write("memory.md", _large_entries(170, 65_000))
    served.write("user.md", [Entry("u-0001", "user", "The owner is Kyle.", False, AT)])
    assert (served.home.memory / "memory.md").stat().st_size > 10 * 2**20
    (served.home.memory / "soul.md").write_text("I am careful.\n", encoding="utf-8")
    block = served.ask(served.home.loop_memory_socket, MemoryBlock(session="chat-1"))
    assert isinstance(block, MemoryBlockReply)
    assert len(block.text.encode()) <= BLOCK_BYTES
    assert block.text == "I am careful."
    assert block.excluded == 171
