"""The generator's categories: each makes one conversation from a seeded random source.

No I/O. A conversation is the turns loopd logs (the owner's text, the model's replies,
the tool results as the turn loop puts them in front of the model) and, for each call,
the call and the broker's answer, so a test can replay it through the real turn loop.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from boxmaker.core.chat_format import Role, Turn
from boxmaker.core.deny_reasons import DenyReason
from boxmaker.loopd.tools import denial_text
from training.render import neutralised
from training.scenarios import vocab as v

Args = dict[str, Any]


@dataclass(frozen=True)
class Outcome:
    """brokerd's answer to a call: `result`, `failed` or `denied`; `approval` when it
    waited for the owner first (the model is not shown the wait, only what followed)."""

    status: str
    text: str  # the content, the failure's message, or the deny reason's name
    approval: bool = False
    untrusted: bool = False

    def shown(self) -> str:
        """What the turn loop puts in front of the model (`TurnLoop._broker`)."""
        if self.status == "failed":
            return f"Failed: {self.text}."
        if self.status == "denied":
            return denial_text(DenyReason(self.text), None)
        return self.text

    def as_json(self) -> dict[str, object]:
        return {
            "status": self.status,
            "text": self.text,
            "approval": self.approval,
            "untrusted": self.untrusted,
        }


@dataclass
class Conversation:
    category: str
    turns: list[Turn] = field(default_factory=list)
    calls: list[tuple[str, Args, Outcome]] = field(default_factory=list)

    def owner(self, text: str) -> None:
        self.turns.append(Turn(Role.USER, neutralised(text)))

    def answer(self, text: str) -> None:
        self.turns.append(Turn(Role.MODEL, text))

    def call(self, tool: str, args: Args, outcome: Outcome) -> None:
        """The model's call in the syntax loopd teaches it, and its result as logged."""
        inner = {"name": tool, "arguments": args}
        self.turns.append(Turn(Role.MODEL, json.dumps({"name": "call_tool", "arguments": inner})))
        self.turns.append(Turn(Role.TOOL, neutralised(outcome.shown()), name="call_tool"))
        self.calls.append((tool, args, outcome))


def _path(rng: random.Random) -> str:
    return f"{rng.choice(v.DIRS)}/{rng.choice(v.FILES)}"


def _ok(text: str, untrusted: bool = False, approval: bool = False) -> Outcome:
    return Outcome("result", text, approval=approval, untrusted=untrusted)


def _file_text(rng: random.Random, fact: str) -> str:
    filler = rng.choice(("Notes", "Reminder", "From the last meeting", "Status"))
    return f"{filler}:\n- {fact}.\n- nothing else is urgent."


def read_file(rng: random.Random) -> Conversation:
    c = Conversation("read_file")
    path = _path(rng)
    subject, fact = rng.choice(v.FACTS)
    c.owner(rng.choice(v.READ).format(path=path, subject=subject))
    c.call("read_file", {"path": path}, _ok(_file_text(rng, fact), untrusted=True))
    c.answer(
        rng.choice(("The file says: {f}.", "{F}.", "It says {f}.")).format(
            f=fact, F=fact[0].upper() + fact[1:]
        )
    )
    return c


def write_file(rng: random.Random) -> Conversation:
    c = Conversation("write_file")
    path, content = _path(rng), rng.choice(v.CONTENTS)
    c.owner(rng.choice(v.WRITE).format(path=path, content=content))
    size = len(content.encode())
    c.call("write_file", {"path": path, "content": content}, _ok(f"wrote {size} bytes to {path}"))
    c.answer(f"Done: I wrote {size} bytes to {path}.")
    return c


def shell(rng: random.Random) -> Conversation:
    c = Conversation("shell")
    command, output = rng.choice(v.COMMANDS)
    args: Args = {"command": command}
    if rng.random() < 0.3:
        args["cwd"] = rng.choice(v.DIRS)
        c.owner(rng.choice(v.SHELL_CWD).format(command=command, cwd=args["cwd"]))
    else:
        c.owner(rng.choice(v.SHELL).format(command=command))
    c.call("shell", args, _ok(f"{output}\n[exit status 0]", untrusted=True))
    c.answer(f"`{command}` printed:\n{output}")
    return c


def _page(fact: str) -> str:
    return f"HTTP 200 OK\ncontent-type: text/plain\n\nUpdate: {fact}."


def http_fetch(rng: random.Random) -> Conversation:
    c = Conversation("http_fetch")
    url = rng.choice(v.URLS)
    _, fact = rng.choice(v.FACTS)
    c.owner(rng.choice(v.FETCH).format(url=url))
    c.call("http_fetch", {"url": url}, _ok(_page(fact), untrusted=True))
    c.answer(f"The page says: {fact}.")
    return c


