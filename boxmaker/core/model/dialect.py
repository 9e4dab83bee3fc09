"""A model's language: everything the turn loop needs to prompt it and read its replies. Pure.

A dialect is made either from the model's own chat template
(`core.model.template_prompt`, the usual case) or from a hand-written format
(`core.model.chat_format`, for a file with no usable template, or named in `[model]
template`). Either way it says:

    render    the prompt's segments for the system text and the conversation
    stop      the special tokens that end a reply (as text)
    markers   the scaffolding tags it writes: each must be one token with special
              parsing and several without (the self-test), and text that spells
              one is neutralised
    syntax    how the model writes a tool call (`core.model.tool_calls.CallSyntax`), and
              whether the prompt already teaches it (the template's tools block):
              where it does not, the system text teaches this one syntax only
    reasoning the markers of a reasoning block and whether the prompt opens one

For a hand-written format: a call is read as tagged JSON where the reply has
`<tool_call>`, else as one bare JSON object; the system text teaches gemma the bare
form and the others the tagged one; none has reasoning markers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from boxmaker.core.model.chat_format import ChatFormat, Role, Segment, Turn
from boxmaker.core.model.known_markers import STOPS
from boxmaker.core.model.reasoning import ReasoningMarkers
from boxmaker.core.model.template_prompt import Stretches, TemplatePrompt
from boxmaker.core.model.tool_calls import CallSyntax, call_openers, syntax_markers

Render = Callable[[str, Sequence[Turn], Stretches | None], list[Segment]]


@dataclass(frozen=True)
class Dialect:
    name: str
    render: Render
    stop: tuple[str, ...]
    markers: tuple[str, ...]
    syntax: CallSyntax | None  # None: the tagged or the bare JSON call, as the reply has it
    teach: CallSyntax  # the syntax the system text shows, where the prompt does not
    prompt_teaches_syntax: bool
    reasoning: ReasoningMarkers | None = None
    opens_reasoning: bool = False

    @property
    def openers(self) -> tuple[str, ...]:
        """The texts that open a tool call in this dialect's syntax."""
        return call_openers(self.syntax)

    @property
    def shown(self) -> tuple[str, ...]:
        """The markers the model's own text must show (its reasoning markers and those
        its calls are written with), even where they are control tokens that llama.cpp
        renders as nothing when it turns tokens into text."""
        reasoning = (self.reasoning.open, self.reasoning.close) if self.reasoning else ()
        return tuple(dict.fromkeys((*reasoning, *syntax_markers(self.syntax))))

    @property
    def marked_openers(self) -> tuple[str, ...]:
        """The openers that are markers (`<tool_call>`, `[TOOL_CALLS]`), not a bare `{`
        or a fence: what ends an unclosed reasoning block (core.model.reasoning, rule 2)."""
        return tuple(o for o in self.openers if o[:1] in "<[")


def from_format(chat_format: ChatFormat) -> Dialect:
    """The dialect of a hand-written format (see the module docstring)."""

    def render(system: str, turns: Sequence[Turn], cache: Stretches | None) -> list[Segment]:
        return chat_format.render([Turn(Role.SYSTEM, system), *turns])

    teach = CallSyntax.BARE_JSON if chat_format.name == "gemma" else CallSyntax.TAGGED_JSON
    return Dialect(
        name=chat_format.name,
        render=render,
        stop=chat_format.stop,
        markers=chat_format.markers,
        syntax=None,
        teach=teach,
        prompt_teaches_syntax=False,
    )


def from_template(
    prompt: TemplatePrompt, eos: str, is_marker: Callable[[str], bool], marker_texts: Sequence[str]
) -> Dialect:
    """The dialect of a model's own template. `is_marker` says whether a text is one
    special token of the vocabulary; `marker_texts` is the vocabulary's marker list,
    of which those the template's scaffolding spells become the dialect's markers."""
    facts = prompt.facts
    close = facts.close_reply
    stops = [m for m in marker_texts if m and close.startswith(m)][:1]
    stops += [eos, *STOPS]  # the known stops (core.model.known_markers)
    stop = tuple(dict.fromkeys(s for s in stops if s and is_marker(s)))
    sample = prompt.text("s", [Turn(Role.USER, "u"), Turn(Role.MODEL, "m"), Turn(Role.USER, "v")])
    written = tuple(m for m in marker_texts if m and m in sample and is_marker(m))
    reasoning = ReasoningMarkers(*facts.reasoning) if facts.reasoning is not None else None
    syntax = facts.syntax if facts.syntax is not None else CallSyntax.TAGGED_JSON
    return Dialect(
        name="template",
        render=prompt.render,
        stop=stop,
        markers=tuple(dict.fromkeys((*written, *stop))),
        syntax=syntax,
        teach=syntax,
        prompt_teaches_syntax=facts.renders_tools and facts.syntax is not None,
        reasoning=reasoning,
        opens_reasoning=facts.opens_reasoning,
    )
