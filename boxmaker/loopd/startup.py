"""What `loopd serve` does before it binds loop.sock, and `loopd probe` and `loopd tags`.

I/O: the model file (read, loaded here, or probed in a child process), the probe
cache under `<home>` (`boxmaker.loopd.probe_cache`), a thread for the marker
self-test's heavy part, and the log. `start_model`, in order:

    1. the probe (`boxmaker.loopd.probe`): the model's metadata read, the model
       loaded and a few tokens generated in a child process, so a build or model
       that crashes is reported in one line instead of crashing loopd in a
       restart loop; unless a probe passed before on this same build, model, CPU
       and settings (`boxmaker.loopd.probe_cache`, whose record keeps the
       metadata); `event=model_probed`;
    2. the context, from the metadata and the offload planned for this build
       (`boxmaker.core.model.context_fit`: `[model] context`, 0 = the trained context
       bounded by loopd's most and by what fits `[model] memory_mib`, counting
       llama.cpp's per-token state besides the KV cache; `event=context`, saying
       why, or refused in one line naming the key, by the probe child before it
       loads any weight);
    3. the heavy part of the marker self-test (`boxmaker.loopd.markers`,
       docs/markers.md), on a vocabulary loaded alone, in a thread, while the
       model loads; unless it passed before on this model;
    4. the model loaded in this process (the embedded default unless `[model]
       path` names another GGUF file), where the build and `[model]` put it
       (`event=model_placed`), with the LoRA adapter `[model] adapter` names
       (`boxmaker.loopd.adapter`: checked before the probe child runs, by the
       child against the model's architecture, and again here; `event=adapter`);
    5. its dialect (`boxmaker.loopd.dialects`: `event=dialect`) and the chat
       format's self-test; then the marker self-test, whose pass is remembered.

Any of them failing is a StartupError: one line, with its runbook pointer.

With `[model] backend = "llama-server"` or `"openai-completions"` (`start_served`),
steps 1, 2 and 4 are the server's; loopd holds it to the model file's vocabulary
instead (`boxmaker.loopd.server_check`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from boxmaker.core.errors import StartupError
from boxmaker.core.model.context_fit import ContextFit, ContextFitError, fit_context
from boxmaker.core.model.dialect import Dialect
from boxmaker.core.model.offload import Offload
from boxmaker.core.model.sampling import Sampling, sampling_for
from boxmaker.core.runbook import Runbook
from boxmaker.loopd.adapter import Adapter, AdapterFile, check_adapter, resolve
from boxmaker.loopd.adapter import describe as describe_adapter
from boxmaker.loopd.backend import read_backend
from boxmaker.loopd.config import LoopdConfig
from boxmaker.loopd.dialects import SELFTEST_POINTER, choose_dialect, self_test
from boxmaker.loopd.markers import (
    Marker,
    build_markers,
    check_markers,
    describe,
    format_markers,
    load_vocabulary,
    marker_problems,
    plain_user_defined,
    unlisted,
)
from boxmaker.loopd.model import LlamaModel, LoadedModel, embedded_model_path
from boxmaker.loopd.placement import placement, plan, to_argument
from boxmaker.loopd.probe import ProbeResult, probe_command, run_probe
from boxmaker.loopd.probe_cache import (
    TAGS_RECORD,
    probe_key,
    record_path,
    remember,
    remembered,
    remembered_metadata,
    tags_key,
)
from boxmaker.loopd.rpc import register_configured
from boxmaker.loopd.server_link import ServerLink
from boxmaker.loopd.server_model import ServerModel

log = logging.getLogger("loopd")

TAGS_POINTER = Runbook.LOOPD_TAGS_UNEXPECTED.pointer


@dataclass(frozen=True)
class Loaded:
    """The model `start_model` loaded and checked, and what loopd serves it with."""

    model: LoadedModel
    dialect: Dialect
    fit: ContextFit  # the context it resolved
    placed: str  # where the model runs, as `event=model_placed` said


def start_model(config: LoopdConfig, probe_argv: Sequence[str] | None = None) -> Loaded:
    """Steps 1 to 5 above. `probe_argv` replaces the probe child's command (tests)."""
    if config.model.backend != "in-process":
        return start_served(config)
    probed = probe(config, probe_argv, again=False)
    log.info("event=model_probed tokens=%d seconds=%.1f", probed.tokens, probed.seconds)
    register_configured(config)  # the rpc-servers' devices first (registered by the probe's plan)
    backend = read_backend()
    offload = plan(config, backend)
    fit = resolve_context(config, probed.metadata, offload)
    tags_passed = tags_key(model_path(config))
    remembered_tags = remembered(config.home, tags_passed, TAGS_RECORD) is not None
    tags = None if remembered_tags else start_tag_check(config)  # while the model loads
    model = load_model(config, offload, fit, probed.metadata)
    placed = placement(backend, offload, model.offloaded)
    log.info("event=model_placed %s", placed)
    log.info("event=adapter %s", describe_adapter(model.adapter))
    return Loaded(model, speak(config, model, tags, tags_passed), fit, placed)


