"""`loopd check [PATH]` (and `bxctl model check [PATH]`, which runs it): what loopd would do
with a GGUF file, before the owner switches the tree to it.

I/O: reads the file's vocabulary and metadata alone (llama-cpp-python's `vocab_only`
load: no weights, seconds even for a 35B model) and prints. Without PATH it checks
the model loopd.toml names (the embedded default unless `[model] path` is set); with
PATH, that file as `[model] path` would have it. It starts nothing and
writes nothing. One line per fact, `name: value`; a line loopd would refuse to
start on reads `problem: ...` and ends with its runbook pointer (or, for a key
loopd.toml must change, names the key and what to set). The facts:

    model            the path
    architecture     general.architecture, and the trained context (<arch>.context_length)
    chat template    found and used, and which of the file's templates it is (`default
                     (tokenizer.chat_template)`, or `tool_use (tokenizer.chat_template.tool_use)`
                     where the file has one: `core.named_templates`); or the hand-written
                     format that stands in, and why
    dialect          the call syntax, the reasoning markers and whether the prompt opens
                     them; where the template shows no call syntax (or there is no
                     template), that it shows none and which syntax loopd teaches instead
    markers          how many, and the marker self-test (every marker one token, its
                     neutralised form several) and the dialect's self-test
    prompt           loopd's prompt for a sample conversation against the template's own
                     rendering: identical, or where they first differ (rule 4 of
                     core.template_prompt, earlier replies replayed as written, says why)
    memory           the weights (the file's size) and the KV cache per 1,000 tokens of
                     context at `[model] kv_type`, counted over the layers that have one
                     (a hybrid model's recurrent layers hold a fixed state instead)
    context          the context loopd would give the model from `[model] context` and
                     `memory_mib` (`core.context_fit`: 0 = the trained context, bounded by
                     what fits memory_mib), its KV cache and what is left for saved
                     sessions; a context loopd would refuse is a problem
    placement        the backend (the build's GPU support, each GPU and its memory) and
                     the offload loopd would plan from loopd.toml (`core.offload`); a
                     refused combination of keys is a problem

Exit status 0 when loopd would start on the file, 1 when it would not, 2 when the
file cannot be read at all (llama-cpp-python compiles every chat template a file
holds, named ones too, as it loads it: one that does not compile stops the load).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jinja2

from boxmaker.core.chat_format import Role, Turn
from boxmaker.core.context_fit import ContextFitError, fit_context, kv_bytes_per_token
from boxmaker.core.dialect import Dialect
from boxmaker.core.errors import StartupError
from boxmaker.core.named_templates import choose_template
from boxmaker.core.runbook import Runbook
from boxmaker.core.template_prompt import TemplatePrompt
from boxmaker.core.template_sandbox import TemplateError
from boxmaker.loopd.backend import read_backend
from boxmaker.loopd.config import LoopdConfig
from boxmaker.loopd.dialects import choose_dialect, self_test, template_prompt
from boxmaker.loopd.markers import (
    LlamaVocabulary,
    build_markers,
    format_markers,
    marker_problems,
    plain_user_defined,
    unlisted,
)
from boxmaker.loopd.model import GIVES_TOOLS, Generation, embedded_model_path, special_text
from boxmaker.loopd.placement import plan

SAMPLE_SYSTEM = "You are a helpful assistant."
SAMPLE = [
    Turn(Role.USER, "What is on my list today?"),
    Turn(Role.MODEL, "Your list has three items."),
    Turn(Role.USER, "Thanks."),
]


class VocabularyModel:
    """The `Model` the dialect needs, over a file's vocabulary alone: it cannot generate."""

    def __init__(self, path: Path) -> None:
        import llama_cpp

        self._llm: Any = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
        self.vocabulary = LlamaVocabulary(self._llm)
        self.metadata: dict[str, str] = dict(self._llm.metadata)
        # the template loopd renders, as `LlamaModel` chooses it (core.named_templates)
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
    ) -> Generation:
        raise RuntimeError("a vocabulary loaded alone cannot generate")


