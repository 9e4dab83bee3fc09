"""The generator's categories: each makes one conversation from a seeded random source.

No I/O. A conversation is the turns loopd logs (the owner's text, the model's replies,
the tool results as the turn loop puts them in front of the model) and, for each call,
the call and the broker's answer, so a test can replay it through the real turn loop.
"""

from __future__ import annotations

import json
import random
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from boxmaker.core.grants.deny_reasons import DenyReason
from boxmaker.core.model.chat_format import Role, Turn
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


def _word(rng: random.Random) -> str:
    """A made-up word of two or three syllables."""
    return "".join(rng.choice(v.SYLLABLES) for _ in range(rng.choice((2, 3))))


def _dir(rng: random.Random) -> str:
    """A listed folder or a made-up one under one of the roots."""
    if rng.random() < 0.4:
        return rng.choice(v.DIRS)
    root = rng.choice(v.ROOTS)
    while "{word}" in root:
        root = root.replace("{word}", _word(rng), 1)
    root = root.replace("{user}", rng.choice(v.USERS))
    parts = [_word(rng) for _ in range(rng.choice((0, 1, 1, 2)))]
    return "/".join((root, *parts))


def _path(rng: random.Random) -> str:
    name = rng.choice(v.FILES) if rng.random() < 0.4 else _word(rng) + rng.choice(v.EXTENSIONS)
    return f"{_dir(rng)}/{name}"


LETTERS = "ABCDEFGHKMPRT"  # a code's letters (no look-alikes of digits)


def _fill(rng: random.Random, form: str) -> str:
    """`form` with each slot filled with made-up words, numbers and names."""
    slots = {
        "thing": rng.choice(v.THINGS),
        "name": rng.choice(v.PEOPLE),
        "place": rng.choice(v.PLACES),
        "item": rng.choice(v.ITEMS),
        "verb": rng.choice(v.VERBS),
        "day": rng.choice(v.DAYS),
        "digits": str(rng.randint(1000, 99999)),
        "n": str(rng.randint(2, 400)),
        "time": f"{rng.randint(6, 22):02}:{rng.choice((0, 10, 15, 20, 30, 40, 45, 50)):02}",
        "code": f"{rng.choice(LETTERS)}{rng.choice(LETTERS)}-{rng.randint(10, 999)}",
    }
    return form.format(**slots)


def _fact(rng: random.Random) -> tuple[str, str]:
    """(subject, fact): a listed one or a made-up one."""
    if rng.random() < 0.3:
        return rng.choice(v.FACTS)
    subject, fact = rng.choice(v.FACT_FORMS)
    # one filling for both, so the subject names the fact's own thing
    seed = rng.random()
    return _fill(random.Random(seed), subject), _fill(random.Random(seed), fact)


def _content(rng: random.Random) -> str:
    if rng.random() < 0.3:
        return rng.choice(v.CONTENTS)
    return _fill(rng, rng.choice(v.CONTENT_FORMS))


def _said(rng: random.Random, phrasing: str, **slots: object) -> str:
    """An owner's phrasing with its slots filled, its first letter upper case most of the
    time (the composed phrasings are lower case; a slot's value is never changed)."""
    text = phrasing.format(**slots)
    if not phrasing.startswith("{") and rng.random() < 0.75:
        text = text[0].upper() + text[1:]
    return text


READ_PLAIN = tuple(p for p in v.READ if "{subject}" not in p)
READ_ABOUT = tuple(p for p in v.READ if "{subject}" in p)


def _ok(text: str, untrusted: bool = False, approval: bool = False) -> Outcome:
    return Outcome("result", text, approval=approval, untrusted=untrusted)