def start_served(config: LoopdConfig) -> Loaded:
    """`[model] backend = "llama-server"` or `"openai-completions"`: steps 1, 2 and 4
    are the server's (it loaded the model, its context is its own, so is where it
    runs). loopd reads the model file's vocabulary here, holds the server to it
    (`server_check`), and goes on with step 3 and 5 as in-process."""
    settings = config.model
    tags_passed = tags_key(model_path(config))
    remembered_tags = remembered(config.home, tags_passed, TAGS_RECORD) is not None
    tags = None if remembered_tags else start_tag_check(config)
    link = ServerLink(settings.server, timeout_s=settings.server_timeout_ms / 1000)
    owner = owner_sampling(config)
    model = ServerModel(
        model_path(config),
        link=link,
        seed=settings.seed,
        sampling=owner(None),
        api="openai-completions" if settings.backend == "openai-completions" else "llama-server",
    )
    # the embedded model is served with its shipped adapter (`--lora`, docs/backends.md)
    embedded = not settings.path and settings.adapter == "auto"
    model.sampling = owner(model.architecture, adapted=embedded)
    fit = ContextFit(
        context=model.context,
        trained=None,
        kv_bytes_per_token=None,
        other_bytes_per_token=None,
        kv_bytes=None,
        other_bytes=None,
        saved_bytes=None,
        why="the server's own",
    )
    placed = (
        f"backend={settings.backend} server={link.address} context={model.context} "
        f"file={model.served_file}"
    )
    log.info("event=model_placed %s", placed)
    log.info("event=adapter the server's (llama-server --lora, vLLM --lora-modules)")
    return Loaded(model, speak(config, model, tags, tags_passed), fit, placed)


def speak(
    config: LoopdConfig, model: LoadedModel, tags: TagCheck | None, tags_passed: str
) -> Dialect:
    """Step 5: the model's dialect, the chat format's self-test, the marker self-test
    (its heavy part `tags`, or None where it passed before), whose pass is remembered."""
    dialect, chosen = choose_dialect(config, model)
    model.show(dialect.shown)
    log.info("event=dialect %s syntax=%s", chosen, dialect.syntax)
    problems = self_test(model, dialect)
    if problems:
        raise StartupError(f"self-test failed: {'; '.join(problems)}; {SELFTEST_POINTER}")
    if tags is None:
        log.info("event=markers_remembered %s", record_path(config.home, TAGS_RECORD))
        check_required_tags(model, dialect)
    else:
        check_tags(model, dialect, tags)
        try:
            remember(config.home, tags_passed, len(model.markers), 0.0, TAGS_RECORD)
        except OSError as exc:  # the next start checks again: slower, never weaker
            log.warning("event=tags_not_remembered %s", exc)
    return dialect


TagCheck = Future[tuple[tuple[Marker, ...], list[str]]]


