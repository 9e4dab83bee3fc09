"""`loopd check [PATH]` (and `bxctl model check [PATH]`, which runs it): what loopd would do
with a GGUF file, before the owner switches the tree to it. The report itself; the child
process it runs in, with its time and memory bounds, is `boxmaker.loopd.check_process`.

I/O: reads the file's vocabulary and metadata alone (a `vocab_only` load,
`loopd.llama_load`: no weights, seconds even for a 35B model; no template compiled by
llama-cpp-python) and runs its templates in loopd's sandbox. Without PATH it checks
the model loopd.toml names (the embedded default unless `[model] path` is set); with
PATH, that file as `[model] path` would have it. It starts nothing and writes nothing.
One line per fact, `name: value`; a line loopd would refuse to start on reads
`problem: ...` and ends with its runbook pointer (or, for a key loopd.toml must change,
names the key and what to set). Every text from the file (names, values, what a
template raised) is escaped as model text is (`core.display.escape.escape_arguments`: one line,
no control character). The facts:

    model            the path
    architecture     general.architecture, and the trained context (<arch>.context_length)
    adapter          the LoRA adapter `[model] adapter` names for the file (`loopd.adapter`:
                     "auto" is the shipped one for the embedded model, none for a PATH),
                     its file name and short sha256, or none; one loopd would refuse
                     (missing, another digest, no LoRA adapter, another architecture)
                     is a problem
    chat template    found and used, and which of the file's templates it is (`default
                     (tokenizer.chat_template)`, or `tool_use (tokenizer.chat_template.tool_use)`
                     where the file has one: `core.model.named_templates`); or the hand-written
                     format that stands in, and why
    templates        every template the file holds, default and named; each must compile
                     and render the sample conversation in loopd's sandbox
                     (`loopd.template_check`), or it is a problem, named, with what it did
    dialect          the call syntax, the reasoning markers and whether the prompt opens
                     them; where the template shows no call syntax (or there is no
                     template), that it shows none and which syntax loopd teaches instead
    markers          how many, and the marker self-test (every marker one token, its
                     neutralised form several) and the dialect's self-test
    prompt           loopd's prompt for a sample conversation against the template's own
                     rendering: identical, or where they first differ (rule 4 of
                     core.model.template_prompt, earlier replies replayed as written, says why)
    scaffolding      the text the template adds to every prompt beyond the slots and the
                     markers (`loopd.template_check`, rule 2), for the owner to read
    memory           the weights (the file's size) and the KV cache per 1,000 tokens of
                     context at `[model] kv_type`, counted over the layers that have one
                     (a hybrid model's recurrent layers hold a fixed state instead)
    context          the context loopd would give the model from `[model] context` and
                     `memory_mib` (`core.model.context_fit`: 0 = the trained context, bounded by
                     what fits memory_mib), its KV cache and what is left for saved
                     sessions; a context loopd would refuse is a problem
    placement        the backend (the build's GPU support, each GPU and its memory) and
                     the offload loopd would plan from loopd.toml (`core.model.offload`); a
                     refused combination of keys is a problem
    backend          with `[model] backend` a served one, in place of memory, context and
                     placement: the server's address, whose they are (`loopd probe`
                     asks the server itself); the adapter line then says it is the
                     server's

Exit status (`check_process`): 0 when loopd would start on the file and every template
in it passes, 1 when not (or when the check ran past its time or memory), 2 when the
file cannot be read at all (runbook.md#loopd-model-unreadable).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from boxmaker.core.display.escape import escape_arguments
from boxmaker.core.errors import StartupError
from boxmaker.core.model.context_fit import ContextFitError, fit_context, kv_bytes_per_token
from boxmaker.core.model.dialect import Dialect
from boxmaker.core.model.named_templates import choose_template
from boxmaker.core.model.offload import Offload
from boxmaker.core.model.template_prompt import TemplatePrompt
from boxmaker.core.model.template_sandbox import TemplateError
from boxmaker.core.runbook import Runbook
from boxmaker.loopd.adapter import check_adapter, describe, resolve
from boxmaker.loopd.backend import read_backend
from boxmaker.loopd.config import LoopdConfig
from boxmaker.loopd.dialects import choose_dialect, self_test, template_prompt
from boxmaker.loopd.llama_load import load_llama
from boxmaker.loopd.markers import (
    LlamaVocabulary,
    build_markers,
    format_markers,
    marker_problems,
    plain_user_defined,
    unlisted,
)
from boxmaker.loopd.model import (
    GIVES_TOOLS,
    Generation,
    Interrupted,
    embedded_model_path,
    never,
    special_text,
)
from boxmaker.loopd.placement import plan
from boxmaker.loopd.rpc import register_configured
from boxmaker.loopd.template_check import (
    SAMPLE,
    SAMPLE_MESSAGES,
    SAMPLE_SYSTEM,
    added_text,
    check_templates,
    file_templates,
)

TEMPLATE_POINTER = Runbook.LOOPD_TEMPLATE_REFUSED.pointer
# what the check is doing, for the time and memory bounds' one line (`check_process`)
Progress = Callable[[Runbook, str], None]


def _quiet(_entry: Runbook, _what: str) -> None:
    pass


class VocabularyModel:
    """The `Model` the dialect needs, over a file's vocabulary alone: it cannot generate."""

    def __init__(self, path: Path) -> None:
        self._llm: Any = load_llama(path, vocab_only=True)  # no template compiled
        self.vocabulary = LlamaVocabulary(self._llm)
        self.metadata: dict[str, str] = dict(self._llm.metadata)
        # the template loopd renders, as `LlamaModel` chooses it (core.model.named_templates)
        self.template_choice = choose_template(self.metadata, tools=GIVES_TOOLS)
        choice = self.template_choice
        self.chat_template: str | None = choice.source if choice is not None else None
        self.bos_text = special_text(self._llm, self._llm.token_bos())
        self.eos_text = special_text(self._llm, self._llm.token_eos())
        self.add_bos = str(self.metadata.get("tokenizer.ggml.add_bos_token")) == "true"
        self.markers = build_markers(self.vocabulary)

    def tokenize(self, text: str, *, special: bool) -> list[int]:
        return self.vocabulary.tokenize(text, special=special)

    def detokenize(self, ids: Sequence[int]) -> str:
        data: bytes = self._llm.detokenize(list(ids), special=True)
        return data.decode("utf-8", errors="replace")

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
        raise RuntimeError("a vocabulary loaded alone cannot generate")