def check_lines(path: Path, config: LoopdConfig) -> tuple[list[str], bool]:
    """The report's lines, and whether loopd would start on the file."""
    model = VocabularyModel(path)
    meta = model.metadata
    arch = meta.get("general.architecture", "unknown")
    lines = [f"model: {path}"]
    context = meta.get(f"{arch}.context_length", "unknown")
    lines.append(f"architecture: {arch}, trained context {context} tokens")
    ok = True
    try:
        dialect, why = choose_dialect(config, model)
    except StartupError as exc:
        return [*lines, f"problem: {exc}"], False
    lines.append(f"chat template: {why}")
    prompt: TemplatePrompt | None = None
    if dialect.name == "template" and model.chat_template is not None:
        try:  # the same template, sandbox and bounds as the dialect's: its facts again
            prompt = template_prompt(config, model, model.chat_template)
        except TemplateError as exc:
            pointer = Runbook.LOOPD_TEMPLATE_REFUSED.pointer
            return [*lines, f"problem: the chat template cannot be used: {exc}; {pointer}"], False
    reasoning = "none"
    if dialect.reasoning is not None:
        opened = ", opened by the prompt" if dialect.opens_reasoning else ""
        reasoning = f"{dialect.reasoning.open} ... {dialect.reasoning.close}{opened}"
    lines.append(
        f"dialect: {dialect.name}, tool calls {call_syntax(dialect, prompt)}, reasoning {reasoning}"
    )
    plain = plain_user_defined(model.vocabulary, model.markers)
    problems = unlisted(model.markers, format_markers(dialect))
    problems += marker_problems(model.vocabulary, model.markers, plain)
    problems += self_test(model, dialect)
    if problems:
        ok = False
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        pointer = Runbook.LOOPD_TAGS_UNEXPECTED.pointer
        lines.append(
            f"problem: marker self-test failed: {'; '.join(problems[:3])}{more}; {pointer}"
        )
    else:
        lines.append(f"markers: {len(model.markers)}, the marker self-test passed")
    lines.append(f"prompt: {compare_prompt(config, model, prompt)}")
    size = os.stat(path).st_size
    kv = kv_bytes_per_token(meta, config.model.kv_type)
    per_thousand = f"{kv * 1000 / 2**20:.1f} MiB" if kv is not None else "unknown"
    lines.append(
        f"memory: weights {size / 2**20:.0f} MiB, KV cache ({config.model.kv_type}) "
        f"{per_thousand} per 1,000 tokens"
    )
    settings = config.model
    try:
        fit = fit_context(
            meta, context=settings.context, memory_mib=settings.memory_mib, kv_type=settings.kv_type
        )
        lines.append(f"context: {fit.describe(settings.memory_mib)}")
    except ContextFitError as exc:
        lines.append(f"problem: {exc}")
        ok = False
    try:
        lines.append(f"placement: {placement_plan(config)}")
    except StartupError as exc:
        lines.append(f"problem: {exc}")
        ok = False
    return lines, ok


def placement_plan(config: LoopdConfig) -> str:
    """Where loopd would run the model: the backend and the offload it plans (StartupError
    when loopd.toml's GPU keys would be refused)."""
    backend = read_backend()
    return f"{backend.describe()}; {plan(config, backend).describe()}"


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
    (`prompt` None: no template is used)."""
    if prompt is None:
        return "rendered by the hand-written format (no template to compare with)"
    try:
        ours = prompt.text(SAMPLE_SYSTEM, SAMPLE)
        theirs = prompt.template.render(
            [
                {"role": "system", "content": SAMPLE_SYSTEM},
                {"role": "user", "content": SAMPLE[0].text},
                {"role": "assistant", "content": SAMPLE[1].text},
                {"role": "user", "content": SAMPLE[2].text},
            ],
            tools=prompt.tools,
            add_generation_prompt=True,
            bos_token=model.bos_text,
            eos_token=model.eos_text,
            now=prompt.now(),
            extra={"enable_thinking": config.model.thinking},
        )
    except TemplateError as exc:
        return f"cannot be compared: {exc}"
    if model.add_bos and model.bos_text and not theirs.startswith(model.bos_text):
        theirs = model.bos_text + theirs  # as the tokenizer adds it (rule 6)
    if ours == theirs:
        return "identical to the template's own rendering"
    at = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), None)
    at = at if at is not None else min(len(ours), len(theirs))
    return (
        f"differs from the template's own rendering at character {at}: loopd "
        f"{ours[at : at + 40]!r}, the template {theirs[at : at + 40]!r} (earlier replies "
        "are replayed as the model wrote them: rule 4 of core.template_prompt)"
    )


def model_path(config: LoopdConfig) -> Path:
    """`[model] path`, or the embedded default (assembled under home if need be)."""
    return Path(config.model.path) if config.model.path else embedded_model_path(config.home)


def run_check(path: Path | None, config: LoopdConfig) -> int:
    """Print the report; the exit status (see the module docstring). `path` None: the
    model loopd.toml names (`[model] path`, or the embedded default)."""
    if path is None:
        as_used = config
        path = model_path(config)
    else:
        model = config.model.model_copy(update={"path": str(path)})
        as_used = config.model_copy(update={"model": model})
    if not path.is_file():
        print(f"loopd: {path} is not a file; name a GGUF model file")
        return 2
    try:
        lines, ok = check_lines(path, as_used)
    except (ValueError, RuntimeError) as exc:  # llama-cpp-python could not read it
        print(f"loopd: {path} cannot be read as a GGUF model: {exc}")
        return 2
    except jinja2.TemplateError as exc:  # llama-cpp-python compiles every template it holds
        reason = " ".join(str(exc).split())[:200]
        print(
            f"loopd: {path} cannot be loaded: llama-cpp-python compiles each of the file's "
            f"chat templates (default and named) as it loads it, and one does not compile "
            f"({reason}); no loopd.toml key gets past that: fix or remove that template in "
            "a copy of the file (gguf-new-metadata --remove-metadata KEY)"
        )
        return 2
    for line in lines:
        print(line)
    return 0 if ok else 1