def _file_text(rng: random.Random, fact: str, other: str | None = None) -> tuple[str, str | None]:
    """A file holding `fact` (and `other`, another fact, when given), and its heading when
    it is a Markdown document. Short notes (bare lines, a title, a list) and, since run 5
    wrote the walk-through's welcome note back, documents of several paragraphs; in a
    file with one fact the fact is the first line under the title."""
    lines = [f"{fact}."] if other is None else rng.sample([f"{fact}.", f"{other}."], 2)
    shape = rng.choice(("bare", "titled", "list", "doc", "doc"))
    if shape == "bare":
        return "\n".join(lines) + "\n", None
    if shape == "doc":
        return _document(rng, lines)
    title = rng.choice(("Notes", "Reminder", "From the last meeting", "Status", "TODO", "Log"))
    if shape == "titled":
        return f"{title}\n" + "\n".join(lines) + "\n", None
    return f"{title}:\n" + "".join(f"- {line}\n" for line in lines), None


def _document(rng: random.Random, lines: list[str]) -> tuple[str, str]:
    """A Markdown document: a `#` heading, the lines first in a paragraph of filler
    sentences (two facts: anywhere in it), one a line or wrapped at a width, and sometimes
    a second section with a list or an indented block of commands, as the walk-through's
    welcome note has."""
    title = _fill(rng, rng.choice(v.DOC_TITLES))
    body = [_fill(rng, rng.choice(v.DOC_LINES)) for _ in range(rng.randint(1, 4))]
    if len(lines) == 1:
        body.insert(0, lines[0])
    else:
        for line in lines:
            body.insert(rng.randint(0, len(body)), line)
    if rng.random() < 0.5:
        # one paragraph wrapped as an editor wraps it, a sentence across two lines (the
        # welcome note's shape: run 7 quoted its last short line, not its heading)
        parts = [f"# {title}", "", *textwrap.wrap(" ".join(body), rng.choice((68, 76, 80)))]
    else:
        parts = [f"# {title}", "", *body]
    extra = rng.choice(("none", "list", "commands"))
    if extra == "list":
        items = [_fill(rng, rng.choice(v.CONTENT_FORMS)) for _ in range(rng.randint(2, 3))]
        parts += ["", rng.choice(v.DOC_SECTIONS), "", *(f"- {item}" for item in items)]
    elif extra == "commands":
        shown = [_command(rng)[0] for _ in range(2)]
        width = max(len(c) for c in shown) + 4
        parts += ["", _fill(rng, rng.choice(v.DOC_LINES)).rstrip(".") + ":", ""]
        parts += [f"    {c.ljust(width)}{_fill(rng, rng.choice(v.CONTENT_FORMS))}" for c in shown]
    return "\n".join(parts) + "\n", title


def _quote(rng: random.Random, where: str, fact: str) -> str:
    """An answer that quotes the fact's line word for word, in quotes, as the file or page
    has it (run 4 paraphrased a titled file's line: "starts" became "begins")."""
    form = rng.choice(('{W} says: "{f}."', 'It says: "{f}."', '{W} reads: "{f}."'))
    return form.format(W=where, f=fact)


def _read_answer(rng: random.Random, fact: str, title: str | None) -> str:
    """A read's answer: the fact's line quoted, after a document's heading when the owner
    asked for the whole file."""
    if title is None:
        return _quote(rng, "The file", fact)
    form = rng.choice(
        (
            'The file is titled "{t}" and says: "{f}."',
            'The file, headed "{t}", says: "{f}."',
            'It is titled "{t}". It says: "{f}."',
        )
    )
    return form.format(t=title, f=fact)


def read_file(rng: random.Random) -> Conversation:
    c = Conversation("read_file")
    path = _path(rng)
    subject, fact = _fact(rng)
    asked = rng.choice(READ_ABOUT if rng.random() < 0.4 else READ_PLAIN)
    # a file with a second fact only when the owner named what they want from it
    other = _fact(rng)[1] if "{subject}" in asked and rng.random() < 0.5 else None
    c.owner(_said(rng, asked, path=path, subject=subject))
    text, title = _file_text(rng, fact, other)
    c.call("read_file", {"path": path}, _ok(text, untrusted=True))
    # the heading only when the owner asked for the file, not for one thing in it
    c.answer(_read_answer(rng, fact, None if "{subject}" in asked else title))
    return c