@dataclass(frozen=True)
class Placement:
    """Where loopd would run the model: the report's line, and the offload it plans
    (None: loopd.toml's GPU keys are refused; the line is that problem)."""

    line: str
    offload: Offload | None


def placement_facts(config: LoopdConfig) -> Placement:
    """The placement fact (read before the template work: it asks the GPU driver)."""
    try:
        register_configured(config)
        backend = read_backend()
        offload = plan(config, backend)
    except StartupError as exc:
        return Placement(f"problem: {exc}", None)
    return Placement(f"placement: {backend.describe()}; {offload.describe()}", offload)


def report(
    path: Path,
    config: LoopdConfig,
    model: VocabularyModel,
    placement: Placement,
    progress: Progress = _quiet,
) -> Iterator[str]:
    """The report's lines, each as soon as it is known (see the module docstring);
    loopd would start on the file when none of them is a `problem:` line."""
    meta = model.metadata
    arch = meta.get("general.architecture", "unknown")
    yield f"model: {escape_arguments(str(path))}"
    context = meta.get(f"{arch}.context_length", "unknown")
    yield escape_arguments(f"architecture: {arch}, trained context {context} tokens")
    yield adapter_fact(config, meta.get("general.architecture", ""))
    templates = file_templates(meta)
    verdicts = check_templates(
        templates,
        bos=model.bos_text,
        eos=model.eos_text,
        thinking=config.model.thinking,
        progress=lambda what: progress(Runbook.LOOPD_TEMPLATE_REFUSED, what),
    )
    listed = ", ".join(t.describe() for t in templates) or "none"
    failed = [(t, why) for t, why in verdicts if why is not None]
    listing = f"templates: {listed}" + (
        "; each compiled and rendered the sample conversation in loopd's sandbox"
        if templates and not failed
        else ""
    )
    choice = model.template_choice
    rendered = choice.key if choice is not None and config.model.template == "auto" else None
    refusals = [_refusal(t.describe(), why, rendered == t.key) for t, why in failed]
    if any(t.key == rendered for t, _why in failed):
        yield listing  # no dialect without the template it would be read from
        yield from refusals
        return
    progress(Runbook.LOOPD_TEMPLATE_REFUSED, "the chat template's dialect")
    try:
        dialect, why = choose_dialect(config, model)
    except StartupError as exc:
        yield listing
        yield f"problem: {escape_arguments(str(exc))}"
        return
    yield f"chat template: {why}"
    yield listing
    yield from refusals
    prompt: TemplatePrompt | None = None
    if dialect.name == "template" and model.chat_template is not None:
        try:  # the same template, sandbox and bounds as the dialect's: its facts again
            prompt = template_prompt(config, model, model.chat_template)
        except TemplateError as exc:
            named = escape_arguments(choice.describe()) if choice is not None else "default"
            yield _refusal(named, escape_arguments(str(exc)), True)
            return
    yield f"dialect: {dialect_facts(dialect, prompt)}"
    progress(Runbook.LOOPD_TAGS_UNEXPECTED, "the marker self-test")
    plain = plain_user_defined(model.vocabulary, model.markers)
    problems = unlisted(model.markers, format_markers(dialect))
    problems += marker_problems(model.vocabulary, model.markers, plain)
    problems += self_test(model, dialect)
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        pointer = Runbook.LOOPD_TAGS_UNEXPECTED.pointer
        said = escape_arguments("; ".join(problems[:3]))
        yield f"problem: marker self-test failed: {said}{more}; {pointer}"
    else:
        yield f"markers: {len(model.markers)}, the marker self-test passed"
    progress(Runbook.LOOPD_TEMPLATE_REFUSED, "the sample prompt")
    yield f"prompt: {compare_prompt(config, model, prompt)}"
    yield f"scaffolding: {scaffolding(model, dialect, prompt)}"
    if config.model.backend != "in-process":
        # the weights, the context and where they run are the server's
        server = escape_arguments(config.model.server)
        yield (
            f"backend: {config.model.backend} at {server}: its context, memory and "
            "placement are the server's (loopd probe asks it)"
        )
        return
    size = os.stat(path).st_size
    kv = kv_bytes_per_token(meta, config.model.kv_type)
    per_thousand = f"{kv * 1000 / 2**20:.1f} MiB" if kv is not None else "unknown"
    yield (
        f"memory: weights {size / 2**20:.0f} MiB, KV cache ({config.model.kv_type}) "
        f"{per_thousand} per 1,000 tokens"
    )
    settings = config.model
    # where the GPU keys are refused (that problem is the placement line), the context
    # as the same keys would have it on the CPU
    offload = placement.offload or Offload(
        0, False, settings.kv_type, settings.batch, min(settings.ubatch, settings.batch)
    )
    try:
        fit = fit_context(
            meta, context=settings.context, memory_mib=settings.memory_mib, offload=offload
        )
        yield f"context: {escape_arguments(fit.describe(settings.memory_mib))}"
    except ContextFitError as exc:
        yield f"problem: {escape_arguments(str(exc))}"
    yield placement.line


