"""loopd's console script: `loopd serve`, `loopd probe`, `loopd tags`, `loopd check PATH`
and `loopd demo`, each `--config PATH`.

`serve` first probes the model in a child process (`boxmaker.loopd.probe`: read its
metadata, load it and generate a few tokens, so a build or model that crashes is
reported in one line instead of crashing loopd in a restart loop), unless a probe
passed before on this same build, model, CPU and settings
(`boxmaker.loopd.probe_cache`, whose record keeps the metadata); resolves the
context from the metadata (`boxmaker.core.context_fit`: `[model] context`, 0 = the
trained context bounded by what fits `[model] memory_mib`; logged as
`event=context`, or refused in one line naming the key, by the probe child before
it loads any weight); then
loads it in this process (the embedded default unless `[model] path` names
another GGUF file), checks its chat format with a self-test and its marker list
with another (`boxmaker.loopd.markers`, docs/markers.md; its heavy part runs on
a vocabulary loaded alone, in a thread, while the model loads), connects the tool port to brokerd
and the memory port to memoryd (`[memory]`; new sessions are refused while
memoryd is down, runbook.md#memory-unavailable), and serves loop.sock in the
foreground until SIGTERM. `probe` runs the probe alone (always) and prints what
it found.
`tags` prints the model's marker list (its vocabulary loaded alone). `demo
--socket PATH --workspace PATH` serves a socket of its own with the scripted
demo model (`boxmaker.loopd.demo`) in place of the real one, and no memory
block, for `scripts/demo`'s walk-through. Exit statuses: 0 after a
clean stop (or a probe or tags that worked), 1 when it cannot start (the log says why,
with its runbook pointer), 2 for a configuration error.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from boxmaker import __version__
from boxmaker.core.chat_format import GEMMA, ChatFormat
from boxmaker.core.context_fit import ContextFit, ContextFitError, fit_context
from boxmaker.core.dialect import Dialect
from boxmaker.core.errors import StartupError
from boxmaker.core.layout import link_modes
from boxmaker.core.messages import StatusReport
from boxmaker.core.offload import Offload
from boxmaker.core.runbook import Runbook
from boxmaker.core.sampling import sampling_for
from boxmaker.core.timestamps import format_timestamp
from boxmaker.ipc.role import block_stop_signals, run_role, wait_for_stop
from boxmaker.ipc.server import bind_socket
from boxmaker.loopd.backend import read_backend
from boxmaker.loopd.broker_port import NOT_CONFIGURED, BrokerPort
from boxmaker.loopd.config import LoopdConfig, load_config
from boxmaker.loopd.demo import DemoModel
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
from boxmaker.loopd.memory_port import MemoryPort
from boxmaker.loopd.model import LlamaModel, Model, embedded_model_path
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
from boxmaker.loopd.serve import LoopServer
from boxmaker.loopd.session_log import SessionLogs
from boxmaker.loopd.turn import TurnLimits, TurnLoop

log = logging.getLogger("loopd")

TAGS_POINTER = Runbook.LOOPD_TAGS_UNEXPECTED.pointer


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


def check_tags(
    model: LlamaModel, chat_format: ChatFormat | Dialect, started: TagCheck | None = None
) -> None:
    """The marker self-test (`boxmaker.loopd.markers.check_markers`): StartupError,
    one line naming the first few problems, when it fails. With `started`, its heavy
    part is the one `start_tag_check` ran, for the same markers as the model's."""
    required = format_markers(chat_format)
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


def check_required_tags(model: LlamaModel, chat_format: ChatFormat | Dialect) -> None:
    """The cheap part of the marker self-test, for a start whose heavy part is remembered
    (`loopd.probe_cache`): the chat format's markers must be in the model's list."""
    problems = unlisted(model.markers, format_markers(chat_format))
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


