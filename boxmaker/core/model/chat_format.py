r"""Chat templates as token-level segments, so that text can never become a control token.

Pure; no I/O. A prompt is rendered as a list of segments. Scaffolding (the turn
markers) is tokenized with special-token parsing; every message's text (the
owner's words, tool results, the model's own earlier words) is tokenized without
it, so a tool result that spells `<end_of_turn>` stays ordinary text. The model's
own replies are kept as the token ids it generated and replayed exactly, so a
prompt is always a prefix-extension of the one before and the evaluated prefix
can be reused.

Formats, chosen by name (`[model] template` in loopd.toml) or from the model
file's own template (GGUF `tokenizer.chat_template`) by its markers. Each turn
below is spelled as rendered: the markers are tokenized as markers, the rest
(`\n`, spaces, the role names of gemma, chatml and llama3) as text, `...` is
the message:

    gemma    <bos> once, then  <start_of_turn>user\n ... <end_of_turn>\n
             roles user and model only: the system text opens the first user
             turn, a tool result is a user turn starting `[result of NAME]\n`;
             stops at <end_of_turn>, <eos>
    chatml   <|im_start|>user\n ... <|im_end|>\n  (Qwen, Hermes and others)
             roles system, user, assistant, tool; stops at <|im_end|>, <|endoftext|>
    llama3   <|begin_of_text|> once, then
             <|start_header_id|>user<|end_header_id|>\n\n ... <|eot_id|>
             roles system, user, assistant, ipython (tool results);
             stops at <|eot_id|>, <|end_of_text|>
    phi3     <|user|>\n ... <|end|>\n  (the role is the marker)
             roles <|system|>, <|user|>, <|assistant|>; a tool result is a
             labelled user turn, as in gemma; stops at <|end|>, <|endoftext|>
    mistral  <s> once, then  [INST] ...[/INST]  and the model's reply with no
             opening marker, closed by </s>; no system or tool role, as in
             gemma; stops at </s>
    deepseek_r1  <｜begin▁of▁sentence｜> once, then <｜User｜>...  and
             <｜Assistant｜>... closed by <｜end▁of▁sentence｜> (the role is the
             marker, no gap); no system or tool role, as in gemma (the R1 distills)
    gemma4   <bos> once, then  <|turn>user\n ... <turn|>\n  (Gemma 4), roles
             system, user and model; a tool result is a labelled user turn;
             stops at <turn|>, <eos>

The general shape of a turn, which every format fills in: `open_turn`, the
role's name (itself a marker where `role_markers`), `end_header`, the
`header_gap` text, the message, `close_turn` (`close_reply` for the model's
turn where it differs), the `turn_gap` text. Empty parts are left out; a role
with an empty name and no `open_turn` has no header at all (mistral's model turn).

Choosing (`format_for`): a name picks its format. "auto" looks for each
format's `detect` markers in the model's template and picks the one format
whose markers are all there; none, or more than one, is no format (the caller
refuses to start and names the key). Whoever loads the model then checks with
`missing_markers` that every marker of the chosen format is one token with
special parsing, so a format is never used with a vocabulary that lacks it.
"""  # noqa: RUF002 (DeepSeek's markers are full-width)

from __future__ import annotations

from collections.abc import Callable
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
class ReplyCall:
    """A tool call a model turn made, as loopd read it: the tool's name, its arguments
    as JSON text, and its id (the model's own, or one loopd made where it wrote none)."""

    name: str
    arguments: str
    id: str


@dataclass(frozen=True, slots=True)
class Turn:
    """One message of the conversation. A model turn may carry its generated ids and
    the calls it made; a tool result, the id of the call it answers."""

    role: Role
    text: str
    ids: tuple[int, ...] | None = None
    name: str | None = None  # for a tool result: the tool that answered
    calls: tuple[ReplyCall, ...] = ()  # for a model turn: the calls it made, in order
    call_id: str | None = None  # for a tool result: the id of the call it answers


