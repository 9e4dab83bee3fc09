"""loopd's console script: `loopd serve`, `loopd probe`, `loopd tags`, `loopd check PATH`
and `loopd demo`, each `--config PATH`.

`serve` starts the model (`boxmaker.loopd.startup`: the probe in a child process,
the context, the model loaded here, its dialect and the marker self-test), then
serves loop.sock in the foreground until SIGTERM (`boxmaker.loopd.serve.Loopd`,
run by `boxmaker.ipc.shell`), with the tool port to brokerd and the memory port
to memoryd (`[memory]`; new sessions are refused while memoryd is down,
runbook.md#memory-unavailable). `probe` runs the probe alone (always), then the
marker self-test on the vocabulary, and prints what it found (the model and its LoRA
adapter among it: `boxmaker.loopd.adapter`). `tags` prints the
model's marker list (its vocabulary loaded alone). `check` says what loopd would
do with a GGUF file (`boxmaker.loopd.model_check`), in a child process bounded in
time (`--timeout SECONDS`) and memory (`boxmaker.loopd.check_process`). `demo --socket PATH
--workspace PATH` serves a socket of its own with the scripted demo model
(`boxmaker.loopd.demo`) in place of the real one, and no memory block, for
`scripts/demo`'s walk-through. Exit statuses: 0 after a clean stop (or a probe
or tags that worked), 1 when it cannot start (the log says why, with its runbook
pointer), 2 for a configuration error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from boxmaker.core.display.escape import escape_arguments
from boxmaker.core.errors import StartupError
from boxmaker.core.model.chat_format import GEMMA
from boxmaker.core.model.dialect import Dialect, from_format
from boxmaker.ipc.role import CommandLine
from boxmaker.ipc.shell import serve_daemon
from boxmaker.loopd.adapter import Adapter, describe
from boxmaker.loopd.check_process import CHECK_TIMEOUT_S, run_check
from boxmaker.loopd.config import LoopdConfig, load_config
from boxmaker.loopd.demo import DemoModel
from boxmaker.loopd.limits import TurnLimits
from boxmaker.loopd.serve import Loopd
from boxmaker.loopd.served_probe import probe_served
from boxmaker.loopd.startup import (
    check_marker_list,
    model_adapter,
    print_tags,
    probe,
    resolve_context,
    start_model,
)


def serve(config: LoopdConfig, probe_argv: Sequence[str] | None = None) -> int:
    """Serve until SIGTERM. `probe_argv` replaces the probe child's command (tests)."""
    loaded = start_model(config, probe_argv)
    detail = status_detail(config, loaded.model.adapter, loaded.dialect.name, loaded.placed)
    limits = turn_limits(config, loaded.fit.context, reasons(loaded.dialect))
    daemon = Loopd(config, loaded.model, loaded.dialect, limits, detail)
    return serve_daemon(daemon, daemon.serving())


def status_detail(
    config: LoopdConfig, adapter: Adapter | None, format_name: str, placed: str
) -> str:
    """What `status` says of the model (`bxctl status` prints it): the model, its LoRA
    adapter (`loopd.adapter.describe`), the chat format and where it runs."""
    model = config.model.path or "embedded"
    served = config.model.backend != "in-process"
    adapted = "the server's" if served else describe(adapter)
    return f"model {model}, adapter {adapted}, format {format_name}; {placed}"


# A reply's budget with `[model] max_tokens = 0`: a model that reasons spends
# thousands of tokens before it answers (issue 25); one that does not needs few, and a
# runaway reply (a base model repeating its prompt) must end soon. The embedded Gemma 3
# 270M writes about 65 tokens a second on 2 CPU cores (llama-cpp-python, measured):
# 1,024 tokens are about 16 s there, under 60 s even at a quarter of that speed.
REASONING_REPLY_TOKENS = 16_384
PLAIN_REPLY_TOKENS = 1_024


def reasons(dialect: Dialect) -> bool:
    """Whether the model writes reasoning: its dialect has reasoning markers."""
    return dialect.reasoning is not None