def start_tag_check(config: LoopdConfig) -> TagCheck:
    """The heavy part of the marker self-test (`markers.marker_problems`: every marker
    tokenized twice, about a second for Gemma's six thousand), on a vocabulary loaded
    alone, in a thread: it runs while the model loads (llama.cpp lets go of the GIL)."""
    path = model_path(config)

    def work() -> tuple[tuple[Marker, ...], list[str]]:
        vocabulary = load_vocabulary(path)
        markers = build_markers(vocabulary)
        plain = plain_user_defined(vocabulary, markers)
        return markers, marker_problems(vocabulary, markers, plain)

    pool = ThreadPoolExecutor(1, thread_name_prefix="tag-check")
    try:
        return pool.submit(work)
    finally:
        pool.shutdown(wait=False)


def check_tags(model: LoadedModel, dialect: Dialect, started: TagCheck | None = None) -> None:
    """The marker self-test (`boxmaker.loopd.markers.check_markers`): StartupError,
    one line naming the first few problems, when it fails. With `started`, its heavy
    part is the one `start_tag_check` ran, for the same markers as the model's."""
    required = format_markers(dialect)
    if started is None:
        problems = check_markers(model, model.markers, required, model.plain_tokens)
    else:
        markers, heavy = started.result()
        problems = unlisted(model.markers, required) + heavy
        if markers != model.markers:
            problems.append("the vocabulary read alone lists other markers than the model's")
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise StartupError(
            f"marker self-test failed: {'; '.join(problems[:3])}{more}; {TAGS_POINTER}"
        )
    log.info("event=markers_checked markers=%d", len(model.markers))


def check_marker_list(config: LoopdConfig) -> int:
    """`loopd probe`'s second half: the heavy part of the marker self-test on the
    vocabulary alone, remembered when it passes (so `serve` need not run it again);
    StartupError when it fails. How many markers there are."""
    markers, problems = start_tag_check(config).result()
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise StartupError(
            f"marker self-test failed: {'; '.join(problems[:3])}{more}; {TAGS_POINTER}"
        )
    try:
        remember(config.home, tags_key(model_path(config)), len(markers), 0.0, TAGS_RECORD)
    except OSError as exc:
        log.warning("event=tags_not_remembered %s", exc)
    return len(markers)


def check_required_tags(model: LoadedModel, dialect: Dialect) -> None:
    """The cheap part of the marker self-test, for a start whose heavy part is remembered
    (`loopd.probe_cache`): the chat format's markers must be in the model's list."""
    problems = unlisted(model.markers, format_markers(dialect))
    if problems:
        raise StartupError(f"marker self-test failed: {'; '.join(problems[:3])}; {TAGS_POINTER}")


def print_tags(config: LoopdConfig) -> int:
    """`loopd tags`: the model's markers, one a line (id, text as data, why)."""
    markers = build_markers(load_vocabulary(model_path(config)))
    for line in describe(markers):
        print(line)
    print(f"loopd: {len(markers)} markers")
    return 0


def model_path(config: LoopdConfig) -> Path:
    path = Path(config.model.path) if config.model.path else embedded_model_path(config.home)
    if not path.is_file():
        raise StartupError(f"the model file {path} does not exist; check [model] path")
    return path


def adapter_file(config: LoopdConfig) -> AdapterFile | None:
    """The LoRA adapter `[model] adapter` names for `[model] path`'s model, unchecked."""
    return resolve(config.model.adapter, config.model.path)


def model_adapter(config: LoopdConfig, metadata: Mapping[str, str] | None = None) -> Adapter | None:
    """The adapter of `config`, checked against the model's architecture, from its
    `metadata` (the probe's; None: read now, the vocabulary loaded alone, only where
    there is an adapter, and only once the file passed the checks that need no
    architecture); None for none; StartupError, one line, when it is refused."""
    file = adapter_file(config)
    if file is None:
        return None
    if metadata is None:
        check_adapter(file, None)  # a missing shipped file is refused before any load
        metadata = load_vocabulary(model_path(config)).metadata
    return check_adapter(file, metadata.get("general.architecture", ""))