@dataclass(frozen=True, slots=True)
class ChatFormat:
    name: str
    bos: str
    open_turn: str  # marker before the role's name; "" where the name is the marker
    close_turn: str  # marker after a message
    stop: tuple[str, ...]  # special tokens that end the model's turn
    roles: dict[Role, str]
    system_role: bool
    detect: tuple[str, ...]  # what a template of this family spells: all of them
    role_markers: bool = False  # the role names are markers (phi3's <|user|>)
    end_header: str = ""  # marker after the role's name (llama3's <|end_header_id|>)
    header_gap: str = "\n"  # text between a turn's header and its message
    close_reply: str = ""  # the model turn's closing marker, where not close_turn
    turn_gap: str = "\n"  # text after a turn's closing marker

    @property
    def markers(self) -> tuple[str, ...]:
        """Every marker the format writes or stops at, each once: all must be one token."""
        names = self.roles.values() if self.role_markers else ()
        found = (self.bos, self.open_turn, *names, self.end_header, self.close_turn)
        return tuple(dict.fromkeys(m for m in (*found, self.close_reply, *self.stop) if m))

    def render(self, turns: list[Turn], *, generation_prompt: bool = True) -> list[Segment]:
        """Every segment of the prompt for `turns`, ending where the model writes next."""
        segments: list[Segment] = [Text(self.bos, special=True)] if self.bos else []
        pending_system = ""
        for turn in turns:
            if turn.role is Role.SYSTEM and not self.system_role:
                pending_system += turn.text + "\n\n"
                continue
            segments += self._header(turn.role)
            if pending_system and turn.role is not Role.MODEL:
                segments.append(Text(pending_system))
                pending_system = ""
            if turn.role is Role.TOOL and self.roles[Role.TOOL] == self.roles[Role.USER]:
                segments.append(Text(f"[result of {turn.name or 'a tool'}]\n"))
            if turn.role is Role.MODEL and turn.ids is not None:
                segments.append(Tokens(turn.ids))
            else:
                segments.append(Text(turn.text))
            segments += self._footer(turn.role)
        if generation_prompt:
            segments += self._header(Role.MODEL)
        return segments

    def _header(self, role: Role) -> list[Segment]:
        name = self.roles[role]
        if not self.open_turn and not name:
            return []
        segments: list[Segment] = [Text(self.open_turn, special=True)] if self.open_turn else []
        if not self.role_markers and not self.end_header:
            return [*segments, Text(name + self.header_gap)]
        segments.append(Text(name, special=self.role_markers))
        if self.end_header:
            segments.append(Text(self.end_header, special=True))
        if self.header_gap:
            segments.append(Text(self.header_gap))
        return segments

    def _footer(self, role: Role) -> list[Segment]:
        close = self.close_reply if role is Role.MODEL and self.close_reply else self.close_turn
        segments: list[Segment] = [Text(close, special=True)] if close else []
        return [*segments, Text(self.turn_gap)] if self.turn_gap else segments


GEMMA = ChatFormat(
    name="gemma",
    bos="<bos>",
    open_turn="<start_of_turn>",
    close_turn="<end_of_turn>",
    stop=("<end_of_turn>", "<eos>"),
    roles={Role.USER: "user", Role.MODEL: "model", Role.TOOL: "user"},
    system_role=False,
    detect=("<start_of_turn>", "<end_of_turn>"),
)

CHATML = ChatFormat(
    name="chatml",
    bos="",
    open_turn="<|im_start|>",
    close_turn="<|im_end|>",
    stop=("<|im_end|>", "<|endoftext|>"),
    roles={Role.SYSTEM: "system", Role.USER: "user", Role.MODEL: "assistant", Role.TOOL: "tool"},
    system_role=True,
    detect=("<|im_start|>", "<|im_end|>"),
)