def adapter_fact(config: LoopdConfig, architecture: str) -> str:
    """The adapter line: the one `[model] adapter` names for `[model] path`'s model, as
    loopd would check it against the model's `architecture`, or the problem."""
    if config.model.backend != "in-process":
        return "adapter: the server's (llama-server --lora, vLLM --lora-modules)"
    file = resolve(config.model.adapter, config.model.path)
    try:
        adapter = None if file is None else check_adapter(file, architecture)
    except StartupError as exc:
        return f"problem: {exc}"  # escaped by check_adapter
    return f"adapter: {describe(adapter)}"


def _refusal(named: str, why: str, rendered: bool) -> str:
    """The problem line of a template that failed (`named` and `why` escaped already)."""
    if rendered:
        return (
            f"problem: the model's chat template {named} cannot be used: {why}; set [model] "
            f"template in loopd.toml to a hand-written format to run this file anyway; "
            f"{TEMPLATE_POINTER}"
        )
    return (
        f"problem: the file's template {named} cannot be used: {why} (loopd does not render "
        "it, but llama.cpp and other tools compile every template a file holds: remove it "
        f"from a copy of the file with gguf-new-metadata --remove-metadata); {TEMPLATE_POINTER}"
    )


def dialect_facts(dialect: Dialect, prompt: TemplatePrompt | None) -> str:
    """The dialect line's value: its name, call syntax and reasoning markers (escaped)."""
    reasoning = "none"
    if dialect.reasoning is not None:
        opened = ", opened by the prompt" if dialect.opens_reasoning else ""
        reasoning = f"{dialect.reasoning.open} ... {dialect.reasoning.close}{opened}"
    return escape_arguments(
        f"{dialect.name}, tool calls {call_syntax(dialect, prompt)}, reasoning {reasoning}"
    )