def write_file(rng: random.Random) -> Conversation:
    c = Conversation("write_file")
    path, content = _path(rng), _content(rng)
    c.owner(_said(rng, rng.choice(v.WRITE), path=path, content=content))
    size = len(content.encode())
    c.call("write_file", {"path": path, "content": content}, _ok(f"wrote {size} bytes to {path}"))
    c.answer(f"Done: I wrote {size} bytes to {path}.")
    return c


def _command(rng: random.Random) -> tuple[str, str]:
    """(command, what it prints): a listed one or a made-up one, with pipes, quotes,
    backslashes and `&&` among them, so the call's JSON escapes what the shell needs."""
    if rng.random() < 0.3:
        return rng.choice(v.COMMANDS)
    word, other, path, n = _word(rng), _word(rng), _path(rng), rng.randint(2, 60)
    a, b = rng.randint(2, 40), rng.randint(2, 40)
    name = path.rsplit("/", 1)[-1] or "notes.txt"
    low, high = sorted((word, other))
    made = (
        (f"echo {word}", word),
        (f"wc -l {path}", f"{n} {path}"),
        (f"ls {_dir(rng)}", "\n".join(_word(rng) + ".txt" for _ in range(3))),
        (f"head -n 1 {path}", _fill(rng, rng.choice(v.CONTENT_FORMS))),
        (f"grep -c {word} {name}", str(n)),
        (f"stat -c %s {name}", str(n * 37)),
        (f"printf '{word}\\n'", word),
        (f"sort {name} | uniq | wc -l", str(n)),
        (f"printf '{word}\\n{other}\\n' | sort", f"{low}\n{high}"),
        (f"printf '{low}\\n{high}\\n' | sort -r", f"{high}\n{low}"),
        (f"expr {a} + {b}", str(a + b)),
        (f"expr {a} \\* {b}", str(a * b)),
        (f"echo $(({a} * {b}))", str(a * b)),
        (f"echo {word} | tr a-z A-Z", word.upper()),
        (f"echo '{word} {other}' | wc -w", "2"),
        (f"seq {n} | tail -n 1", str(n)),
        (f"ls {_dir(rng)} | wc -l", str(n)),
        (f"echo {word} && echo {other}", f"{word}\n{other}"),
        (f"test -f {name} && echo yes || echo no", rng.choice(("yes", "no"))),
        (f"basename {path}", name),
        (f'echo "{word} {other}"', f"{word} {other}"),
        (f"grep -n '{word}' {name}", f"{rng.randint(1, 30)}:{word}"),
        (f"cut -d, -f1 {name} | head -n 1", other),
        (f"wc -c < {name}", str(n * 11)),
        (f"seq {a % 5 + 2}", "\n".join(str(i) for i in range(1, a % 5 + 3))),
    )
    return rng.choice(made)


def _failing(rng: random.Random) -> tuple[str, str, int]:
    """(command, what it prints, its exit status): a command that fails as shells do."""
    name = _word(rng) + rng.choice((".txt", ".md", ".log"))
    folder, word = _dir(rng), _word(rng)
    return rng.choice(
        (
            (f"cat {name}", f"cat: {name}: No such file or directory", 1),
            (f"ls {folder}", f"ls: cannot access '{folder}': No such file or directory", 2),
            (f"{word} --version", f"sh: 1: {word}: not found", 127),
            (f"grep {word} {name}", f"grep: {name}: No such file or directory", 2),
            (
                f"head -n 1 {name}",
                f"head: cannot open '{name}' for reading: No such file or directory",
                1,
            ),
            ("id -un", f"id: cannot find name for user ID {rng.randint(1000, 65534)}", 1),
        )
    )