def resolve_context(config: LoopdConfig, metadata: Mapping[str, str] | None = None) -> ContextFit:
    """The context loopd gives the model (`core.context_fit`), from its `metadata` (the
    probe's; None: read now, in this process, the vocabulary loaded alone: after a
    probe passed, or in tests), logged in one line (`event=context`); StartupError,
    one line naming `[model] context` or `memory_mib`, when refused."""
    if metadata is None:
        metadata = load_vocabulary(model_path(config)).metadata
    settings = config.model
    try:
        fit = fit_context(
            metadata,
            context=settings.context,
            memory_mib=settings.memory_mib,
            kv_type=settings.kv_type,
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
    offload = plan(config)
    settings = config.model
    asked = f"context={settings.context} memory_mib={settings.memory_mib}"
    key = (
        None
        if command is not None
        else probe_key(path, settings.threads, f"{asked} {to_argument(offload)}")
    )
    if key is not None and not again:
        passed = remembered(config.home, key)
        if passed is not None:
            log.info("event=model_probe_remembered %s", record_path(config.home))
            return ProbeResult(passed[0], 0.0, None, metadata=remembered_metadata(config.home, key))
    result = run_probe(
        command
        if command is not None
        else probe_command(path, settings.threads, settings.context, settings.memory_mib, offload)
    )
    if result.problem is not None:
        raise StartupError(result.problem)
    if key is not None:
        try:
            remember(config.home, key, result.tokens, result.seconds, metadata=result.metadata)
        except OSError as exc:  # the next start probes again: slower, never weaker
            log.warning("event=probe_not_remembered %s", exc)
    return result


def load_model(
    config: LoopdConfig, offload: Offload | None = None, fit: ContextFit | None = None
) -> LlamaModel:
    """The model of `config`, loaded here with `offload` (None: planned now) at the
    context of `fit` (None: resolved now), its saved sessions within what `fit` leaves
    of `[model] memory_mib`."""
    path = model_path(config)
    if fit is None:
        fit = resolve_context(config)
    settings = config.model
    owner = partial(
        sampling_for,
        temperature=settings.temperature,
        top_p=settings.top_p,
        top_k=settings.top_k,
        repeat_penalty=settings.repeat_penalty,
    )
    model = LlamaModel(
        path,
        context=fit.context,
        threads=settings.threads,
        seed=settings.seed,
        sampling=owner(None),
        offload=plan(config) if offload is None else offload,
        saved_bytes=fit.saved_bytes,
    )
    model.sampling = owner(model.architecture)  # the family's, once known
    return model


def serve(config: LoopdConfig, probe_argv: Sequence[str] | None = None) -> int:
    """Serve until SIGTERM. `probe_argv` replaces the probe child's command (tests)."""
    probed = probe(config, probe_argv, again=False)
    log.info("event=model_probed tokens=%d seconds=%.1f", probed.tokens, probed.seconds)
    fit = resolve_context(config, probed.metadata)
    path = model_path(config)
    tags_passed = tags_key(path)
    remembered_tags = remembered(config.home, tags_passed, TAGS_RECORD) is not None
    tags = None if remembered_tags else start_tag_check(config)  # while the model loads
    backend = read_backend()
    offload = plan(config, backend)
    model = load_model(config, offload, fit)
    placed = placement(backend, offload, model.offloaded)
    log.info("event=model_placed %s", placed)
    chat_format, chosen = choose_dialect(config, model)
    model.show(chat_format.shown)
    log.info("event=dialect %s syntax=%s", chosen, chat_format.syntax)
    problems = self_test(model, chat_format)
    if problems:
        raise StartupError(f"self-test failed: {'; '.join(problems)}; {SELFTEST_POINTER}")
    if tags is None:
        log.info("event=markers_remembered %s", record_path(config.home, TAGS_RECORD))
        check_required_tags(model, chat_format)
    else:
        check_tags(model, chat_format, tags)
        try:
            remember(config.home, tags_passed, len(model.markers), 0.0, TAGS_RECORD)
        except OSError as exc:  # the next start checks again: slower, never weaker
            log.warning("event=tags_not_remembered %s", exc)
    detail = f"model {config.model.path or 'embedded'}, format {chat_format.name}; {placed}"
    limits = turn_limits(config, fit.context)
    markers = tuple(m.text for m in model.markers)
    memory_socket = config.memory_socket
    memory = None
    if memory_socket is None:
        log.warning('event=no_memory the memory block is off ([memory] socket = "none")')
    else:
        memory = MemoryPort(memory_socket, config.memory.timeout_ms)
    return serve_turns(
        config, model, chat_format, config.loop_socket, detail, limits, markers, memory
    )


def turn_limits(config: LoopdConfig, context: int | None = None) -> TurnLimits:
    """`[turn]` and `[model]`'s budgets, none past `context`: the one loopd resolved
    (`resolve_context`); None: `[model] context` as set, which must then be a number
    (ValueError for 0, which only the model's metadata turns into one). A result's,
    a summary's and the memory block's budgets: 0 = an eighth of the context; never
    more than a quarter."""
    if context is None:
        context = config.model.context
        if context == 0:
            raise ValueError("[model] context = 0: give turn_limits the resolved context")
    turn = config.turn
    return TurnLimits(
        max_tool_calls=turn.max_tool_calls,
        max_tokens=min(turn.max_tokens, context),
        reply_tokens=min(config.model.max_tokens, context),
        reasoning_tokens=min(config.model.reasoning_tokens, context),
        result_tokens=min(turn.result_tokens or context // 8, context // 4),
        context=context,
        compact_at=turn.compact_at,
        summary_tokens=min(turn.summary_tokens or context // 8, context // 4),
        keep_turns=turn.keep_turns,
        block_tokens=min(config.memory.block_tokens or context // 8, context // 4),
    )


def demo(config: LoopdConfig, socket_path: Path, workspace: Path) -> int:
    """Serve `socket_path` with the scripted demo model until SIGTERM (`scripts/demo`)."""
    if socket_path == config.loop_socket:
        raise StartupError("the demo needs a socket of its own, not loopd's loop.sock")
    model = DemoModel(workspace)
    detail = f"the demo model (scripted), workspace {workspace}"
    # its tokens are characters: [model] max_tokens and [turn] max_tokens, set for
    # the real model, would cut its replies short
    limits = TurnLimits(config.turn.max_tool_calls, max_tokens=64_000, reply_tokens=64_000)
    return serve_turns(config, model, GEMMA, socket_path, detail, limits, tuple(GEMMA.markers))


def serve_turns(
    config: LoopdConfig,
    model: Model,
    chat_format: ChatFormat | Dialect,
    socket_path: Path,
    detail: str,
    limits: TurnLimits,
    markers: Sequence[str] = (),
    memory: MemoryPort | None = None,
) -> int:
    """The turn loop over `model`, its tool port to brokerd and `memory` (None: no memory
    block), on `socket_path` until SIGTERM."""
    broker_socket = config.broker_socket
    port = None
    if broker_socket is None:
        log.warning("event=no_broker %s; %s", NOT_CONFIGURED, Runbook.BROKER_UNAVAILABLE.pointer)
    else:
        port = BrokerPort(broker_socket, config.broker.timeout_ms)
    turns = TurnLoop(
        model, chat_format, SessionLogs(config.home), port, limits, markers=markers, memory=memory
    )
    block_stop_signals()  # before any thread starts: see boxmaker.ipc.role
    listening = bind_socket(socket_path, link_modes(config.sockets.group_access), backlog=16)
    started = format_timestamp(datetime.now(UTC))

    def status() -> StatusReport:
        return StatusReport(role="loopd", version=__version__, started=started, detail=detail)

    server = LoopServer(turns, listening, status)
    threading.Thread(target=server.serve, name="accept-loop", daemon=True).start()
    log.info(
        "event=serving loop=%s broker=%s memory=%s format=%s",
        socket_path,
        broker_socket,
        memory.path if memory is not None else None,
        chat_format.name,
    )
    log.info("event=stopping signal=%s", wait_for_stop())
    server.stopping.set()
    listening.close()
    socket_path.unlink(missing_ok=True)
    log.info("event=stopped")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="loopd", description="boxmaker's agent loop")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = commands.add_parser("serve", help="serve loop.sock in the foreground")
    run.add_argument("--config", type=Path, help="loopd.toml (default: every default)")
    tags = commands.add_parser(
        "tags", help="print the model's markers: id, text, why (docs/markers.md)"
    )
    tags.add_argument("--config", type=Path, help="loopd.toml (default: every default)")
    check = commands.add_parser(
        "probe", help="load the model in a child process and generate a few tokens"
    )
    check.add_argument("--config", type=Path, help="loopd.toml (default: every default)")
    checking = commands.add_parser(
        "check", help="what loopd would do with a GGUF file (bxctl model check runs this)"
    )
    checking.add_argument(
        "path", type=Path, nargs="?", help="the GGUF model file (default: loopd.toml's model)"
    )
    checking.add_argument("--config", type=Path, help="loopd.toml (default: every default)")
    walk = commands.add_parser(
        "demo", help="serve a socket of its own with the scripted demo model (scripts/demo)"
    )
    walk.add_argument("--config", type=Path, help="loopd.toml (default: every default)")
    walk.add_argument("--socket", type=Path, required=True, help="the demo's loop socket")
    walk.add_argument(
        "--workspace", type=Path, required=True, help="the folder the example grants point at"
    )
    args = parser.parse_args(argv)
    return run_role(
        "loopd", lambda: load_config(args.config, os.environ), partial(run_command, args)
    )


def run_command(args: argparse.Namespace, config: LoopdConfig) -> int:
    """The command `args` names, with `config`."""
    if args.command == "probe":
        probed = probe(config)
        fit = resolve_context(config, probed.metadata)
        print(f"loopd: the model answered: {probed.tokens} tokens in {probed.seconds:.1f} s")
        print(f"loopd: {fit.describe(config.model.memory_mib)}")
        if probed.placed:
            print(f"loopd: {probed.placed}")
        checked = check_marker_list(config)
        print(f"loopd: the marker self-test passed: {checked} markers")
        return 0
    if args.command == "tags":
        return print_tags(config)
    if args.command == "check":
        from boxmaker.loopd.model_check import run_check  # llama-cpp-python, only here

        return run_check(args.path.absolute() if args.path else None, config)
    if args.command == "demo":
        return demo(config, args.socket.absolute(), args.workspace.absolute())
    return serve(config)


if __name__ == "__main__":
    sys.exit(main())