def scaffolding(model: VocabularyModel, dialect: Dialect, prompt: TemplatePrompt | None) -> str:
    """The scaffolding line's value: what the template adds to every prompt."""
    if prompt is None:
        return f"the hand-written {dialect.name} format's own markers and role names"
    try:
        segments = prompt.render(SAMPLE_SYSTEM, SAMPLE)
    except TemplateError as exc:
        return f"cannot be shown: {escape_arguments(str(exc))}"
    added = added_text(segments, (m.text for m in model.markers))
    if not added:
        return "the template adds no text to a prompt beyond its markers"
    return f"the template adds this text to every prompt: {' '.join(added)}"


def call_syntax(dialect: Dialect, prompt: TemplatePrompt | None) -> str:
    """How the model's tool calls are read and taught: the syntax the template writes,
    or, where it writes none (`TemplateFacts.syntax` None) or there is no template,
    that it shows none and the syntax loopd teaches in the system text instead."""
    taught = dialect.teach.value
    if prompt is None:
        return f"tagged or bare JSON (a hand-written format: loopd teaches {taught})"
    if prompt.facts.syntax is None:
        return (
            f"{taught} (the template shows no call syntax: loopd teaches {taught} "
            "in the system text)"
        )
    written = dialect.syntax.value if dialect.syntax is not None else taught
    if not dialect.prompt_teaches_syntax:
        return f"{written} (the template writes no tools block: loopd teaches it)"
    return written


def compare_prompt(
    config: LoopdConfig, model: VocabularyModel, prompt: TemplatePrompt | None
) -> str:
    """loopd's prompt for the sample conversation against the template's own rendering
    (`prompt` None: no template is used); escaped, on one line."""
    if prompt is None:
        return "rendered by the hand-written format (no template to compare with)"
    try:
        ours = prompt.text(SAMPLE_SYSTEM, SAMPLE)
        theirs = prompt.template.render(
            SAMPLE_MESSAGES,
            tools=prompt.tools,
            add_generation_prompt=True,
            bos_token=model.bos_text,
            eos_token=model.eos_text,
            now=prompt.now(),
            extra={"enable_thinking": config.model.thinking},
        )
    except TemplateError as exc:
        return f"cannot be compared: {escape_arguments(str(exc))}"
    if model.add_bos and model.bos_text and not theirs.startswith(model.bos_text):
        theirs = model.bos_text + theirs  # as the tokenizer adds it (rule 6)
    if ours == theirs:
        return "identical to the template's own rendering"
    at = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), None)
    at = at if at is not None else min(len(ours), len(theirs))
    return escape_arguments(
        f"differs from the template's own rendering at character {at}: loopd "
        f"{ours[at : at + 40]!r}, the template {theirs[at : at + 40]!r} (earlier replies "
        "are replayed as the model wrote them: rule 4 of core.model.template_prompt)"
    )


def model_path(config: LoopdConfig) -> Path:
    """`[model] path`, or the embedded default (assembled under home if need be)."""
    return Path(config.model.path) if config.model.path else embedded_model_path(config.home)
