"""Which language loopd speaks to the loaded model: its own chat template, or a hand-written format.

No I/O of its own (the model's tokenizer and template are read through the model).
`[model] template = "auto"` (the default) uses the model file's own chat template
(`core.model.template_prompt`) when it can be followed: of a file with named templates,
the one `core.model.named_templates` chooses (`tool_use` where there is one), run in the
same sandbox and bounds as a default one. A template that renders but cannot be
split at its slots falls back to the hand-written format its markers name
(`choose_format`), with the reason logged; a template that raises, loops or breaks a
bound on loopd's sample conversation refuses the start (runbook.md#loopd-template-refused),
naming the template. Whatever of the file such a line holds (the template's name, what it
raised) is escaped as model text is (`core.display.escape.escape_arguments`): on one line, so a
newline in a `raise_exception` text cannot forge a log line, and with no control character.
A format named in `[model] template` is used as it is. Either way the vocabulary must
have every marker of the dialect as one token (`self_test`).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from functools import partial
from typing import Protocol

from boxmaker.core.display.escape import escape_arguments
from boxmaker.core.errors import StartupError
from boxmaker.core.model.chat_format import KNOWN_FORMATS, ChatFormat, format_for, missing_markers
from boxmaker.core.model.dialect import Dialect, from_format, from_template
from boxmaker.core.model.template_prompt import TemplatePrompt, TemplateUnusableError
from boxmaker.core.model.template_sandbox import TemplateError
from boxmaker.core.runbook import Runbook
from boxmaker.ipc.template_worker import WorkerTemplate
from boxmaker.loopd.config import LoopdConfig
from boxmaker.loopd.model import Model
from boxmaker.loopd.tools import SCHEMAS, TOOL_SCHEMAS

log = logging.getLogger(__name__)

SELFTEST_POINTER = Runbook.LOOPD_SELFTEST_FAILED.pointer
TEMPLATE_POINTER = Runbook.LOOPD_TEMPLATE_REFUSED.pointer


class _Marked(Protocol):
    @property
    def markers(self) -> tuple[str, ...]: ...


def choose_format(config: LoopdConfig, model: Model) -> ChatFormat:
    """`[model] template`, or for "auto" the family of the model file's own template;
    StartupError naming the key when there is none, or the vocabulary lacks a marker."""
    name = config.model.template
    if name == "auto" and not config.model.path and model.chat_template is None:
        name = "gemma"  # the embedded default is the base Gemma 3, with no template
    choices = ", ".join(f'"{known}"' for known in KNOWN_FORMATS)
    chosen = format_for(name, model.chat_template)
    if chosen is None:
        raise StartupError(
            "the model file names no chat template loopd knows; set [model] template "
            f"in loopd.toml to one of {choices}; {SELFTEST_POINTER}"
        )
    missing = missing_markers(chosen, partial(model.tokenize, special=True))
    if missing:
        raise StartupError(
            f"the model's vocabulary has no single token for the {chosen.name} "
            f"marker{'s' if len(missing) > 1 else ''} {', '.join(missing)}: it is not "
            f"a {chosen.name} model; set [model] template in loopd.toml to its own "
            f"format, one of {choices}; {SELFTEST_POINTER}"
        )
    return chosen


def template_prompt(config: LoopdConfig, model: Model, source: str) -> TemplatePrompt:
    """The model's own template as loopd's prompt renderer; TemplateError if it cannot be."""
    return TemplatePrompt(
        WorkerTemplate(source),  # compiled and rendered in the bounded child (ipc.template_worker)
        bos=model.bos_text,
        eos=model.eos_text,
        add_bos=model.add_bos,
        tools=list(TOOL_SCHEMAS),
        now=lambda: datetime.now(UTC),
        thinking=config.model.thinking,
        schemas=SCHEMAS,
    )


def is_marker(model: Model, text: str) -> bool:
    """Whether `text` is one token with special parsing and more than one without."""
    return (
        len(model.tokenize(text, special=True)) == 1
        and len(model.tokenize(text, special=False)) > 1
    )


def marker_texts(model: Model) -> tuple[str, ...]:
    """The vocabulary's marker list as texts (the model's, where it has one)."""
    return tuple(m.text for m in model.markers)


def choose_dialect(config: LoopdConfig, model: Model) -> tuple[Dialect, str]:
    """The dialect and one line saying why it was chosen (see the module docstring)."""
    source = model.chat_template
    if config.model.template == "auto" and source is not None:
        choice = model.template_choice
        # the file's names and the template's words are data: escaped, on one line
        named = f" {escape_arguments(choice.describe())}" if choice is not None else ""
        try:
            prompt = template_prompt(config, model, source)
        except TemplateUnusableError as exc:
            said = escape_arguments(str(exc))
            why = f"the model's own template{named} cannot be followed ({said})"
            log.warning("event=template_unusable %s; a hand-written format stands in", why)
        except TemplateError as exc:
            raise StartupError(
                f"the model's chat template{named} cannot be used: {escape_arguments(str(exc))}; "
                f"set [model] template in loopd.toml to a hand-written format to run this file "
                f"anyway; {TEMPLATE_POINTER}"
            ) from exc
        else:
            dialect = from_template(
                prompt,
                model.eos_text,
                partial(is_marker, model),
                marker_texts(model),
            )
            which = f": {escape_arguments(choice.explain())}" if choice is not None else ""
            return dialect, f"the model's own chat template{which}"
        chosen = choose_format(config, model)
        return from_format(chosen), f"the {chosen.name} format: {why}"
    chosen = choose_format(config, model)
    why = "named in [model] template" if config.model.template != "auto" else "no template"
    return from_format(chosen), f"the {chosen.name} format ({why})"


def self_test(model: Model, dialect: _Marked) -> list[str]:
    """Each scaffolding tag must be one token as a tag and several as ordinary text."""
    problems = []
    for tag in sorted(dialect.markers):
        as_tag = model.tokenize(tag, special=True)
        as_text = model.tokenize(tag, special=False)
        shown = escape_arguments(repr(tag))  # the template's text: data
        if len(as_tag) != 1:
            problems.append(f"{shown} is {len(as_tag)} tokens as a tag, not 1")
        if len(as_text) < 2:
            problems.append(f"{shown} as ordinary text is a single token: text could forge it")
    return problems