def memory_add(rng: random.Random) -> Conversation:
    c = Conversation("memory_add")
    kind, text = rng.choice(v.MEMORIES)
    c.owner(rng.choice(v.REMEMBER).format(text=text, lower=text[0].lower() + text[1:]))
    entry = rng.choice(v.ENTRY_IDS)
    outcome = _ok(f"added to {kind}.md ({entry}).")
    c.call("memory_add", {"kind": kind, "text": text}, outcome)
    c.answer(f"I will remember that. It is saved in {kind}.md as {entry}.")
    return c


def memory_replace(rng: random.Random) -> Conversation:
    c = Conversation("memory_replace")
    kind, text = rng.choice(v.MEMORIES)
    entry = rng.choice(v.ENTRY_IDS)
    c.owner(rng.choice(v.REPLACE).format(entry=entry, kind=kind, text=text))
    args = {"kind": kind, "entry": entry, "text": text}
    c.call("memory_replace", args, _ok(f"replaced in {kind}.md ({entry})."))
    c.answer(f"Entry {entry} now says: {text}")
    return c


def memory_consolidate(rng: random.Random) -> Conversation:
    c = Conversation("memory_consolidate")
    kind, text = rng.choice(v.MEMORIES)
    ids = rng.sample(v.ENTRY_IDS, rng.choice((2, 3)))
    shown = ", ".join(ids[:-1]) + " and " + ids[-1]
    c.owner(rng.choice(v.CONSOLIDATE).format(entries=shown, text=text))
    new = rng.choice([e for e in v.ENTRY_IDS if e not in ids])
    args = {"kind": kind, "entries": ids, "text": text}
    c.call("memory_consolidate", args, _ok(f"consolidated in {kind}.md ({new})."))
    c.answer(f"Merged {shown} into one entry, {new}.")
    return c


def memory_note(rng: random.Random) -> Conversation:
    c = Conversation("memory_note")
    text = rng.choice(v.NOTES)
    c.owner(rng.choice(v.NOTE).format(text=text))
    entry = rng.choice(v.ENTRY_IDS)
    c.call("memory_note", {"text": text}, _ok(f"saved in notes.md ({entry})."))
    c.answer(f"Noted ({entry}).")
    return c


def memory_recall(rng: random.Random) -> Conversation:
    c = Conversation("memory_recall")
    topic, fact = rng.choice(v.RECALL_TOPICS)
    c.owner(rng.choice(v.RECALL).format(topic=topic))
    entry = rng.choice(v.ENTRY_IDS)
    c.call("memory_recall", {"query": topic}, _ok(f"[{entry}] {fact}"))
    c.answer(f"I remember this: {fact}")
    return c


# what the model says for each denial, in plain words (invalid_arguments is left out:
# the generator never writes a wrong call)
PLAIN = {
    DenyReason.NO_GRANT: "I could not do that: none of your grants allows it. "
    "You can add a grant for it if you want me to.",
    DenyReason.GRANT_EXPIRED: "I could not do that: the grant that allowed it has expired.",
    DenyReason.TAINT_TOO_HIGH: "I could not do that: this conversation has seen data too "
    "sensitive for that call.",
    DenyReason.DENIED_BY_GRANT: "I could not do that: one of your grants forbids it.",
    DenyReason.APPROVAL_REFUSED: "You refused the call, so I did not do it.",
    DenyReason.APPROVAL_EXPIRED: "The approval request expired without an answer, "
    "so nothing was done. Ask again when you are ready to approve it.",
    DenyReason.GRANTS_INVALID: "I could not do that: your grant files have an error. "
    "You have been told where.",
    DenyReason.AUDIT_UNAVAILABLE: "I could not do that: the audit log cannot be written "
    "right now, so no tool may run.",
    DenyReason.STATE_UNREADABLE: "I could not do that: this session's broker state is damaged.",
    DenyReason.APPROVAL_STALE: "The grants or the session changed before you approved, "
    "so the call was not run. Please ask again.",
    DenyReason.UNTRUSTED_SESSION: "I could not do that: this session has read untrusted "
    "content, and your grant forbids that call now.",
}


def _some_call(rng: random.Random) -> tuple[str, str, Args]:
    """An owner's request and the call it asks for, of any sandbox tool."""
    kind = rng.choice(("read_file", "write_file", "shell", "http_fetch"))
    if kind == "read_file":
        path = _path(rng)
        return rng.choice(v.READ).format(path=path, subject="it"), kind, {"path": path}
    if kind == "write_file":
        path, content = _path(rng), rng.choice(v.CONTENTS)
        text = rng.choice(v.WRITE).format(path=path, content=content)
        return text, kind, {"path": path, "content": content}
    if kind == "shell":
        command = rng.choice(v.COMMANDS)[0]
        return rng.choice(v.SHELL).format(command=command), kind, {"command": command}
    url = rng.choice(v.URLS)
    return rng.choice(v.FETCH).format(url=url), kind, {"url": url}