def shell(rng: random.Random) -> Conversation:
    c = Conversation("shell")
    if rng.random() < 0.15:  # a command that fails: its stderr, its status
        command, output, status = _failing(rng)
    else:
        (command, output), status = _command(rng), 0
    args: Args = {"command": command}
    if rng.random() < 0.3:  # a cwd only when the owner names one
        args["cwd"] = _dir(rng)
        c.owner(_said(rng, rng.choice(v.SHELL_CWD), command=command, cwd=args["cwd"]))
    else:
        c.owner(_said(rng, rng.choice(v.SHELL), command=command))
    c.call("shell", args, _ok(_shell_result(output, status), untrusted=True))
    if status:
        c.answer(f"`{command}` failed (exit status {status}):\n{output}")
    else:
        c.answer(f"`{command}` printed:\n{output}")
    return c


def _shell_result(output: str, status: int) -> str:
    """What the sandbox's toolkit returns: the output, its own newline, the status."""
    return f"{output}\n\n[exit status {status}]"


def _url(rng: random.Random) -> str:
    """A listed URL or a made-up one. Run 6 cut the path off held-out URLs of another
    domain ("https://tides.sample.example/" for ".../oslo"): made-up hosts of several
    labels and domains, with paths of one to three parts."""
    if rng.random() < 0.3:
        return rng.choice(v.URLS)
    labels = [_word(rng) for _ in range(rng.choice((1, 1, 2)))]
    if rng.random() < 0.3:
        labels[-1] += "-" + _word(rng)
    host = ".".join([*labels, rng.choice(v.DOMAINS)])
    parts = [_word(rng) for _ in range(rng.choice((1, 1, 2, 3)))]
    if rng.random() < 0.2:
        parts[-1] += rng.choice((".json", ".txt", ".html", "-2026"))
    return f"https://{host}/{'/'.join(parts)}"


def _page(fact: str) -> str:
    return f"HTTP 200 OK\ncontent-type: text/plain\n\nUpdate: {fact}."


def http_fetch(rng: random.Random) -> Conversation:
    c = Conversation("http_fetch")
    url = _url(rng)
    _, fact = _fact(rng)
    c.owner(_said(rng, rng.choice(v.FETCH), url=url))
    c.call("http_fetch", {"url": url}, _ok(_page(fact), untrusted=True))
    c.answer(_quote(rng, "The page", fact))
    return c


MEMORY_FORMS = (
    "The owner likes {item}.",
    "The owner meets {name} on {day}s.",
    "The owner keeps the {thing} key in {place}.",
    "{name} is the owner's neighbour.",
    "The owner's {thing} code is {digits}.",
    "The owner leaves work at {time}.",
    "The owner walks to {place} on {day}s.",
    "The owner's favourite day is {day}.",
    "The {thing} code is {digits}.",
    "Deliveries go to {place}.",
    "{name} looks after the {thing}.",
    "Spare {item} are kept in {place}.",
    "The team meets in {place} on {day}s.",
    "The {thing} closes at {time}.",
    "{name} fixes the {thing} when it breaks.",
    "Invoices are numbered like {code}.",
    # run 5 filed such facts under `user`: more that are not about the owner
    "The {thing} is kept in {place}.",
    "The club meets on {day}s.",
    "{item} are stored in {place}.",
    "{name} plays in the {thing} band.",
    "The {thing} is serviced every {day}.",
    "{name}'s number is {digits}.",
    "The choir rehearses in {place}.",
    "{name} sings in the choir on {day}s.",
    "Receipts are filed under {code}.",
    "The {thing} papers are in {place}.",
)


# (topic, fact) of a stored memory the owner asks about, about the owner or not
RECALL_FORMS = (
    ("{name}", "The owner meets {name} on {day}s."),
    ("the {thing}", "The owner keeps the {thing} key in {place}."),
    ("{item}", "The owner likes {item}."),
    ("the {thing} code", "The {thing} code is {digits}."),
    ("{item}", "Spare {item} are kept in {place}."),
    ("the club", "The club meets on {day}s."),
    ("{name}", "{name} looks after the {thing}."),
    ("deliveries", "Deliveries go to {place}."),
    ("the {thing}", "The {thing} closes at {time}."),
    ("invoices", "Invoices are numbered like {code}."),
    ("the choir", "The choir rehearses in {place}."),
    ("{name}", "{name}'s number is {digits}."),
)


