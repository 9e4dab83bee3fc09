"""The demo model: a script that calls the owner's tools, for the first run's walk-through.

The embedded Gemma 3 270M is a base model, too small to write a tool call on
request: asked to read a note it answers in prose. So the walk-through that
`scripts/run` ends with (`scripts/demo`) talks to `loopd demo`, which serves a
loop socket of its own with this model in place of the embedded one, and
everything else real: the turn loop, the session log, brokerd over broker.sock
deciding on the owner's grants, the audit log, the approval, the sandbox. Only
the words the model writes are scripted, and every reply says so.

The script, read from the last message of the prompt (pure; `demo_reply`):

    an owner message naming the welcome note   -> read_file of notes/welcome.md
    an owner message naming the scratch folder -> shell in scratch/ (the example
                                                  grants ask the owner first)
    a tool result                              -> its first lines, quoted
    anything else                              -> what the demo model can do

Its tokenizer is small and honest, as the tests' scripted model's: with special
parsing the turn markers of both chat formats are single reserved ids; without
it, every character is its own id (code point + 1000), so a marker spelled in
text stays many tokens, as with a real tokenizer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from boxmaker.core.model.chat_format import GEMMA, Role
from boxmaker.core.model.tool_calls import CallSyntax
from boxmaker.loopd.model import Generation, Interrupted, NoVocabulary, never
from boxmaker.loopd.tools import system_prompt

SPECIAL = {
    "<bos>": 2,
    "<eos>": 1,
    "<start_of_turn>": 105,
    "<end_of_turn>": 106,
    "<|im_start|>": 200,
    "<|im_end|>": 201,
    "<|endoftext|>": 202,
}
_BY_ID = {v: k for k, v in SPECIAL.items()}
OFFSET = 1000
QUOTED_LINES = 6
PIECE = 8  # characters streamed at a time, as a real model's tokens come

MARK = "(demo model, scripted)"
HELP = (
    f"{MARK} I only follow a script: ask me to read your welcome note, or to "
    "list the scratch folder. The embedded model answers in `bxctl chat`."
)


class CharTokenizer:
    """The turn markers as reserved ids with special parsing; every other character its own."""

    def tokenize(self, text: str, *, special: bool) -> list[int]:
        ids: list[int] = []
        i = 0
        while i < len(text):
            if special:
                tag = next((t for t in SPECIAL if text.startswith(t, i)), None)
                if tag is not None:
                    ids.append(SPECIAL[tag])
                    i += len(tag)
                    continue
            ids.append(ord(text[i]) + OFFSET)
            i += 1
        return ids

    def detokenize(self, ids: Sequence[int]) -> str:
        return "".join(_BY_ID.get(i, chr(i - OFFSET) if i >= OFFSET else "") for i in ids)


def _call(name: str, arguments: dict[str, str]) -> str:
    return json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)


def _last_message(prompt: str) -> str:
    """The text of the prompt's last user-side turn (owner message or tool result)."""
    opener = f"{GEMMA.open_turn}{GEMMA.roles[Role.USER]}\n"
    body = prompt.rsplit(opener, 1)[-1]
    body = body.split(GEMMA.close_turn, 1)[0]
    return body.removeprefix(system_prompt(CallSyntax.BARE_JSON) + "\n\n")


def demo_reply(prompt: str, workspace: Path) -> str:
    """What the demo model writes next, given the prompt's text (Gemma's markers)."""
    message = _last_message(prompt)
    if message.startswith("[result of "):
        head, _, content = message.partition("]\n")
        name = head.removeprefix("[result of ")
        lines = content.strip("\n").splitlines()[:QUOTED_LINES] or ["(nothing)"]
        quoted = "\n".join(f"> {line}" for line in lines)
        return f"{MARK} {name} answered, through brokerd and the sandbox:\n{quoted}"
    words = message.lower()
    if "welcome" in words:
        return _call("read_file", {"path": str(workspace / "notes" / "welcome.md")})
    if "scratch" in words:
        command = "echo 'written in the sandbox' > hello.txt && ls -l"
        return _call("shell", {"command": command, "cwd": str(workspace / "scratch")})
    return HELP


class DemoModel(CharTokenizer, NoVocabulary):
    """The `Model` loopd's turn loop needs, writing `demo_reply` instead of thinking."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace

    def generate(
        self,
        session: str,
        prompt: list[int],
        *,
        max_tokens: int,
        stop: set[int],
        on_text: Callable[[str], None],
        interrupted: Interrupted = never,
    ) -> Generation:
        ids = self.tokenize(demo_reply(self.detokenize(prompt), self.workspace), special=False)
        ids = ids[:max_tokens]
        text = self.detokenize(ids)
        for start in range(0, len(text), PIECE):
            on_text(text[start : start + PIECE])
        return Generation(
            ids=tuple(ids),
            text=text,
            prompt_tokens=len(prompt),
            evaluated=len(prompt),
            finished=len(ids) < max_tokens,
        )
