r"""Prompts rendered by the model's own chat template, split so that text never becomes a marker.

Pure; no I/O (the template runs in `core.model.template_sandbox`, with the clock it is
handed). The template writes the scaffolding: turn markers, role names, the tools
block, the generation prompt, every wrapper such as `<tool_response>`. What it
is given in place of each message's text is a *slot*: a sentinel no template
spells, so the rendered text splits there into scaffolding (tokenized with
special-token parsing) and the messages' own texts (tokenized without it). The
rules, in the order they apply:

1. **Slots.** Each text (the system text, the owner's words, a tool result, the
   memory block) is handed to the template as `\x1f` + start sentinel + a probe
   (`"`, `\`, a newline) + end sentinel + `\x1f`. Where the slot comes out, what
   the template did to it shows: `\x1f` kept or stripped on either side (the
   template trims: the text is trimmed the same way), the probe as written or
   JSON-escaped (the template wrote it through `tojson`: the text is escaped the
   same way). Any other change refuses the template: loopd cannot write the text
   as the template would.
2. **Every slot accounted for.** A text whose slot the template never writes
   (a role it drops) refuses the template unless a fallback below applies. A
   slot written twice is written twice (Mistral repeats the system text before
   the last user turn); a slot is text wherever it appears.
3. **Fallbacks**, found by probing the template once, when it is loaded:
   no system role (it raises, or drops the text): the system text opens the first
   user message, a blank line after it. No tool role: a tool result is a user
   message opening `[result of NAME]`, and consecutive user messages are one,
   a blank line between (templates that insist on alternating roles).
4. **The model's own replies are replayed as generated.** A reply is handed to
   the template and cut out: the prompt is built in *stretches*, stretch k being
   the template's rendering of the conversation before reply k (with the
   generation prompt), from just after reply k-1. So what precedes a reply is
   exactly the generation prompt the model wrote it after, the reply is its token
   ids, and every prompt extends the one before it token for token. Where a
   template rewrites history (Qwen3 and Qwen3.5 drop earlier turns' reasoning,
   Mistral moves the tools block and the system text to the last user turn, a
   date from `strftime_now` moves on) loopd keeps what the model was shown: the
   rendering differs from the template's own by exactly those rewrites
   (tests/loopd/test_template_prompts.py and test_long_sessions.py show each).
   A reply with no calls is handed over as a bare sentinel, cut out where it
   comes out.
5. **A reply that made calls is handed over as calls**, in the structured form
   the template reads (`tool_calls`, the content in the shape the probe found:
   None, "" or absent), where the template has a tool role and writes a call
   syntax: templates that count roles (Mistral's) see a call, not a second
   assistant turn, and a result follows the call it answers. Each call is a
   stand-in: its name a sentinel, its arguments empty, its id the call's own
   (`core.model.call_ids`); a result carries the id of the call it answers. The
   rendered call is never part of the prompt (the reply's own ids are): it only
   shows where the reply ends, which is the longest stretch from the call's
   opener that reads back as exactly the stand-in calls (`parse_reply` in the
   template's syntax, no other text), never past the next message's text. A
   stretch the template cannot render so, or whose end cannot be found so (the
   DeepSeek-R1-Distill-Llama template writes a later call with no opener), is
   rendered with the replies as text (rule 4) instead.
6. **Tools in a system message.** A template that writes no tools block from
   `tools` but does from the system message's `tools` field (Phi-4-mini's own
   template, as Microsoft documents it) gets them there: as JSON text of the
   functions (`[{"name": ..., "description": ..., "parameters": ...}]`), or as
   that list where the text renders nothing.
7. **Names.** A tool result's `name` is handed to the template only when it is a
   plain identifier (the template may write it as scaffolding); otherwise `tool`.
   The text of a tool name the model wrote goes in a slot, never in scaffolding.
8. **BOS.** Where the vocabulary asks for a BOS token and the template does not
   write one, the prompt starts with it (as Hugging Face's tokenizer adds it).

The facts the probe finds (`TemplateFacts`): the roles above, whether the
template writes a tools block, the generation prompt's tail, whether it opens a
reasoning block (`<think>` and its kin) that the model is to close, the marker
that closes a reply, and the syntax of a tool call as the template writes one
(tried with the content None, "" and absent, and the arguments an object or JSON
text, in that order: the DeepSeek-R1 distills write a call only when the content
is None).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from boxmaker.core.model.call_ids import has_form
from boxmaker.core.model.chat_format import ReplyCall, Role, Segment, Text, Tokens, Turn
from boxmaker.core.model.known_markers import REASONING_PAIRS
from boxmaker.core.model.template_sandbox import TemplateError, TemplateRenderer
from boxmaker.core.model.tool_calls import CallSyntax, ToolCall, call_openers, parse_reply

FENCE = "\x1f"
PROBE = '"\\\n'
PROBE_JSON = json.dumps(PROBE)[1:-1]
FENCE_JSON = json.dumps(FENCE)[1:-1]
_NONCES = ("qz7kbx", "vq9jxw", "kx4qzv", "zjq8wx")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")


# The shapes of a call's content a template may test, in the order they are tried (rule 5)
CONTENT_SHAPES: dict[str, dict[str, Any]] = {"none": {"content": None}, "empty": {"content": ""}}
CONTENT_SHAPES["absent"] = {}
SAMPLE_ID = "a1b2c3d4e"

SAMPLE_CALL: dict[str, Any] = {
    "name": "call_tool",
    "arguments": {"name": "read_file", "arguments": {"path": "/home/owner/notes/todo.md"}},
}


class TemplateUnusableError(TemplateError):
    """The template renders, but not so that loopd can follow it (rules 1 to 4): a
    hand-written format may stand in (the template's own failures are TemplateError)."""


@dataclass(frozen=True, slots=True)
class TemplateFacts:
    system_role: bool
    tool_role: bool
    renders_tools: bool
    generation_tail: str  # the scaffolding between the last text and where the model writes
    reasoning: tuple[str, str] | None  # the open and close markers the template knows
    opens_reasoning: bool  # the generation prompt leaves a reasoning block open
    close_reply: str  # the scaffolding that follows a reply, up to the next text
    syntax: CallSyntax | None  # as the template writes a tool call; None: it writes none
    call_arguments_as_text: bool  # the template wants a call's arguments as JSON text
    call_content: str = "none"  # the shape of a call's content (CONTENT_SHAPES) it wants
    structured: bool = False  # a reply that made calls is handed over as calls (rule 5)
    tools_in_system: str | None = None  # "text" or "list": the tools go there (rule 6)


@dataclass
class Stretches:
    """A session's stretches rendered so far (rule 4): reused while the log only grows."""

    ends: list[int] = field(default_factory=list)  # the turn count each stretch was made for
    segments: list[list[Segment]] = field(default_factory=list)


class TemplatePrompt:
    """A model's chat template as loopd's prompt renderer (the rules above)."""

    def __init__(
        self,
        template: TemplateRenderer,
        *,
        bos: str,
        eos: str,
        add_bos: bool,
        tools: Sequence[Mapping[str, Any]],
        now: Callable[[], datetime],
        thinking: bool = True,
        schemas: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.template = template
        self._bos, self._eos, self._add_bos = bos, eos, add_bos
        self.tools = tools
        self.now = now
        self._thinking = thinking
        self._schemas = schemas
        nonce = next((n for n in _NONCES if n not in template.source), None)
        if nonce is None:
            raise TemplateUnusableError("the template spells every sentinel loopd could use")
        self._nonce = nonce
        self._slot = re.compile(
            rf"(?P<lead>{re.escape(FENCE)}|{re.escape(FENCE_JSON)})?"
            rf"bx{nonce}(?P<n>\d+)a(?P<probe>.*?)bx{nonce}(?P=n)z"
            rf"(?P<trail>{re.escape(FENCE)}|{re.escape(FENCE_JSON)})?",
            re.DOTALL,
        )
        # a reply's sentinel, and (with its number) each of its stand-in calls' names
        self._reply = re.compile(rf"bx{nonce}(\d+)m(?:(\d+)c)?")
        self._system_tools: str | list[Any] | None = None
        self._form: TemplateFacts | None = None  # how calls are handed over, once probed
        self.facts = self._probe()

    # -- rendering --------------------------------------------------------------

    def render(
        self, system: str, turns: Sequence[Turn], cache: Stretches | None = None
    ) -> list[Segment]:
        """Every segment of the prompt for `system` and `turns`, ending where the model
        writes next (rules 1 to 6); TemplateError when the template cannot be followed."""
        cache = cache if cache is not None else Stretches()
        replies = [i for i, turn in enumerate(turns) if turn.role is Role.MODEL]
        ends = [*replies, len(turns)] if turns and turns[-1].role is not Role.MODEL else replies
        segments: list[Segment] = []
        for k, end in enumerate(ends):
            if k < len(cache.ends) and cache.ends[k] == end:
                stretch = cache.segments[k]
            else:
                del cache.ends[k:], cache.segments[k:]
                stretch = self._stretch(system, turns, end, replies[k - 1] if k else None)
                cache.ends.append(end)
                cache.segments.append(stretch)
            segments += stretch
            if end < len(turns):
                reply = turns[end]
                segments.append(Tokens(reply.ids) if reply.ids is not None else Text(reply.text))
        if self._add_bos and self._bos and not _starts_with(segments, self._bos):
            segments.insert(0, Text(self._bos, special=True))
        return segments

    def text(self, system: str, turns: Sequence[Turn]) -> str:
        """The prompt as text (model turns as their text): for checks against the template."""
        parts = []
        for segment in self.render(system, turns):
            assert isinstance(segment, Text), "text() renders turns without ids"
            parts.append(segment.text)
        return "".join(parts)

    def _stretch(
        self, system: str, turns: Sequence[Turn], end: int, after: int | None
    ) -> list[Segment]:
        """Stretch `end` (rule 4), the replies that made calls handed over as calls
        where the template can be followed so, else as text (rule 5)."""
        structured = self.facts.structured and any(t.calls for t in turns[:end])
        try:
            return self._stretch_as(system, turns, end, after, structured=structured)
        except TemplateError as exc:
            if not structured:
                raise
            try:
                return self._stretch_as(system, turns, end, after, structured=False)
            except TemplateError:
                raise exc from None

    def _stretch_as(
        self, system: str, turns: Sequence[Turn], end: int, after: int | None, *, structured: bool
    ) -> list[Segment]:
        messages, slots = self._messages(
            system,
            turns[:end],
            system_role=self.facts.system_role,
            tool_role=self.facts.tool_role,
            structured=structured,
        )
        rendered = self._render(messages, tools=self.tools, generation=True)
        if after is not None:
            calls = len(turns[after].calls) if structured else 0
            rendered = rendered[self._reply_end(rendered, after, calls, self.facts.syntax) :]
        if self._reply.search(rendered):
            raise TemplateUnusableError("the template wrote a reply where loopd cannot replay it")
        return self._split(rendered, slots)

    def _reply_end(self, rendered: str, index: int, calls: int, syntax: CallSyntax | None) -> int:
        """Where reply `index` ends in `rendered`: after its sentinel, or (handed over as
        `calls` stand-in calls) after the longest stretch that reads back as them."""
        number = "0" if calls else None
        marks = [
            m
            for m in self._reply.finditer(rendered)
            if int(m.group(1)) == index and m.group(2) == number
        ]
        if len(marks) != 1:
            raise TemplateUnusableError(
                f"the template wrote an earlier reply {len(marks)} times, not once"
            )
        if not calls:
            return marks[0].end()
        assert syntax is not None  # calls are handed over only where the template writes them
        at = marks[0].start()
        start = max(rendered.rfind(opener, 0, at) for opener in call_openers(syntax))
        after = self._slot.search(rendered, at)
        limit = after.start() if after is not None else len(rendered)
        names = [self._call_name(index, n) for n in range(calls)]
        if start >= 0:
            for end in range(limit, at, -1):
                if _reads_as(rendered[start:end], syntax, names):
                    return end
        raise TemplateUnusableError("the template wrote an earlier call where loopd cannot cut it")

    def _split(self, rendered: str, slots: Mapping[int, str]) -> list[Segment]:
        segments: list[Segment] = []
        at = 0
        for match in self._slot.finditer(rendered):
            if match.start() > at:
                segments.append(Text(rendered[at : match.start()], special=True))
            text = slots.get(int(match.group("n")))
            if text is None:
                raise TemplateUnusableError("the template wrote a slot of no message")
            segments.append(Text(_transformed(text, match)))
            at = match.end()
        if at < len(rendered):
            segments.append(Text(rendered[at:], special=True))
        scaffolding = "".join(s.text for s in segments if isinstance(s, Text) and s.special)
        if self._nonce in self._reply.sub("", scaffolding):
            raise TemplateUnusableError(
                "the template changes message text in a way loopd cannot follow"
            )
        return segments

    def _render(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None,
        generation: bool,
    ) -> str:
        return self.template.render(
            messages,
            tools=tools,
            add_generation_prompt=generation,
            bos_token=self._bos,
            eos_token=self._eos,
            now=self.now(),
            extra={"enable_thinking": self._thinking},
        )

    # -- messages ----------------------------------------------------------------

    def _fenced(self, number: int) -> str:
        return f"{FENCE}bx{self._nonce}{number}a{PROBE}bx{self._nonce}{number}z{FENCE}"

    def _call_name(self, index: int, number: int) -> str:
        return f"bx{self._nonce}{index}m{number}c"

    def _stand_in(self, index: int, calls: Sequence[ReplyCall]) -> dict[str, Any]:
        """Reply `index`'s calls as the template reads them (rule 5): stand-ins."""
        form = self._form
        assert form is not None
        empty: Any = "{}" if form.call_arguments_as_text else {}
        return {
            "role": "assistant",
            **CONTENT_SHAPES[form.call_content],
            "tool_calls": [
                {
                    "type": "function",
                    "id": call.id if has_form(call.id) else f"{index:05d}{number:04d}",
                    "function": {"name": self._call_name(index, number), "arguments": empty},
                }
                for number, call in enumerate(calls)
            ],
        }

    def system_tools(self) -> str | list[Any] | None:
        """What the system message's `tools` field holds (rule 6); None: no such field."""
        return self._system_tools

    def _tools_in_system(self, form: str) -> str | list[Any]:
        functions = [t.get("function", t) for t in self.tools]
        return json.dumps(functions, ensure_ascii=False) if form == "text" else functions

    def _messages(
        self,
        system: str,
        turns: Sequence[Turn],
        *,
        system_role: bool,
        tool_role: bool,
        structured: bool = False,
    ) -> tuple[list[dict[str, Any]], dict[int, str]]:
        """The template's messages for the conversation, every text a slot (rules 1, 3, 5,
        6, 7)."""
        slots: dict[int, str] = {}
        messages: list[dict[str, Any]] = []

        def slot(text: str) -> str:
            number = len(slots)
            slots[number] = text
            return self._fenced(number)

        pending_system = ""
        if system_role:
            messages.append({"role": "system", "content": slot(system)})
            if self._system_tools is not None:
                messages[0]["tools"] = self._system_tools
        else:
            pending_system = slot(system)
        results = 0
        for index, turn in enumerate(turns):
            if turn.role is Role.MODEL:
                if structured and turn.calls:
                    messages.append(self._stand_in(index, turn.calls))
                else:
                    messages.append({"role": "assistant", "content": f"bx{self._nonce}{index}m"})
                continue
            if turn.role is Role.TOOL and tool_role:
                results += 1
                name = turn.name if turn.name and _IDENTIFIER.fullmatch(turn.name) else "tool"
                answers = turn.call_id if has_form(turn.call_id) else f"{results:09d}"
                messages.append(
                    {
                        "role": "tool",
                        "content": slot(turn.text),
                        "name": name,
                        "tool_call_id": answers,
                    }
                )
                continue
            text = turn.text
            if turn.role is Role.TOOL:
                text = f"[result of {turn.name or 'a tool'}]\n{turn.text}"
            content = slot(text)
            if pending_system:
                content = f"{pending_system}\n\n{content}"
                pending_system = ""
            last = messages[-1] if messages else None
            if not tool_role and last is not None and last["role"] == "user":
                last["content"] = f"{last['content']}\n\n{content}"
            else:
                messages.append({"role": "user", "content": content})
        return messages, slots

    # -- probing -----------------------------------------------------------------

    def _probe(self) -> TemplateFacts:
        """What the template does (the facts); TemplateError when it cannot be used."""
        sample = [Turn(Role.USER, "u")]
        system_role = self._works(sample, system_role=True, tool_role=True)
        if not system_role:  # the fallback must work, or its failure is the answer
            self._check(sample, system_role=False, tool_role=True, slot=None)
        with_tool = [
            Turn(Role.USER, "u"),
            Turn(Role.MODEL, "m"),
            Turn(Role.TOOL, "t", name="clock"),
        ]
        # the system text may be written with the last user turn only (Mistral Nemo): here
        # only the tool result's own slot must come out
        tool_role = self._works(with_tool, system_role=system_role, tool_role=True, slot=-1)
        if not tool_role:
            self._check(with_tool, system_role=system_role, tool_role=False, slot=-1)
        messages, slots = self._messages("s", sample, system_role=system_role, tool_role=tool_role)
        plain = self._render(messages, tools=None, generation=True)
        with_tools = self._render(messages, tools=self.tools, generation=True)
        tools_in_system = None
        if plain == with_tools and system_role and self.tools:
            tools_in_system = self._find_tools_in_system(sample, plain)
            if tools_in_system is not None:
                messages, slots = self._messages(
                    "s", sample, system_role=system_role, tool_role=tool_role
                )
                with_tools = self._render(messages, tools=self.tools, generation=True)
        tail = self._split(with_tools, slots)[-1]
        generation_tail = tail.text if isinstance(tail, Text) and tail.special else ""
        reasoning = next(
            (pair for pair in REASONING_PAIRS if pair[1] in self.template.source), None
        )
        opens = False
        if reasoning is not None and reasoning[0] in generation_tail:
            opens = reasoning[1] not in generation_tail.rsplit(reasoning[0], 1)[1]
        forms = list(self._call_forms(system_role, tool_role))
        syntax, as_text, content = forms[0] if forms else (None, False, "none")
        facts = TemplateFacts(
            system_role=system_role,
            tool_role=tool_role,
            renders_tools=plain != with_tools,
            generation_tail=generation_tail,
            reasoning=reasoning,
            opens_reasoning=opens,
            close_reply=self._close_reply(system_role, tool_role),
            syntax=syntax,
            call_arguments_as_text=as_text,
            call_content=content,
            tools_in_system=tools_in_system,
        )
        if not tool_role:
            return facts
        for found, as_text, content in forms:  # the first form a call can be handed over in
            form = replace(
                facts, syntax=found, call_arguments_as_text=as_text, call_content=content
            )
            self._form = form
            if self._works_structured(form):
                return replace(form, structured=True)
        self._form = None
        return facts

    def _find_tools_in_system(self, sample: list[Turn], plain: str) -> str | None:
        """Rule 6: the form of the system message's `tools` field that the template
        writes ("text", then "list"), kept for rendering; None where neither is written."""
        for form in ("text", "list"):
            self._system_tools = self._tools_in_system(form)
            messages, _ = self._messages("s", sample, system_role=True, tool_role=True)
            try:
                if self._render(messages, tools=self.tools, generation=True) != plain:
                    return form
            except TemplateError:
                pass
        self._system_tools = None
        return None

    def _works_structured(self, facts: TemplateFacts) -> bool:
        """Whether a reply that made a call can be handed over as one (rule 5): a call,
        its result, and the stretch after the call cut where the call ends."""
        turns = [
            Turn(Role.USER, "u"),
            Turn(Role.MODEL, "m", calls=(ReplyCall("clock", "{}", SAMPLE_ID),)),
            Turn(Role.TOOL, "t", name="clock", call_id=SAMPLE_ID),
        ]
        messages, slots = self._messages(
            "s",
            turns,
            system_role=facts.system_role,
            tool_role=facts.tool_role,
            structured=True,
        )
        try:
            rendered = self._render(messages, tools=self.tools, generation=True)
            after = rendered[self._reply_end(rendered, 1, 1, facts.syntax) :]
            if self._reply.search(after):
                return False
            self._split(after, slots)
        except TemplateError:
            return False
        return True

    def _works(
        self, turns: list[Turn], *, system_role: bool, tool_role: bool, slot: int | None = None
    ) -> bool:
        try:
            self._check(turns, system_role=system_role, tool_role=tool_role, slot=slot)
        except TemplateError:
            return False
        return True

    def _check(
        self, turns: list[Turn], *, system_role: bool, tool_role: bool, slot: int | None
    ) -> None:
        """Render `turns` with and without the generation prompt: TemplateError unless every
        slot (only the one numbered `slot`, -1 the last, where given) comes out and splits."""
        messages, slots = self._messages("s", turns, system_role=system_role, tool_role=tool_role)
        wanted = set(slots) if slot is None else {sorted(slots)[slot]}
        for generation in (True, False):
            rendered = self._render(messages, tools=self.tools, generation=generation)
            found = {int(m.group("n")) for m in self._slot.finditer(rendered)}
            missing = sorted(wanted - found)
            if missing:
                raise TemplateUnusableError(
                    f"the template leaves out message text (slot {missing[0]})"
                )
            self._split(rendered, slots)

    def _close_reply(self, system_role: bool, tool_role: bool) -> str:
        turns = [Turn(Role.USER, "u"), Turn(Role.MODEL, "m"), Turn(Role.USER, "v")]
        messages, slots = self._messages("s", turns, system_role=system_role, tool_role=tool_role)
        rendered = self._render(messages, tools=self.tools, generation=True)
        mark = self._reply.search(rendered)
        if mark is None:
            raise TemplateUnusableError("the template leaves out the model's reply")
        after = self._split(rendered[mark.end() :], slots)
        first = after[0] if after else None
        return first.text if isinstance(first, Text) and first.special else ""

    def _read_back(self, before: str, after: str) -> CallSyntax | None:
        return _read_back_in(before, after, self._schemas)

    def _call_forms(
        self, system_role: bool, tool_role: bool
    ) -> Iterator[tuple[CallSyntax, bool, str]]:
        """Each way the template writes a call that reads back as the call, in the order
        tried: the syntax, whether the arguments were JSON text, and the shape of the
        content beside the call (CONTENT_SHAPES). None: the template writes no call."""
        base, _ = self._messages(
            "s", [Turn(Role.USER, "u")], system_role=system_role, tool_role=tool_role
        )
        try:
            without = self._render(
                [*base, {"role": "assistant", "content": ""}], tools=self.tools, generation=False
            )
        except TemplateError:
            without = self._render(base, tools=self.tools, generation=False)
        for shape, content in CONTENT_SHAPES.items():
            for as_text in (False, True):
                arguments: Any = SAMPLE_CALL["arguments"]
                if as_text:
                    arguments = json.dumps(arguments, ensure_ascii=False)
                call = {
                    "type": "function",
                    "id": SAMPLE_ID,
                    "function": {"name": SAMPLE_CALL["name"], "arguments": arguments},
                }
                try:
                    written = self._render(
                        [*base, {"role": "assistant", **content, "tool_calls": [call]}],
                        tools=self.tools,
                        generation=False,
                    )
                except TemplateError:
                    continue
                found = self._read_back(without, written)
                if found is not None:
                    yield found, as_text, shape


WIDEN = 24  # characters a diff's edges may have cut from a call's markers


def _read_back_in(
    before: str, after: str, schemas: Mapping[str, Mapping[str, Any]] | None
) -> CallSyntax | None:
    """The syntax that reads the call `after` adds to `before` back as SAMPLE_CALL. The
    inserted stretch a diff finds may have lost characters its edges share with what
    surrounds it (`<` of `<tool_call>`), so it is widened a character at a time."""
    start, end = _added(before, after)
    for widen in range(WIDEN + 1):
        text = after[max(0, start - widen) : min(len(after), end + widen)]
        if not text.strip():
            continue
        for syntax in CallSyntax:
            reply = parse_reply(text, syntax, schemas)
            if len(reply.calls) == 1 and _same_call(reply.calls[0], SAMPLE_CALL):
                return syntax
    return None


def _added(before: str, after: str) -> tuple[int, int]:
    """Where `after` differs from `before`: the start and end of its inserted stretch."""
    start = 0
    while start < min(len(before), len(after)) and before[start] == after[start]:
        start += 1
    end = 0
    while (
        end < min(len(before), len(after)) - start
        and before[len(before) - 1 - end] == after[len(after) - 1 - end]
    ):
        end += 1
    return start, len(after) - end


def _reads_as(text: str, syntax: CallSyntax, names: Sequence[str]) -> bool:
    """Whether `text` reads back as calls named `names`, in order, and nothing else."""
    reply = parse_reply(text, syntax)
    read = [c.name for c in reply.calls if isinstance(c, ToolCall)]
    return not reply.content and len(reply.calls) == len(names) and read == list(names)


def _same_call(call: object, expected: Mapping[str, Any]) -> bool:
    if not isinstance(call, ToolCall):
        return False
    same: bool = (
        call.name == expected["name"] and json.loads(call.arguments) == expected["arguments"]
    )
    return same


def _transformed(text: str, match: re.Match[str]) -> str:
    """`text` as the template wrote its slot (rule 1): trimmed and escaped as the probe was."""
    probe = match.group("probe")
    if probe == PROBE:
        escape = False
    elif probe == PROBE_JSON:
        escape = True
    else:
        raise TemplateUnusableError(
            "the template changes message text in a way loopd cannot follow"
        )
    if match.group("lead") is None:
        text = text.lstrip()
    if match.group("trail") is None:
        text = text.rstrip()
    return json.dumps(text, ensure_ascii=False)[1:-1] if escape else text


def _starts_with(segments: Sequence[Segment], bos: str) -> bool:
    first = segments[0] if segments else None
    return isinstance(first, Text) and first.special and first.text.startswith(bos)