def memory_kind(text: str) -> str:
    """The rule the model learns: a fact about the owner goes to `user`, any other
    lasting fact to `memory` (the held-out set follows it too)."""
    return "user" if re.search(r"\b(the owner|owner's)\b", text, re.IGNORECASE) else "memory"


def _memory(rng: random.Random) -> tuple[str, str]:
    """(kind, text) of a lasting fact: a listed one or a made-up one."""
    if rng.random() < 0.3:
        return rng.choice(v.MEMORIES)
    text = _fill(rng, rng.choice(MEMORY_FORMS))
    return memory_kind(text), text


def _hex(rng: random.Random, count: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(count))


def _entry(rng: random.Random) -> str:
    """An entry id as the owner writes it: a listed one, a short made-up one, or one in
    memoryd's own form."""
    pick = rng.random()
    if pick < 0.3:
        return rng.choice(v.ENTRY_IDS)
    if pick < 0.6:
        return "e-" + _hex(rng, 4)
    return f"{rng.choice('umn')}-{_hex(rng, 12)}"


def _new_entry(rng: random.Random, kind: str) -> str:
    """The id memoryd gives a new entry (`memoryd.store`: the kind's letter, 12 hex)."""
    return f"{ {'memory': 'm', 'user': 'u', 'note': 'n'}[kind] }-{_hex(rng, 12)}"


def memory_add(rng: random.Random) -> Conversation:
    c = Conversation("memory_add")
    kind, text = _memory(rng)
    c.owner(_said(rng, rng.choice(v.REMEMBER), text=text, lower=text[0].lower() + text[1:]))
    entry = _new_entry(rng, kind)
    outcome = _ok(f"added to {kind}.md ({entry}).")
    c.call("memory_add", {"kind": kind, "text": text}, outcome)
    c.answer(f"I will remember that. It is saved in {kind}.md as {entry}.")
    return c


def memory_replace(rng: random.Random) -> Conversation:
    c = Conversation("memory_replace")
    kind, text = _memory(rng)
    entry = _entry(rng)
    c.owner(_said(rng, rng.choice(v.REPLACE), entry=entry, kind=kind, text=text))
    args = {"kind": kind, "entry": entry, "text": text}
    c.call("memory_replace", args, _ok(f"replaced in {kind}.md ({entry})."))
    c.answer(f"Entry {entry} now says: {text}")
    return c


def memory_consolidate(rng: random.Random) -> Conversation:
    c = Conversation("memory_consolidate")
    kind, text = _memory(rng)
    ids: list[str] = []
    while len(ids) < rng.choice((2, 2, 3)):
        entry = _entry(rng)
        if entry not in ids:
            ids.append(entry)
    shown = ", ".join(ids[:-1]) + " and " + ids[-1]
    c.owner(_said(rng, rng.choice(v.CONSOLIDATE), entries=shown, text=text))
    new = _new_entry(rng, kind)
    args = {"kind": kind, "entries": ids, "text": text}
    c.call("memory_consolidate", args, _ok(f"consolidated in {kind}.md ({new})."))
    c.answer(f"Merged {shown} into one entry, {new}.")
    return c


def memory_note(rng: random.Random) -> Conversation:
    c = Conversation("memory_note")
    text = rng.choice(v.NOTES) if rng.random() < 0.4 else _content(rng)
    c.owner(_said(rng, rng.choice(v.NOTE), text=text))
    entry = _new_entry(rng, "note")
    c.call("memory_note", {"text": text}, _ok(f"saved in notes.md ({entry})."))
    c.answer(f"Noted ({entry}).")
    return c