def resolve_context(
    config: LoopdConfig, metadata: Mapping[str, str] | None = None, offload: Offload | None = None
) -> ContextFit:
    """The context loopd gives the model (`core.model.context_fit`), from its `metadata` (the
    probe's; None: read now, in this process, the vocabulary loaded alone: after a
    probe passed, or in tests) and `offload` (None: planned now), logged in one line
    with why (`event=context`); StartupError, one line naming `[model] context` or
    `memory_mib`, when refused."""
    if metadata is None:
        metadata = load_vocabulary(model_path(config)).metadata
    settings = config.model
    try:
        fit = fit_context(
            metadata,
            context=settings.context,
            memory_mib=settings.memory_mib,
            offload=plan(config) if offload is None else offload,
        )
    except ContextFitError as exc:
        raise StartupError(str(exc)) from exc
    log.info("event=context %s", fit.describe(settings.memory_mib))
    return fit


def probe(
    config: LoopdConfig, command: Sequence[str] | None = None, *, again: bool = True
) -> ProbeResult:
    """The model probe in a child process, at the context it resolves as loopd does;
    StartupError if the model crashed or said nothing, or the context cannot be
    honoured. With `again` false, a probe that passed before on this same build,
    model, CPU and settings (`loopd.probe_cache`) stands, with the metadata it
    recorded, and no child runs. `command` (tests) replaces the child and is never
    remembered."""
    path = model_path(config)
    offload = plan(config)  # loopd.toml's GPU keys are refused first
    adapter = adapter_file(config)
    if adapter is not None:  # a missing or damaged shipped file, a file that is no adapter
        check_adapter(adapter, None)  # (the child checks the architecture)
    settings = config.model
    asked = f"context={settings.context} memory_mib={settings.memory_mib}"
    applied = None if adapter is None else adapter.path
    key = (
        None
        if command is not None
        else probe_key(path, settings.threads, f"{asked} {to_argument(offload)}", applied)
    )
    if key is not None and not again:
        passed = remembered(config.home, key)
        if passed is not None:
            log.info("event=model_probe_remembered %s", record_path(config.home))
            return ProbeResult(passed[0], 0.0, None, metadata=remembered_metadata(config.home, key))
    result = run_probe(
        command
        if command is not None
        else probe_command(
            path, settings.threads, settings.context, settings.memory_mib, offload, adapter
        )
    )
    if result.problem is not None:
        raise StartupError(result.problem)
    if key is not None:
        try:
            remember(config.home, key, result.tokens, result.seconds, metadata=result.metadata)
        except OSError as exc:  # the next start probes again: slower, never weaker
            log.warning("event=probe_not_remembered %s", exc)
    return result


def owner_sampling(config: LoopdConfig) -> Callable[..., Sampling]:
    """`sampling_for` with every sampling key the owner set in `[model]`."""
    settings = config.model
    return partial(
        sampling_for,
        temperature=settings.temperature,
        top_p=settings.top_p,
        top_k=settings.top_k,
        repeat_penalty=settings.repeat_penalty,
    )


def load_model(
    config: LoopdConfig,
    offload: Offload | None = None,
    fit: ContextFit | None = None,
    metadata: Mapping[str, str] | None = None,
) -> LlamaModel:
    """The model of `config`, loaded here with `offload` (None: planned now) at the
    context of `fit` (None: resolved now), its saved sessions within what `fit` leaves
    of `[model] memory_mib`, with the adapter `[model] adapter` names, checked here
    against the model's `metadata` (`model_adapter`; StartupError when refused)."""
    path = model_path(config)
    adapter = model_adapter(config, metadata)
    if offload is None:
        offload = plan(config)
    if fit is None:
        fit = resolve_context(config, offload=offload)
    settings = config.model
    owner = owner_sampling(config)
    model = LlamaModel(
        path,
        context=fit.context,
        threads=settings.threads,
        seed=settings.seed,
        sampling=owner(None),
        offload=offload,
        saved_bytes=fit.saved_bytes,
        adapter=adapter,
    )
    # the family's, once known; the embedded model's own with its shipped adapter
    model.sampling = owner(model.architecture, adapted=adapter is not None and adapter.shipped)
    return model