LLAMA3 = ChatFormat(
    name="llama3",
    bos="<|begin_of_text|>",
    open_turn="<|start_header_id|>",
    close_turn="<|eot_id|>",
    stop=("<|eot_id|>", "<|end_of_text|>"),
    roles={
        Role.SYSTEM: "system",
        Role.USER: "user",
        Role.MODEL: "assistant",
        Role.TOOL: "ipython",
    },
    system_role=True,
    detect=("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
    end_header="<|end_header_id|>",
    header_gap="\n\n",
    turn_gap="",
)

PHI3 = ChatFormat(
    name="phi3",
    bos="",
    open_turn="",
    close_turn="<|end|>",
    stop=("<|end|>", "<|endoftext|>"),
    roles={
        Role.SYSTEM: "<|system|>",
        Role.USER: "<|user|>",
        Role.MODEL: "<|assistant|>",
        Role.TOOL: "<|user|>",
    },
    system_role=True,
    detect=("<|user|>", "<|assistant|>", "<|end|>"),
    role_markers=True,
)

MISTRAL = ChatFormat(
    name="mistral",
    bos="<s>",
    open_turn="",
    close_turn="[/INST]",
    stop=("</s>",),
    roles={Role.USER: "[INST]", Role.MODEL: "", Role.TOOL: "[INST]"},
    system_role=False,
    detect=("[INST]", "[/INST]"),
    role_markers=True,
    header_gap=" ",
    close_reply="</s>",
    turn_gap="",
)

_BAR, _SPACE = "\uff5c", "\u2581"  # DeepSeek's full-width bar and its word mark
DEEPSEEK_R1 = ChatFormat(
    name="deepseek_r1",
    bos=f"<{_BAR}begin{_SPACE}of{_SPACE}sentence{_BAR}>",
    open_turn="",
    close_turn="",
    stop=(f"<{_BAR}end{_SPACE}of{_SPACE}sentence{_BAR}>",),
    roles={
        Role.USER: f"<{_BAR}User{_BAR}>",
        Role.MODEL: f"<{_BAR}Assistant{_BAR}>",
        Role.TOOL: f"<{_BAR}User{_BAR}>",
    },
    system_role=False,
    detect=(f"<{_BAR}User{_BAR}>", f"<{_BAR}Assistant{_BAR}>"),
    role_markers=True,
    header_gap="",
    close_reply=f"<{_BAR}end{_SPACE}of{_SPACE}sentence{_BAR}>",
    turn_gap="",
)

GEMMA4 = ChatFormat(
    name="gemma4",
    bos="<bos>",
    open_turn="<|turn>",
    close_turn="<turn|>",
    stop=("<turn|>", "<eos>"),
    roles={Role.SYSTEM: "system", Role.USER: "user", Role.MODEL: "model", Role.TOOL: "user"},
    system_role=True,
    detect=("<|turn>", "<turn|>"),
)

KNOWN_FORMATS = {f.name: f for f in (GEMMA, CHATML, LLAMA3, PHI3, MISTRAL, DEEPSEEK_R1, GEMMA4)}


def detect_formats(model_template: str) -> list[ChatFormat]:
    """The known formats whose every `detect` marker the model's template spells."""
    return [f for f in KNOWN_FORMATS.values() if all(m in model_template for m in f.detect)]


def format_for(name: str, model_template: str | None) -> ChatFormat | None:
    """The format named `name`; for "auto", the one format whose markers the model's
    template uses (None when no format, or more than one, matches)."""
    if name != "auto":
        return KNOWN_FORMATS.get(name)
    if model_template is None:
        return None
    found = detect_formats(model_template)
    return found[0] if len(found) == 1 else None


def missing_markers(chat_format: ChatFormat, tokenize: Callable[[str], list[int]]) -> list[str]:
    """The format's markers that `tokenize` (special parsing on) does not make one token."""
    return [m for m in chat_format.markers if len(tokenize(m)) != 1]
