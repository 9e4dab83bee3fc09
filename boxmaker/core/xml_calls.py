"""Reading the xml syntax's tool calls out of a whole reply, where every value ends. Pure.

Qwen3-Coder and Qwen3.5 write a call as `<tool_call>`, `<function=N>`, any number
of `<parameter=K>` + value + `</parameter>`, `</function>`, `</tool_call>`, each
on its own line. Their templates write a value verbatim, so a value may hold any of
those markers as text (a model writing an XML or Jinja file, or docs about these
very tags) and the model cannot escape them. A marker inside a value is told from
the real one by what follows it and by the tool's schema. The rules, in order:

1. **Where a call opens.** At `<tool_call>`, anywhere. Written bare, without it,
   at `<function=` where a `<tool_call>` could stand: the reply's first text, or
   right after a call (whitespace between). A bare call ends at its `</function>`.
   Elsewhere `<function=` is text (a reply that quotes a call is not one).
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
   row is read so). No reading at all: the call is a problem, never a guess
   (nor is a tie, which rule 5 leaves no way to write).
5. **Unclosed is a problem, never a merge.** A reading in which a value holds
   `<parameter=K>`, for a K that is one of the tool's parameters (any K where the
   schema does not know the tool), is none where the call does not otherwise give
   K (a parameter left open before its sibling) or where `</parameter>` comes
   right before it (a parameter given twice): the call is a problem. So is a call
   that never closes, and text out of place.
6. **Never run truncated.** A call that cannot be read is a `BadToolCall` the
   model reads, and the rest of the reply from its opener is that one call: no
   part of it runs and none of it is content. Reading takes at most `MAX_STEPS`
   steps; a reply that needs more is a problem too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from boxmaker.core.call_syntaxes import (
    BadToolCall,
    Call,
    Schemas,
    ToolCall,
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


class _ProblemError(Exception):
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


def _kind(properties: Mapping[str, Any] | None, key: str) -> str | None:
    prop = properties.get(key) if properties is not None else None
    kind = prop.get("type") if isinstance(prop, Mapping) else None
    return kind if isinstance(kind, str) else None


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
            if bare:
                yield given, end
                return
            close = _skip(text, end)
            if text.startswith(CLOSE, close):
                yield given, close + len(CLOSE)
            return
        head = _head(text, at, PARAMETER)
        if head is None:
            return
        key, start = head
        keys = {k for k, _ in given}
        if not key or key in keys:
            return
        if _kind(properties, key) in _JSON_TYPED:
            ends = self._json_end(start)
            if ends is not None:
                value_end, after = ends
                yield from self._parameters(
                    after, name, properties, (*given, (key, text[start:value_end])), bare
                )
                return
        search = start
        while (close := text.find(PARAMETER_END, search)) >= 0:
            self.budget.step()
            search = close + 1
            after = close + len(PARAMETER_END)
            if not self._ends_value(after, properties, keys | {key}):
                continue
            yield from self._parameters(
                after, name, properties, (*given, (key, text[start:close])), bare
            )

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
        """The next call's opener from `at`: (opener, its `<function=`, bare)."""
        text = self.text
        start = _skip(text, at)
        if text.startswith(FUNCTION, start) and (at == 0 or after_call):
            return start, start, True
        opener = text.find(OPEN, at)
        if opener < 0:
            return None
        return opener, opener + len(OPEN), False

    def rest_reads(self, at: int) -> bool:
        """Whether the reply from `at`, right after a call, reads cleanly (rule 4)."""
        found = self.next_call(at, after_call=True)
        between = self.text[at : found[0] if found else len(self.text)]
        if any(mark in between for mark in STRAY):
            return False
        if found is None:
            return True
        if at not in self._rests:
            self._rests[at] = self.read_call(found).end >= 0
        return self._rests[at]

    def read_call(self, found: tuple[int, int, bool]) -> _Outcome:
        """The one reading of the call at `found` whose rest reads (rule 4)."""
        _, function_at, bare = found
        text = self.text
        body_at = _skip(text, function_at)
        if not bare and text.startswith("{", body_at):
            return self._json_call(body_at)
        best: list[tuple[int, _Reading]] = []
        for reading in self.readings(body_at, bare):
            if self._merges(reading) or not self.rest_reads(reading.end):
                continue
            best = [*best, (_marks(reading), reading)]
            low = min(score for score, _ in best)
            best = [(score, r) for score, r in best if score == low]
        if not best:
            return _Outcome.failed(self._why_not(body_at, bare))
        if len(best) > 1:
            return _Outcome.failed(
                "the tool call can be read more than one way: a value holds"
                f" {PARAMETER_END} or {FUNCTION_END} followed by more of the call;"
                " write that value another way"
            )
        chosen = best[0][1]
        return _Outcome(_build(chosen, self.schemas), chosen.end)

    def _merges(self, reading: _Reading) -> bool:
        """Whether a value of `reading` holds a parameter left open, or one closed and
        given again (rule 5)."""
        properties = _properties(self.schemas, reading.name)
        given = {key for key, _ in reading.values}
        return any(
            _kind(properties, key) not in _JSON_TYPED
            and (
                _next_sibling(written, 0, -1, properties, given) is not None
                or _closes_then_opens(written, properties)
            )
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


def _closes_then_opens(written: str, properties: Mapping[str, Any] | None) -> bool:
    """Whether `written` holds `</parameter>` then, after whitespace, `<parameter=K>` for
    a parameter K of the tool (any K where the schema does not know it): a repeated
    parameter or a sibling, never a value's text (rule 5)."""
    at = 0
    while (close := written.find(PARAMETER_END, at)) >= 0:
        at = close + 1
        head = _head(written, _skip(written, close + len(PARAMETER_END)), PARAMETER)
        if head is not None and head[0] and (properties is None or head[0] in properties):
            return True
    return False


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
        kind = _kind(properties, key)
        value = written.removeprefix("\n").removesuffix("\n")
        try:
            arguments[key] = typed_value(value, kind, key)
        except ValueError as exc:
            return BadToolCall(str(exc))
    return ToolCall(
        name=reading.name,
        arguments=json.dumps(arguments, ensure_ascii=False, separators=(",", ":")),
    )


def read_xml_reply(text: str, schemas: Schemas | None) -> XmlReply:
    """The content and calls of a reply in the xml syntax (the rules above)."""
    reader = _Reader(text, schemas)
    parts: list[str] = []
    calls: list[Call] = []
    at, after_call = 0, False
    while (found := reader.next_call(at, after_call)) is not None:
        parts.append(text[at : found[0]])
        try:
            outcome = reader.read_call(found)
        except _ProblemError as exc:
            outcome = _Outcome.failed(str(exc))
        calls.append(outcome.call)
        if outcome.end < 0:
            at = len(text)
            break
        at, after_call = outcome.end, True
    parts.append(text[at:])
    return XmlReply(content="".join(parts), calls=tuple(calls))
