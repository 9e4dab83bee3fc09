"""Reading the xml syntax's tool calls out of a whole reply, where every value ends. Pure.

Qwen3-Coder and Qwen3.5 write a call as `<tool_call>`, `<function=N>`, any number
of `<parameter=K>` + value + `</parameter>`, `</function>`, `</tool_call>`, each
on its own line. Their templates write a value verbatim, so a value may hold any of
those markers as text (a model writing an XML or Jinja file, or docs about these
very tags) and the model cannot escape them. A marker inside a value is told from
the real one by what follows it and by the tool's schema. The rules, in order:

1. **Where a call opens.** At `<tool_call>`, anywhere. Written bare, without it
   (Qwen3-Coder models drop it), at a `<function=` that starts a line (only
   spaces or tabs before it on its line) or follows a call (whitespace between);
   a bare call ends at its `</function>`, or at a `</tool_call>` right after it,
   and is a call only where it reads whole: one that does not is text. Inside a
   line `<function=` is text (an answer that quotes a call is not one).
2. **The inside of a call.** `<function=N>`, then parameters, then `</function>`,
   then (wrapped) `</tool_call>`, with only whitespace between them. A JSON object
   in the wrapper instead is read by `call_syntaxes` rule 1, and ends where its
   JSON ends.
3. **Where a value ends.** A value the schema types `object` or `array` ends where
   its JSON ends (then whitespace and `</parameter>`). Any other value ends at a
   `</parameter>` that is followed, after whitespace, by `</function>` or by a
   sibling: `<parameter=K>` where K is not yet given and, where the schema knows
   the tool, is one of its parameters. One leading and one trailing newline of a
   value are not part of it; values are typed by `call_syntaxes` rule 4.
4. **One reading.** Rules 2 and 3 may allow several readings of a call (a value
   that holds `</parameter>` then `</function>`). A reading counts only where the
   rest of the reply reads after it: later calls read, and no text outside a call
   after it holds a closer (`</parameter>`, `</function>`, `</tool_call>`) or
   `<parameter=`, which would be a value's real end still to come. Of those, the
   one whose values hold the fewest of the syntax's markers is taken: two calls
   in a row render exactly as one call whose last value holds the first call's
   end and the second's start, and two calls are what models write (so a value
   that holds `</function>`, `</tool_call>`, `<tool_call>` and `<function=` in a
   row is read so). Among equals, the one whose earlier values end first: a
   model writes its parameters in order, and a later value then holds what an
   earlier one would otherwise have taken from it. No reading: a problem.
5. **Unclosed is a problem, never a merge.** A reading in which a value holds
   `<parameter=K>`, for a K that is one of the tool's parameters (any K where the
   schema does not know the tool) and that the call does not otherwise give, is
   none: that is a parameter left open before its sibling, and the call a
   problem. So is a call that never closes, and text out of place. A value may
   hold `</parameter>` then `<parameter=K>` for a K the call gives (a file that
   quotes a whole call): a parameter written twice reads the same way, as one
   value holding the second, since the two are the same text.
6. **Never run truncated.** A call that cannot be read is a `BadToolCall` the
   model reads. It ends at its first `</tool_call>` (bare: `</function>`) after
   which the rest of the reply reads by rule 4, or else runs to the reply's end:
   no part of it runs and none of it is content. Reading takes at most `MAX_STEPS`
   steps; a reply that needs more is a problem too.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from boxmaker.core.errors import ArgsError
from boxmaker.core.model.call_syntaxes import (
    BadToolCall,
    Call,
    Schemas,
    ToolCall,
    property_kind,
    read_json_call,
    typed_value,
)

OPEN, CLOSE = "<tool_call>", "</tool_call>"
FUNCTION, FUNCTION_END = "<function=", "</function>"
PARAMETER, PARAMETER_END = "<parameter=", "</parameter>"
# what, outside a call, means a value's real end is still to come (rule 4)
STRAY = (PARAMETER_END, FUNCTION_END, CLOSE, PARAMETER)
MARKS = (*STRAY, FUNCTION, OPEN)
MAX_STEPS = 20_000
_JSON_TYPED = ("object", "array")


@dataclass(frozen=True, slots=True)
class XmlReply:
    content: str  # the reply's text outside its calls, as written (not stripped)
    calls: tuple[Call, ...]


class _ProblemError(ArgsError):
    """Why a call cannot be read; its text is the BadToolCall's."""