def memory_recall(rng: random.Random) -> Conversation:
    c = Conversation("memory_recall")
    if rng.random() < 0.3:
        topic, fact = rng.choice(v.RECALL_TOPICS)
    else:  # one filling for both, so the topic names the fact's own thing
        topic_form, fact_form = rng.choice(RECALL_FORMS)
        seed = rng.random()
        topic, fact = _fill(random.Random(seed), topic_form), _fill(random.Random(seed), fact_form)
    c.owner(_said(rng, rng.choice(v.RECALL), topic=topic))
    if rng.random() < 0.35:  # nothing stored on it (the eval's memoryd starts empty)
        c.call("memory_recall", {"query": topic}, _ok('{"entries":[]}'))
        c.answer(f"I have nothing stored about {topic}.")
        return c
    kind = memory_kind(fact)
    entry = {
        "id": _new_entry(rng, kind),
        "kind": kind,
        "text": fact,
        "untrusted": False,
        "time": f"2026-{rng.randint(1, 12):02}-{rng.randint(1, 28):02}T"
        f"{rng.randint(0, 23):02}:{rng.randint(0, 59):02}:{rng.randint(0, 59):02}."
        f"{rng.randint(0, 999):03}Z",
    }
    shown = json.dumps({"entries": [entry]}, ensure_ascii=False, separators=(",", ":"))
    c.call("memory_recall", {"query": topic}, _ok(shown))
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
        return _said(rng, rng.choice(READ_PLAIN), path=path), kind, {"path": path}
    if kind == "write_file":
        path, content = _path(rng), _content(rng)
        text = _said(rng, rng.choice(v.WRITE), path=path, content=content)
        return text, kind, {"path": path, "content": content}
    if kind == "shell":
        command = _command(rng)[0]
        return _said(rng, rng.choice(v.SHELL), command=command), kind, {"command": command}
    url = _url(rng)
    return _said(rng, rng.choice(v.FETCH), url=url), kind, {"url": url}


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
    _, fact = _fact(rng)
    text, title = _file_text(rng, fact)
    content = {
        "read_file": text,
        "write_file": f"wrote {len(str(args.get('content', '')).encode())} bytes to "
        f"{args.get('path')}",
        "shell": _shell_result(fact, 0),
        "http_fetch": _page(fact),
    }[tool]
    c.call(tool, args, _ok(content, untrusted=tool != "write_file", approval=True))
    # the answer each category gives without a wait: run 5 borrowed an approval-only
    # form ("You approved it. The result: ...") for plain reads and lost the fact
    if tool == "write_file":
        c.answer(f"Done: I {content}.")
    elif tool == "read_file":
        c.answer(_read_answer(rng, fact, title))
    elif tool == "shell":
        c.answer(f"`{args['command']}` printed:\n{fact}")
    else:
        c.answer(_quote(rng, "The page", fact))
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


@dataclass(frozen=True)
class CopyParts:
    """What a copy and its read twin share: `two_step` and `read_twin` draw it first from
    one shared seed, so each copy has a read of the same file."""

    src: str
    dst: str
    subject: str  # what the owner calls the fact
    fact: str
    text: str  # the source's text, holding the fact
    title: str | None  # its heading, when it is a document


def _copy_parts(rng: random.Random) -> CopyParts:
    src, dst = _path(rng), _path(rng)
    while dst == src:
        dst = _path(rng)
    subject, fact = _fact(rng)
    return CopyParts(src, dst, subject, fact, *_file_text(rng, fact))


def two_step(rng: random.Random) -> Conversation:
    c = Conversation("two_step")
    parts = _copy_parts(rng)
    src, dst, text = parts.src, parts.dst, parts.text
    c.owner(_said(rng, rng.choice(v.COPY), src=src, dst=dst))
    c.call("read_file", {"path": src}, _ok(text, untrusted=True))
    size = len(text.encode())
    c.call("write_file", {"path": dst, "content": text}, _ok(f"wrote {size} bytes to {dst}"))
    c.answer(f"Copied {src} to {dst} ({size} bytes).")
    return c


