"""Chat templates as token-level segments, so that text can never become a control token.

Pure; no I/O. A prompt is rendered as a list of segments. Scaffolding (the turn
markers) is tokenized with special-token parsing; every message's text (the
owner's words, tool results, the model's own earlier words) is tokenized without
it, so a tool result that spells `<end_of_turn>` stays ordinary text. The model's
own replies are kept as the token ids it generated and replayed exactly, so a
prompt is always a prefix-extension of the one before and the evaluated prefix
can be reused.

Formats, chosen by name (or from the model file's own template, by its markers):

    gemma    <start_of_turn>user / model ... <end_of_turn>; no system or tool role:
             the system text opens the first user turn, tool results are user turns
    chatml   <|im_start|>system / user / assistant / tool ... <|im_end|>
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Role(StrEnum):
    SYSTEM = "system"
    USER = "user"
    MODEL = "model"
    TOOL = "tool"


@dataclass(frozen=True, slots=True)
class Text:
    """Text to tokenize; `special` only for a template's own scaffolding."""

    text: str
    special: bool = False


@dataclass(frozen=True, slots=True)
class Tokens:
    """Token ids to use as they are (the model's own earlier output)."""

    ids: tuple[int, ...]


Segment = Text | Tokens


@dataclass(frozen=True, slots=True)
class Turn:
    """One message of the conversation. A model turn may carry its generated ids."""

    role: Role
    text: str
    ids: tuple[int, ...] | None = None
    name: str | None = None  # for a tool result: the tool that answered


@dataclass(frozen=True, slots=True)
class ChatFormat:
    name: str
    bos: str
    open_turn: str
    close_turn: str
    stop: tuple[str, ...]  # special tokens that end the model's turn
    roles: dict[Role, str]
    system_role: bool

    def render(self, turns: list[Turn], *, generation_prompt: bool = True) -> list[Segment]:
        """Every segment of the prompt for `turns`, ending where the model writes next."""
        segments: list[Segment] = [Text(self.bos, special=True)] if self.bos else []
        pending_system = ""
        for turn in turns:
            if turn.role is Role.SYSTEM and not self.system_role:
                pending_system += turn.text + "\n\n"
                continue
            segments += [Text(self.open_turn, special=True), Text(self.roles[turn.role] + "\n")]
            if pending_system and turn.role is not Role.MODEL:
                segments.append(Text(pending_system))
                pending_system = ""
            if turn.role is Role.TOOL and not self.system_role:
                segments.append(Text(f"[result of {turn.name or 'a tool'}]\n"))
            if turn.role is Role.MODEL and turn.ids is not None:
                segments.append(Tokens(turn.ids))
            else:
                segments.append(Text(turn.text))
            segments += [Text(self.close_turn, special=True), Text("\n")]
        if generation_prompt:
            segments += [Text(self.open_turn, special=True), Text(self.roles[Role.MODEL] + "\n")]
        return segments


GEMMA = ChatFormat(
    name="gemma",
    bos="<bos>",
    open_turn="<start_of_turn>",
    close_turn="<end_of_turn>",
    stop=("<end_of_turn>", "<eos>"),
    roles={Role.USER: "user", Role.MODEL: "model", Role.TOOL: "user"},
    system_role=False,
)

CHATML = ChatFormat(
    name="chatml",
    bos="",
    open_turn="<|im_start|>",
    close_turn="<|im_end|>",
    stop=("<|im_end|>", "<|endoftext|>"),
    roles={Role.SYSTEM: "system", Role.USER: "user", Role.MODEL: "assistant", Role.TOOL: "tool"},
    system_role=True,
)

FORMATS = {f.name: f for f in (GEMMA, CHATML)}


def format_for(name: str, model_template: str | None) -> ChatFormat | None:
    """The format named `name`; for "auto", the one whose markers the model's template uses."""
    if name != "auto":
        return FORMATS.get(name)
    if model_template is None:
        return None
    for chat_format in FORMATS.values():
        if chat_format.open_turn in model_template and chat_format.close_turn in model_template:
            return chat_format
    return None