class _Budget:
    def __init__(self) -> None:
        self.left = MAX_STEPS

    def step(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise _ProblemError("the tool call is too tangled to read; write it again, plainly")


@dataclass(frozen=True, slots=True)
class _Reading:
    name: str
    values: tuple[tuple[str, str], ...]  # (key, value text as written)
    end: int  # where the call's text ends


def _shown(text: str) -> str:
    return " ".join(text[:40].split())


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def _properties(schemas: Schemas | None, tool: str) -> Mapping[str, Any] | None:
    schema = (schemas or {}).get(tool)
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    return properties if isinstance(properties, Mapping) else None


def _json_typed(kind: str | None) -> bool:
    """Whether a value of `kind` is JSON that ends where its JSON ends (rule 3): an
    object or an array, or a union of those (null allowed)."""
    kinds = [k for k in (kind or "").split("|") if k and k != "null"]
    return bool(kinds) and all(k in _JSON_TYPED for k in kinds)


def _head(text: str, at: int, marker: str) -> tuple[str, int] | None:
    """The name in `marker` + NAME + `>` at `at`, and where it ends; None if not one."""
    if not text.startswith(marker, at):
        return None
    start = at + len(marker)
    end = text.find(">", start)
    if end < 0 or "\n" in text[start:end] or "<" in text[start:end]:
        return None
    return text[start:end].strip(), end + 1


class _Reader:
    """Every reading of one reply (rules 1 to 6)."""

    def __init__(self, text: str, schemas: Schemas | None) -> None:
        self.text, self.schemas = text, schemas
        self.budget = _Budget()
        self._rests: dict[int, bool] = {}  # rest_reads, by where the rest starts
        # every `<parameter=K>` head of the reply, in order, and where each K last opens
        self.heads: list[tuple[int, str]] = []
        at = 0
        while (found := text.find(PARAMETER, at)) >= 0:
            at = found + 1
            head = _head(text, found, PARAMETER)
            if head is not None and head[0]:
                self.heads.append((found, head[0]))
        self.last_head = {key: position for position, key in self.heads}

    # -- a call's readings (rules 2 and 3) --------------------------------------------

    def readings(self, at: int, bare: bool) -> Iterator[_Reading]:
        """Every reading of the call whose `<function=` is at `at`."""
        head = _head(self.text, at, FUNCTION)
        if head is None:
            return
        name, after = head
        if not name:
            return
        for values, end in self._parameters(after, name, _properties(self.schemas, name), (), bare):
            yield _Reading(name, values, end)

    def _parameters(
        self,
        at: int,
        name: str,
        properties: Mapping[str, Any] | None,
        given: tuple[tuple[str, str], ...],
        bare: bool,
    ) -> Iterator[tuple[tuple[tuple[str, str], ...], int]]:
        self.budget.step()
        text = self.text
        at = _skip(text, at)
        if text.startswith(FUNCTION_END, at):
            end = at + len(FUNCTION_END)
            close = _skip(text, end)
            if text.startswith(CLOSE, close):
                yield given, close + len(CLOSE)
            elif bare:
                yield given, end
            return
        head = _head(text, at, PARAMETER)
        if head is None:
            return
        key, start = head
        keys = {k for k, _ in given}
        if not key or key in keys:
            return
        if _json_typed(property_kind(properties, key)):
            ends = self._json_end(start)
            if ends is not None:
                value_end, after = ends
                yield from self._parameters(
                    after, name, properties, (*given, (key, text[start:value_end])), bare
                )
                return
        search, index = start, bisect.bisect_left(self.heads, (start, ""))
        while (close := text.find(PARAMETER_END, search)) >= 0:
            self.budget.step()
            search = close + 1
            index, left_open = self._swallow(index, close, properties, keys | {key})
            if left_open:
                return  # this value, and every longer one, holds a parameter left open
            after = close + len(PARAMETER_END)
            if self._ends_value(after, properties, keys | {key}):
                yield from self._parameters(
                    after, name, properties, (*given, (key, text[start:close])), bare
                )

    def _swallow(
        self, index: int, close: int, properties: Mapping[str, Any] | None, given: set[str]
    ) -> tuple[int, bool]:
        """Move over the `<parameter=K>` heads (`self.heads`, from `index`) before `close`:
        where the next index is, and whether a value ending at `close` holds the head of
        a parameter of the tool that is not given before it nor opened anywhere after
        it (rule 5; a longer value holds that head too)."""
        heads = self.heads
        while index < len(heads) and heads[index][0] < close:
            key = heads[index][1]
            index += 1
            known = properties is None or key in properties
            if known and key not in given and self.last_head.get(key, -1) < close:
                return index, True
        return index, False

    def _json_end(self, start: int) -> tuple[int, int] | None:
        """Where a JSON value from `start` ends, and where its `</parameter>` ends."""
        at = _skip(self.text, start)
        try:
            _, end = json.JSONDecoder().raw_decode(self.text, at)
        except (ValueError, RecursionError):
            return None
        close = _skip(self.text, end)
        if not self.text.startswith(PARAMETER_END, close):
            return None
        return end, close + len(PARAMETER_END)

    def _ends_value(
        self, after: int, properties: Mapping[str, Any] | None, given: set[str]
    ) -> bool:
        """Whether a `</parameter>` ending at `after` can end a value (rule 3)."""
        at = _skip(self.text, after)
        if self.text.startswith(FUNCTION_END, at):
            return True
        head = _head(self.text, at, PARAMETER)
        if head is None:
            return False
        key = head[0]
        return bool(key) and key not in given and (properties is None or key in properties)

    # -- the whole reply (rules 1, 4 and 6) -------------------------------------------

    def next_call(self, at: int, after_call: bool) -> tuple[int, int, bool] | None:
        """The next opener from `at` (rule 1): (where it starts, its `<function=`, bare)."""
        text = self.text
        start = _skip(text, at)
        if after_call and text.startswith(FUNCTION, start):
            return start, start, True
        wrapped = text.find(OPEN, at)
        bare = bare_opener(text, at, wrapped if wrapped >= 0 else len(text))
        if bare >= 0:
            return bare, bare, True
        return None if wrapped < 0 else (wrapped, wrapped + len(OPEN), False)

    def rest_reads(self, at: int) -> bool:
        """Whether the reply from `at`, right after a call, reads (rule 4): the next
        call reads (a bare one that does not is text), and no text before it holds a
        closer."""
        if at not in self._rests:
            self._rests[at] = self._reads_from(at)
        return self._rests[at]

    def _reads_from(self, at: int) -> bool:
        text_from, after_call = at, True
        while True:
            found = self.next_call(at, after_call)
            if any(mark in self.text[text_from : found[0] if found else None] for mark in STRAY):
                return False
            if found is None:
                return True
            if self.read_call(found).end >= 0:
                return True
            if not found[2]:
                return False
            at, after_call = found[0] + 1, False  # a bare call that does not read is text

    def read_call(self, found: tuple[int, int, bool]) -> _Outcome:
        """The one reading of the call at `found` whose rest reads (rule 4)."""
        _, function_at, bare = found
        text = self.text
        body_at = _skip(text, function_at)
        if not bare and text.startswith("{", body_at):
            return self._json_call(body_at)
        best: tuple[int, _Reading] | None = None
        for reading in self.readings(body_at, bare):
            if self._merges(reading) or not self.rest_reads(reading.end):
                continue
            if best is None or _marks(reading) < best[0]:  # a tie keeps the first found
                best = (_marks(reading), reading)
        if best is None:
            return _Outcome.failed(self._why_not(body_at, bare))
        return _Outcome(_build(best[1], self.schemas), best[1].end)

    def _merges(self, reading: _Reading) -> bool:
        """Whether a value of `reading` holds a parameter left open (rule 5)."""
        properties = _properties(self.schemas, reading.name)
        given = {key for key, _ in reading.values}
        return any(
            not _json_typed(property_kind(properties, key))
            and _next_sibling(written, 0, -1, properties, given) is not None
            for key, written in reading.values
        )

    def _json_call(self, at: int) -> _Outcome:
        try:
            _, end = json.JSONDecoder().raw_decode(self.text, at)
        except (ValueError, RecursionError):
            end = -1
        close = _skip(self.text, end) if end >= 0 else -1
        if end < 0 or not self.text.startswith(CLOSE, close):
            close = self.text.find(CLOSE, at)
            if close < 0:
                return _Outcome.failed(f"the tool call was not closed with {CLOSE}")
            return _Outcome(read_json_call(self.text[at:close].strip()), close + len(CLOSE))
        return _Outcome(read_json_call(self.text[at:end]), close + len(CLOSE))

    def _why_not(self, at: int, bare: bool) -> str:
        """The problem of a call with no reading (rules 2, 3 and 5), in one line."""
        text = self.text
        head = _head(text, at, FUNCTION)
        if head is None:
            if text.startswith(FUNCTION, at):
                return "the tool call's <function=NAME> is not closed with `>`"
            return "the tool call needs <function=NAME>"
        if not head[0]:
            return "the tool call needs a name in <function=NAME>"
        if not bare and CLOSE not in text[head[1] :]:
            return f"the tool call was not closed with {CLOSE}"
        if FUNCTION_END not in text[head[1] :]:
            return f"the tool call's <function=...> is not closed with {FUNCTION_END}"
        return self._parameter_problem(head[0], head[1])

    def _parameter_problem(self, name: str, at: int) -> str:
        """Walk the parameters as written (the first closer of each) to name what is wrong."""
        text = self.text
        keys: set[str] = set()
        properties = _properties(self.schemas, name)
        while True:
            at = _skip(text, at)
            if text.startswith(FUNCTION_END, at):
                after = _skip(text, at + len(FUNCTION_END))
                if after < len(text) and not text.startswith(CLOSE, after):
                    return (
                        f"unexpected text `{_shown(text[after:])}` after {FUNCTION_END}"
                        f" in the tool call, expected {CLOSE}"
                    )
                return (
                    "the tool call's end cannot be told from its values: a value holds"
                    f" {PARAMETER_END}, {FUNCTION_END} or {CLOSE}, or text after the call"
                    " does; write that value another way"
                )
            if not text.startswith(PARAMETER, at):
                return (
                    f"unexpected text `{_shown(text[at:])}` in the tool call,"
                    " expected <parameter=NAME>"
                )
            head = _head(text, at, PARAMETER)
            if head is None:
                return "a <parameter=NAME> in the tool call is not closed with `>`"
            key, start = head
            if not key:
                return "the tool call needs a name in <parameter=NAME>"
            if key in keys:
                return f"the tool call has a duplicate parameter `{_shown(key)}`"
            keys.add(key)
            close = text.find(PARAMETER_END, start)
            sibling = _next_sibling(text, start, close, properties, keys)
            if close < 0 or sibling is not None:
                return (
                    f"the tool call's parameter `{_shown(key)}` is not closed with {PARAMETER_END}"
                )
            at = close + len(PARAMETER_END)


def _marks(reading: _Reading) -> int:
    """How many of the syntax's markers the values of `reading` hold (rule 4)."""
    return sum(written.count(mark) for _, written in reading.values for mark in MARKS)


def _next_sibling(
    text: str, start: int, close: int, properties: Mapping[str, Any] | None, given: set[str]
) -> str | None:
    """A `<parameter=K>` in `text[start:close]` (to the end where `close` < 0) that
    opens a parameter the call does not otherwise give (rule 5), or None."""
    stop = close if close >= 0 else len(text)
    at = start
    while (found := text.find(PARAMETER, at, stop)) >= 0:
        head = _head(text, found, PARAMETER)
        at = found + 1
        if head is None or not head[0] or head[0] in given:
            continue
        if properties is None or head[0] in properties:
            return head[0]
    return None


@dataclass(frozen=True, slots=True)
class _Outcome:
    call: Call
    end: int  # where the call's text ends; -1: it runs to the reply's end (rule 6)

    @classmethod
    def failed(cls, problem: str) -> _Outcome:
        return cls(BadToolCall(problem), -1)


def _build(reading: _Reading, schemas: Schemas | None) -> Call:
    """The reading as a call, each value typed (rule 3)."""
    properties = _properties(schemas, reading.name)
    arguments: dict[str, Any] = {}
    for key, written in reading.values:
        kind = property_kind(properties, key)
        value = written.removeprefix("\n").removesuffix("\n")
        try:
            arguments[key] = typed_value(value, kind, key)
        except ValueError as exc:
            return BadToolCall(str(exc))
    return ToolCall(
        name=reading.name,
        arguments=json.dumps(arguments, ensure_ascii=False, separators=(",", ":")),
    )


def _failed_end(reader: _Reader, found: tuple[int, int, bool]) -> int:
    """Where a call that cannot be read ends (rule 6): at the first `</tool_call>`
    (`</function>`, bare) after which the rest of the reply reads; else -1, the end."""
    closer = FUNCTION_END if found[2] else CLOSE
    at = found[1]
    try:
        while (close := reader.text.find(closer, at)) >= 0:
            at = close + len(closer)
            if reader.rest_reads(at):
                return at
    except _ProblemError:
        pass
    return -1


def bare_opener(text: str, at: int, before: int) -> int:
    """The first `<function=` from `at` (and before `before`) that starts a line (only
    spaces or tabs before it on its line), or -1."""
    while (found := text.find(FUNCTION, at, before)) >= 0:
        line = text.rfind("\n", 0, found) + 1
        if not text[line:found].strip(" \t"):
            return found
        at = found + 1
    return -1


def read_xml_reply(text: str, schemas: Schemas | None) -> XmlReply:
    """The content and calls of a reply in the xml syntax (the rules above)."""
    reader = _Reader(text, schemas)
    parts: list[str] = []
    calls: list[Call] = []
    at, search, after_call = 0, 0, False
    while (found := reader.next_call(search, after_call)) is not None:
        try:
            outcome = reader.read_call(found)
        except _ProblemError as exc:
            outcome = _Outcome.failed(str(exc))
        if found[2] and outcome.end < 0:
            search, after_call = found[0] + 1, False  # a bare call that does not read is text
            continue
        parts.append(text[at : found[0]])
        calls.append(outcome.call)
        end = outcome.end if outcome.end >= 0 else _failed_end(reader, found)
        if end < 0:
            at = len(text)
            break
        at = search = end
        after_call = True
    parts.append(text[at:])
    return XmlReply(content="".join(parts), calls=tuple(calls))