def turn_limits(
    config: LoopdConfig, context: int | None = None, reasoning: bool = True
) -> TurnLimits:
    """`[turn]` and `[model]`'s budgets, none past `context`: the one loopd resolved
    (`resolve_context`); None: `[model] context` as set, which must then be a number
    (ValueError for 0, which only the model's metadata turns into one). A reply's
    budget: `[model] max_tokens` as set, or for 0 sized to the model (`reasoning`:
    REASONING_REPLY_TOKENS, else PLAIN_REPLY_TOKENS). A result's, a summary's and
    the memory block's budgets: 0 = an eighth of the context; never more than a
    quarter."""
    if context is None:
        context = config.model.context
        if context == 0:
            raise ValueError("[model] context = 0: give turn_limits the resolved context")
    turn = config.turn
    reply = config.model.max_tokens
    sized = REASONING_REPLY_TOKENS if reasoning else PLAIN_REPLY_TOKENS
    return TurnLimits(
        max_tool_calls=turn.max_tool_calls,
        max_tokens=min(turn.max_tokens, context),
        reply_tokens=min(reply or sized, context),
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
    # the real model, would cut its replies short; and each of its replies is written
    # whole in one generation, never continued, so it is never checked for repetition
    limits = TurnLimits(
        config.turn.max_tool_calls,
        max_tokens=64_000,
        reply_tokens=64_000,
        repeat_check_tokens=64_000,
    )
    daemon = Loopd(
        config, model, from_format(GEMMA), limits, detail, socket_path=socket_path, memory=False
    )
    return serve_daemon(daemon, daemon.serving())


def main(argv: Sequence[str] | None = None) -> int:
    line = CommandLine("loopd", "boxmaker's agent loop")
    line.command("serve", "serve loop.sock in the foreground")
    line.command("tags", "print the model's markers: id, text, why (docs/markers.md)")
    line.command("probe", "load the model in a child process and generate a few tokens")
    checking = line.command(
        "check", "what loopd would do with a GGUF file (bxctl model check runs this)"
    )
    checking.add_argument(
        "path", type=Path, nargs="?", help="the GGUF model file (default: loopd.toml's model)"
    )
    checking.add_argument(
        "--timeout",
        type=_seconds,
        default=CHECK_TIMEOUT_S,
        metavar="SECONDS",
        help=f"stop the check after this long (default {CHECK_TIMEOUT_S:g})",
    )
    walk = line.command(
        "demo", "serve a socket of its own with the scripted demo model (scripts/demo)"
    )
    walk.add_argument("--socket", type=Path, required=True, help="the demo's loop socket")
    walk.add_argument(
        "--workspace", type=Path, required=True, help="the folder the example grants point at"
    )
    return line.run(argv, load_config, run_command)


def _seconds(text: str) -> float:
    """A positive number of seconds (argparse's type for `--timeout`)."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < 86_400:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (0 to 86400)")
    return value


def run_command(args: argparse.Namespace, config: LoopdConfig) -> int:
    """The command `args` names, with `config`."""
    if args.command == "probe" and config.model.backend != "in-process":
        served = probe_served(config)
        print(f"loopd: the server answered: {served.tokens} tokens in {served.seconds:.1f} s")
        model = escape_arguments(config.model.path or "embedded")
        print(f"loopd: model {model}, adapter the server's; {served.placed}")
        checked = check_marker_list(config)
        print(f"loopd: the marker self-test passed: {checked} markers")
        return 0
    if args.command == "probe":
        probed = probe(config)
        fit = resolve_context(config, probed.metadata)
        adapter = describe(model_adapter(config, probed.metadata))
        print(f"loopd: the model answered: {probed.tokens} tokens in {probed.seconds:.1f} s")
        model = escape_arguments(config.model.path or "embedded")
        print(f"loopd: model {model}, adapter {adapter}")
        print(f"loopd: {fit.describe(config.model.memory_mib)}")
        if probed.placed:
            print(f"loopd: {probed.placed}")
        checked = check_marker_list(config)
        print(f"loopd: the marker self-test passed: {checked} markers")
        return 0
    if args.command == "tags":
        return print_tags(config)
    if args.command == "check":  # in a child process, bounded: loopd.check_process
        path = args.path.absolute() if args.path else None
        return run_check(path, config, args.config, args.timeout)
    if args.command == "demo":
        return demo(config, args.socket.absolute(), args.workspace.absolute())
    return serve(config)


if __name__ == "__main__":
    sys.exit(main())