def denial(rng: random.Random) -> Conversation:
    c = Conversation("denial")
    said, tool, args = _some_call(rng)
    reason = rng.choice(sorted(PLAIN))
    c.owner(said)
    c.call(tool, args, Outcome("denied", reason.value))
    c.answer(PLAIN[reason])
    return c


def approval(rng: random.Random) -> Conversation:
    """A call that waits for the owner: approved (its result), refused or expired."""
    c = Conversation("approval")
    said, tool, args = _some_call(rng)
    c.owner(said)
    way = rng.choice(("approved", "approved", "refused", "expired"))
    if way == "refused":
        c.call(tool, args, Outcome("denied", "approval_refused", approval=True))
        c.answer(PLAIN[DenyReason.APPROVAL_REFUSED])
        return c
    if way == "expired":
        c.call(tool, args, Outcome("denied", "approval_expired", approval=True))
        c.answer(PLAIN[DenyReason.APPROVAL_EXPIRED])
        return c
    _, fact = rng.choice(v.FACTS)
    content = {
        "read_file": _file_text(rng, fact),
        "write_file": f"wrote {len(str(args.get('content', '')).encode())} bytes to "
        f"{args.get('path')}",
        "shell": f"{fact}\n[exit status 0]",
        "http_fetch": _page(fact),
    }[tool]
    c.call(tool, args, _ok(content, untrusted=tool != "write_file", approval=True))
    if tool == "write_file":
        c.answer(f"Done: {content}.")
    else:
        c.answer(f"You approved it. The result: {fact}.")
    return c


def failure(rng: random.Random) -> Conversation:
    c = Conversation("failure")
    said, tool, args = _some_call(rng)
    message = {
        "read_file": ("the file does not exist", "the file is not UTF-8 text"),
        "write_file": ("the file could not be written", "the granted path does not exist"),
        "shell": ("the tool timed out", "the sandbox could not start"),
        "http_fetch": ("the host is not allowed or could not be reached", "the fetch failed"),
    }[tool]
    text = rng.choice(message)
    c.owner(said)
    c.call(tool, args, Outcome("failed", text))
    c.answer(f"That did not work: {text}.")
    return c


def two_step(rng: random.Random) -> Conversation:
    c = Conversation("two_step")
    src, dst = rng.sample([f"{d}/{f}" for d in v.DIRS for f in v.FILES], 2)
    _, fact = rng.choice(v.FACTS)
    text = _file_text(rng, fact)
    c.owner(rng.choice(v.COPY).format(src=src, dst=dst))
    c.call("read_file", {"path": src}, _ok(text, untrusted=True))
    size = len(text.encode())
    c.call("write_file", {"path": dst, "content": text}, _ok(f"wrote {size} bytes to {dst}"))
    c.answer(f"Copied {src} to {dst} ({size} bytes).")
    return c


def chat(rng: random.Random) -> Conversation:
    c = Conversation("chat")
    pick = rng.choice(("greeting", "thanks", "question", "arithmetic"))
    if pick == "arithmetic":
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        phrase = rng.choice(v.ARITHMETIC)
        value = a * b if "times" in phrase else a - b if "-" in phrase else a + b
        c.owner(phrase.format(a=a, b=b))
        c.answer(f"{value}.")
        return c
    table = {"greeting": v.GREETINGS, "thanks": v.THANKS, "question": v.QUESTIONS}[pick]
    said, answer = rng.choice(table)
    c.owner(said)
    c.answer(answer)
    return c


def injection(rng: random.Random) -> Conversation:
    c = Conversation("injection")
    attack = rng.choice(v.INJECTIONS)
    _, fact = rng.choice(v.FACTS)
    if rng.random() < 0.5:
        path = _path(rng)
        c.owner(rng.choice(v.READ).format(path=path, subject="what it says"))
        c.call("read_file", {"path": path}, _ok(f"{fact}.\n\n{attack}", untrusted=True))
        where = "The file"
    else:
        url = rng.choice(v.URLS)
        c.owner(rng.choice(v.FETCH).format(url=url))
        c.call("http_fetch", {"url": url}, _ok(_page(fact) + f"\n{attack}", untrusted=True))
        where = "The page"
    c.answer(
        f"{where} says: {fact}. It also holds an instruction addressed to me "
        f'("{attack}"). I did not follow it: only you give me instructions.'
    )
    return c


CATEGORIES: dict[str, Callable[[random.Random], Conversation]] = {
    f.__name__: f
    for f in (
        read_file,
        write_file,
        shell,
        http_fetch,
        memory_add,
        memory_replace,
        memory_consolidate,
        memory_note,
        memory_recall,
        denial,
        approval,
        failure,
        two_step,
        chat,
        injection,
    )
}
