r"""Prompts rendered by the model's own chat template, split so that text never becomes a marker.

Pure; no I/O (the template runs in `core.template_sandbox`, with the clock it is
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
   the template as a bare sentinel and cut out: the prompt is built in
   *stretches*, stretch k being the template's rendering of the conversation
   before reply k (with the generation prompt), from just after reply k-1. So
   what precedes a reply is exactly the generation prompt the model wrote it
   after, the reply is its token ids, and every prompt extends the one before it
   token for token. Where a template rewrites history (Qwen3 and Qwen3.5 drop
   earlier turns' reasoning, Mistral moves the tools block and the system text to
   the last user turn, a date from `strftime_now` moves on) loopd keeps what the
   model was shown: the rendering differs from the template's own by exactly
   those rewrites (tests/loopd/test_template_prompts.py shows each).
5. **Names.** A tool result's `name` is handed to the template only when it is a
   plain identifier (the template may write it as scaffolding); otherwise `tool`.
   The text of a tool name the model wrote goes in a slot, never in scaffolding.
6. **BOS.** Where the vocabulary asks for a BOS token and the template does not
   write one, the prompt starts with it (as Hugging Face's tokenizer adds it).

The facts the probe finds (`TemplateFacts`): the roles above, whether the
template writes a tools block, the generation prompt's tail, whether it opens a
reasoning block (`<think>` and its kin) that the model is to close, the marker
that closes a reply, and the syntax of a tool call as the template writes one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from boxmaker.core.chat_format import Role, Segment, Text, Tokens, Turn
from boxmaker.core.template_sandbox import ChatTemplate, TemplateError
from boxmaker.core.tool_calls import CallSyntax, ToolCall, parse_reply

FENCE = "\x1f"
PROBE = '"\\\n'
PROBE_JSON = json.dumps(PROBE)[1:-1]
FENCE_JSON = json.dumps(FENCE)[1:-1]
_NONCES = ("qz7kbx", "vq9jxw", "kx4qzv", "zjq8wx")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")

# Reasoning markers models are known to write, open and close (Qwen3, QwQ,
# DeepSeek-R1, Qwen3.5; Gemma 4's thought channel)
REASONING_MARKERS = (("<think>", "</think>"), ("<|channel>", "<channel|>"))

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


@dataclass
class Stretches:
    """A session's stretches rendered so far (rule 4): reused while the log only grows."""

    ends: list[int] = field(default_factory=list)  # the turn count each stretch was made for
    segments: list[list[Segment]] = field(default_factory=list)


class TemplatePrompt:
    """A model's chat template as loopd's prompt renderer (the rules above)."""

    def __init__(
        self,
        template: ChatTemplate,
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
        self._reply = re.compile(rf"bx{nonce}(\d+)m")
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
        messages, slots = self._messages(
            system, turns[:end], system_role=self.facts.system_role, tool_role=self.facts.tool_role
        )
        rendered = self._render(messages, tools=self.tools, generation=True)
        if after is not None:
            marks = [m for m in self._reply.finditer(rendered) if int(m.group(1)) == after]
            if len(marks) != 1:
                raise TemplateUnusableError(
                    f"the template wrote an earlier reply {len(marks)} times, not once"
                )
            rendered = rendered[marks[0].end() :]
        if self._reply.search(rendered):
            raise TemplateUnusableError("the template wrote a reply where loopd cannot replay it")
        return self._split(rendered, slots)

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

    def _messages(
        self,
        system: str,
        turns: Sequence[Turn],
        *,
        system_role: bool,
        tool_role: bool,
    ) -> tuple[list[dict[str, Any]], dict[int, str]]:
        """The template's messages for the conversation, every text a slot (rules 1, 3, 5)."""
        slots: dict[int, str] = {}
        messages: list[dict[str, Any]] = []

        def slot(text: str) -> str:
            number = len(slots)
            slots[number] = text
            return self._fenced(number)

        pending_system = ""
        if system_role:
            messages.append({"role": "system", "content": slot(system)})
        else:
            pending_system = slot(system)
        results = 0
        for index, turn in enumerate(turns):
            if turn.role is Role.MODEL:
                messages.append({"role": "assistant", "content": f"bx{self._nonce}{index}m"})
                continue
            if turn.role is Role.TOOL and tool_role:
                results += 1
                name = turn.name if turn.name and _IDENTIFIER.fullmatch(turn.name) else "tool"
                messages.append(
                    {
                        "role": "tool",
                        "content": slot(turn.text),
                        "name": name,
                        "tool_call_id": f"{results:09d}",
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
        tail = self._split(with_tools, slots)[-1]
        generation_tail = tail.text if isinstance(tail, Text) and tail.special else ""
        reasoning = next(
            (pair for pair in REASONING_MARKERS if pair[1] in self.template.source), None
        )
        opens = False
        if reasoning is not None and reasoning[0] in generation_tail:
            opens = reasoning[1] not in generation_tail.rsplit(reasoning[0], 1)[1]
        syntax, as_text = self._call_syntax(system_role, tool_role)
        return TemplateFacts(
            system_role=system_role,
            tool_role=tool_role,
            renders_tools=plain != with_tools,
            generation_tail=generation_tail,
            reasoning=reasoning,
            opens_reasoning=opens,
            close_reply=self._close_reply(system_role, tool_role),
            syntax=syntax,
            call_arguments_as_text=as_text,
        )

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

    def _call_syntax(self, system_role: bool, tool_role: bool) -> tuple[CallSyntax | None, bool]:
        """The syntax that reads back the call the template writes (None: it writes none),
        and whether it wanted the call's arguments as JSON text."""
        base, _ = self._messages(
            "s", [Turn(Role.USER, "u")], system_role=system_role, tool_role=tool_role
        )
        for as_text in (False, True):
            arguments: Any = SAMPLE_CALL["arguments"]
            if as_text:
                arguments = json.dumps(arguments, ensure_ascii=False)
            call = {
                "type": "function",
                "id": "000000001",
                "function": {"name": SAMPLE_CALL["name"], "arguments": arguments},
            }
            try:
                without = self._render(
                    [*base, {"role": "assistant", "content": ""}],
                    tools=self.tools,
                    generation=False,
                )
                written = self._render(
                    [*base, {"role": "assistant", "content": "", "tool_calls": [call]}],
                    tools=self.tools,
                    generation=False,
                )
            except TemplateError:
                continue
            found = self._read_back(without, written)
            if found is not None:
                return found, as_text
        return None, False


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