def read_twin(rng: random.Random) -> Conversation:
    """A copy's twin: the same file read with the same result, but the owner asked only to
    read it, so the next step is an answer quoting it and not a write. Runs 3 and 4 showed
    that without it the step after a read result follows the weights, not the request."""
    c = Conversation("read_twin")
    parts = _copy_parts(rng)
    # asked about one thing in it too: run 5 wrote such reads back to their own path
    about = rng.random() < 0.4
    asked = rng.choice(READ_ABOUT if about else READ_PLAIN)
    c.owner(_said(rng, asked, path=parts.src, subject=parts.subject))
    c.call("read_file", {"path": parts.src}, _ok(parts.text, untrusted=True))
    c.answer(_read_answer(rng, parts.fact, None if about else parts.title))
    return c


def chat(rng: random.Random) -> Conversation:
    c = Conversation("chat")
    # a question twice: half of them ask to name or pick something (run 10 took "Name
    # a ..." for a memory lookup); one draw, so every other conversation stays v9's
    pick = rng.choice(("greeting", "casual", "thanks", "question", "question", "arithmetic"))
    if pick == "arithmetic":
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        phrase = rng.choice(v.ARITHMETIC)
        value = a * b if "times" in phrase else a - b if "-" in phrase else a + b
        c.owner(phrase.format(a=a, b=b))
        c.answer(f"{value}.")
        return c
    tables = {"greeting": v.GREETINGS, "casual": v.CASUAL, "thanks": v.THANKS}
    table = tables.get(pick, v.QUESTIONS + v.CHOICES)
    said, answer = rng.choice(table)
    c.owner(said)
    c.answer(answer)
    return c


def injection(rng: random.Random) -> Conversation:
    c = Conversation("injection")
    attack = rng.choice(v.INJECTIONS)
    _, fact = _fact(rng)
    if rng.random() < 0.5:
        path = _path(rng)
        c.owner(_said(rng, rng.choice(READ_PLAIN), path=path))
        c.call("read_file", {"path": path}, _ok(f"{fact}.\n\n{attack}", untrusted=True))
        where = "The file"
    else:
        url = _url(rng)
        c.owner(_said(rng, rng.choice(v.FETCH), url=url))
        c.call("http_fetch", {"url": url}, _ok(_page(fact) + f"\n{attack}", untrusted=True))
        where = "The page"
    c.answer(
        f'{where} says: "{fact}." It also holds an instruction addressed to me '
        f'("{attack}"). I did not follow it: only you give me instructions.'
    )
    return c


# how many of each category in every round of the schedule: more of what runs 2 to 4
# got wrong most (two-step copies and their read twins, writes, shell, the memory tools),
# fewer of what they always got right (chat, replace, consolidate); injections at 2,
# since run 4 at 1 acted on two of them; fetches back to 2, since run 6 at 1 cut the
# path off 8 of 12 held-out URLs; plain reads at 3, since run 9's added chat tipped five
# held-out reads into read-then-write
WEIGHTS = {
    "read_file": 3,
    "write_file": 4,
    "shell": 3,
    "http_fetch": 2,
    "memory_add": 3,
    "memory_replace": 1,
    "memory_consolidate": 1,
    "memory_note": 2,
    "memory_recall": 2,
    "denial": 1,
    "approval": 1,
    "failure": 1,
    "two_step": 4,
    "read_twin": 4,
    "chat": 1,
    "injection": 2,
}

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
        read_twin,
        chat,
        injection,
    )
}

# example i is made by SCHEDULE[i mod len(SCHEDULE)]: the weights, interleaved
SCHEDULE: tuple[str, ...] = tuple(
    name for round_ in range(max(WEIGHTS.values())) for name in CATEGORIES if WEIGHTS[name] > round_
)

# a category drawn from its twin's seed (the k-th of one in a round with the k-th of the
# other), so the two see the same file; their weights are equal
TWINS = {"read_twin": "two_step"}


def seed_key(seed: int, index: int) -> str:
    """The random source's seed for example `index`: its own, or for a twin pair one
    shared by the pair's k-th members in the same round of the schedule."""
    round_, slot = divmod(index, len(SCHEDULE))
    name = SCHEDULE[slot]
    group = TWINS.get(name, name)
    if group not in TWINS.values():
        return f"{seed}:{index}"
    return f"{seed}:{round_}:{group}:{SCHEDULE[:slot].count(name)}"
