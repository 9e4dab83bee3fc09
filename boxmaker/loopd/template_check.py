"""Every chat template a model file holds, checked in loopd's sandbox, and what a template
adds to every prompt. For `loopd check` (`boxmaker.loopd.model_check`).

No I/O of its own (the templates run in `core.model.template_sandbox`, with the monotonic
clock). A GGUF file may hold several templates: the default, `tokenizer.chat_template`,
and named ones, `tokenizer.chat_template.<name>` (`core.model.named_templates`). loopd renders
one of them; every one is hostile input all the same (llama-cpp-python's own `Llama`
would compile each of them, unbounded, were it not for `loopd.llama_load`; llama.cpp's
server does), so the check runs each. The rules:

1. **Each template is checked.** It must compile and render loopd's sample conversation
   (`SAMPLE`, with loopd's tools) in the sandbox, within its bounds; otherwise the
   template's problem is one line naming it (`describe`: its name and key, escaped,
   as everything from the file is) and what it did (escaped: a `raise_exception` text
   is the file's words). The default comes first, then the named ones by name.
2. **What the template adds.** From loopd's own prompt for the sample (the segments
   `core.model.template_prompt` splits at the slots), the template's scaffolding, less the
   vocabulary's markers and less loopd's tools where the template wrote them as
   `tojson` does (each shown as `(loopd's tool NAME)`, all of them as `(loopd's
   tools)`): what is left is what the file says to the model in every prompt, the
   owner's to read. Pieces between markers, stripped, each once, in order.
3. **Everything from the file is data.** Every text here that came from the file is
   escaped (`core.display.escape.escape_arguments`: on one line, no control character).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from boxmaker.core.display.escape import escape_arguments
from boxmaker.core.model.chat_format import Role, Segment, Text, Turn
from boxmaker.core.model.named_templates import DEFAULT, DEFAULT_KEY, NAMED_PREFIX, named_templates
from boxmaker.core.model.template_sandbox import TemplateError
from boxmaker.ipc.template_worker import WorkerTemplate
from boxmaker.loopd.tools import TOOL_SCHEMAS

SAMPLE_SYSTEM = "You are a helpful assistant."
SAMPLE = [
    Turn(Role.USER, "What is on my list today?"),
    Turn(Role.MODEL, "Your list has three items."),
    Turn(Role.USER, "Thanks."),
]
# the sample as a template's `messages`, as Hugging Face hands it over
SAMPLE_MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": SAMPLE_SYSTEM},
    {"role": "user", "content": SAMPLE[0].text},
    {"role": "assistant", "content": SAMPLE[1].text},
    {"role": "user", "content": SAMPLE[2].text},
]


@dataclass(frozen=True)
class FileTemplate:
    """One template of the file: its name (`default` for the plain key), key and source."""

    name: str
    key: str
    source: str

    def describe(self) -> str:
        """`default (tokenizer.chat_template)`, `rag (tokenizer.chat_template.rag)`: escaped."""
        return escape_arguments(f"{self.name} ({self.key})")


def file_templates(metadata: Mapping[str, object]) -> list[FileTemplate]:
    """Every template of the file: the default first, then the named ones by name."""
    default = metadata.get(DEFAULT_KEY)
    found = [FileTemplate(DEFAULT, DEFAULT_KEY, default)] if isinstance(default, str) else []
    named = named_templates(metadata)
    return found + [FileTemplate(n, NAMED_PREFIX + n, named[n]) for n in sorted(named)]


def template_problem(
    template: FileTemplate, *, bos: str, eos: str, thinking: bool, now: datetime | None = None
) -> str | None:
    """Why `template` cannot be used (rule 1, one escaped line), or None: it compiles and
    renders the sample conversation within the sandbox's bounds."""
    try:
        WorkerTemplate(template.source).render(
            SAMPLE_MESSAGES,
            tools=TOOL_SCHEMAS,
            add_generation_prompt=True,
            bos_token=bos,
            eos_token=eos,
            now=now if now is not None else datetime.now(UTC),
            extra={"enable_thinking": thinking},
        )
    except TemplateError as exc:
        return escape_arguments(str(exc))
    return None


def check_templates(
    templates: Sequence[FileTemplate],
    *,
    bos: str,
    eos: str,
    thinking: bool,
    progress: Callable[[str], None] = lambda _what: None,
) -> list[tuple[FileTemplate, str | None]]:
    """Each template with its problem (None: none), in order; `progress` is told which
    template runs, before it runs (the check's parent names it if the check never ends)."""
    verdicts = []
    for template in templates:
        progress(f"the template {template.describe()}")
        problem = template_problem(template, bos=bos, eos=eos, thinking=thinking)
        verdicts.append((template, problem))
    return verdicts


def added_text(
    segments: Sequence[Segment],
    markers: Iterable[str],
    tools: Sequence[Mapping[str, Any]] = TOOL_SCHEMAS,
) -> list[str]:
    """Rule 2: the pieces of scaffolding the template adds, escaped, each as a JSON string."""
    scaffolding = [s.text for s in segments if isinstance(s, Text) and s.special]
    texts = [m for m in set(markers) if m]
    texts.sort(key=len, reverse=True)  # a marker inside a longer one goes after it
    pieces: dict[str, None] = {}
    for text in scaffolding:
        text = _without_tools(text, tools)
        for marker in texts:
            if marker in text:
                text = text.replace(marker, "\x00")
        for piece in text.split("\x00"):
            if piece.strip():
                pieces.setdefault(piece.strip())
    return [escape_arguments(json.dumps(piece, ensure_ascii=False)) for piece in pieces]


def _without_tools(text: str, tools: Sequence[Mapping[str, Any]]) -> str:
    """`text` with loopd's tools, where written as `tojson` writes them, named instead."""
    forms: list[tuple[str, str]] = []
    for indent in (None, 2, 4):
        forms.append((_json(list(tools), indent), "(loopd's tools)"))
        for tool in tools:
            function = tool.get("function", tool)
            name = function.get("name", "?") if isinstance(function, Mapping) else "?"
            forms.append((_json(tool, indent), f"(loopd's tool {name})"))
            forms.append((_json(function, indent), f"(loopd's tool {name})"))
    for form, shown in sorted(forms, key=lambda pair: len(pair[0]), reverse=True):
        text = text.replace(form, shown)
    return text


def _json(value: object, indent: int | None) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)
