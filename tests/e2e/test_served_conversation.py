"""One whole conversation, in-process and on llama-server: the same ids (issue 41).

The embedded Gemma 3 270M with its shipped adapter acts by itself: asked to read a
file it calls read_file, through the real brokerd (`backend = "bwrap"`: the read
runs in the sandbox, the audit log written before), and answers from the result. The
conversation goes on until loopd compacts it, then loopd is started again over the
same home and the session resumed. It runs three times over the same workspace path
and a fixed clock: with the model in loopd's process, on a real llama-server (built
from the llama.cpp llama-cpp-python vendors, `--lora` with the shipped adapter,
`--swa-full` as in-process) through its `/completion`, and through its OpenAI
`/v1/completions`. Greedy, the same seed: every reply's ids, every call and result,
and the compaction's summary must be the same in all three logs.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from support.llama import require_llama_cpp
from support.llama_server import running_server
from support.skips import skip_or_fail

from boxmaker.core.home.layout import Home
from boxmaker.core.model.sampling import ADAPTED
from boxmaker.core.wire.loop import ContextCompactedEvent, ToolCallStartedEvent, TurnDone, TurnEvent
from boxmaker.loopd.adapter import check_adapter, shipped_adapter
from boxmaker.loopd.config import LoopdConfig, ModelSection, PathsSection, TurnSection
from boxmaker.loopd.dialects import choose_dialect
from boxmaker.loopd.main import turn_limits
from boxmaker.loopd.model import LlamaModel, LoadedModel, embedded_model_path
from boxmaker.loopd.server_link import ServerLink
from boxmaker.loopd.server_model import Api, ServerModel
from boxmaker.loopd.session_log import CompactionEntry, ModelEntry, SessionLogs, ToolEntry
from boxmaker.sandbox.bwrap import BwrapRuntime
from boxmaker.testing.daemons import InProcessLoopd, start_loopd
from boxmaker.testing.homes import make_home, verify_log, write_config, write_grant
from boxmaker.testing.processes import DaemonProcess

pytestmark = [pytest.mark.e2e, pytest.mark.model, pytest.mark.slow]

require_llama_cpp("the served conversation on the embedded model")
MISSING = BwrapRuntime.preflight()
if MISSING:
    skip_or_fail("bubblewrap cannot run here: " + "; ".join(MISSING), allow_module_level=True)

CONTEXT = 1_536
SEED = 4242
SESSION = "served-1"
WORKSPACE = Path("/tmp/bx-served-ws")  # one path in every run: it is in the prompts
CLOCK = datetime(2026, 12, 5, 9, 30, tzinfo=UTC)
NOTES = {
    "rehearsal.md": "# Rehearsal\n\nThe choir rehearsal starts at 19:30 in the basement hall.\n"
    "Bring the green folder and a pencil.\n" + "Practice the second verse slowly.\n" * 12,
    "garden.md": "# Garden\n\nWater the tomatoes every morning before nine.\n"
    "The hose is behind the shed.\n" + "Check the leaves for aphids.\n" * 12,
}
ASKED = (
    f"Please read {WORKSPACE}/rehearsal.md",
    "Thanks.",
    f"Please read {WORKSPACE}/garden.md",
    "Thank you!",
)
RESUMED = f"Please read {WORKSPACE}/rehearsal.md"


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return embedded_model_path(tmp_path_factory.mktemp("served-home"))


@pytest.fixture
def server(embedded: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh server for each run, as the in-process model is: a prefix its slot kept
    from another conversation is not bit for bit a fresh evaluation (docs/performance.md,
    two greedy runs), and greedy decoding follows the last bit at a near tie."""
    log = tmp_path_factory.mktemp("server") / "llama-server.log"
    adapter = str(shipped_adapter().path)
    # -fa off: loopd's CPU setting (docs/backends.md); --swa-full: its sliding window
    arguments = ["-c", str(CONTEXT), "-t", "2", "-np", "1", "-fa", "off", "--swa-full"]
    arguments += ["--lora", adapter]
    with running_server(embedded, *arguments, log=log) as url:
        yield url


@pytest.fixture(scope="module")
def in_process(embedded: Path, tmp_path_factory: pytest.TempPathFactory) -> list[object]:
    adapter = check_adapter(shipped_adapter(), "gemma3")
    model = LlamaModel(
        embedded, context=CONTEXT, threads=2, seed=SEED, sampling=ADAPTED, adapter=adapter
    )
    return converse(tmp_path_factory.mktemp("in-process"), lambda: model)


@pytest.mark.parametrize("api", ["llama-server", "openai-completions"])
def test_a_served_conversation_is_the_in_process_one(
    embedded: Path, server: str, in_process: list[object], tmp_path: Path, api: Api
) -> None:
    def served() -> ServerModel:
        link = ServerLink(server, timeout_s=300)
        return ServerModel(embedded, link=link, seed=SEED, sampling=ADAPTED, api=api)

    assert converse(tmp_path, served) == in_process


def converse(base: Path, model_of: Callable[[], LoadedModel]) -> list[object]:
    """The conversation in a fresh home; what its session log holds, in order."""
    shutil.rmtree(WORKSPACE, ignore_errors=True)
    WORKSPACE.mkdir()
    try:
        for name, text in NOTES.items():
            (WORKSPACE / name).write_text(text, encoding="utf-8")
        return run(base, model_of)
    finally:
        shutil.rmtree(WORKSPACE, ignore_errors=True)


def run(base: Path, model_of: Callable[[], LoadedModel]) -> list[object]:
    grants = base / "grants"
    write_grant(grants, "notes-read", tool="read_file", paths=[str(WORKSPACE)])
    home = make_home(base)
    place = Home(home)
    broker_config = write_config(base / "brokerd.toml", home, grants, backend="bwrap")
    config = LoopdConfig(
        paths=PathsSection(home=str(home)),
        model=ModelSection(context=CONTEXT, max_tokens=96, seed=SEED, temperature=0.0),
        # a low threshold: the third turn compacts the first ones away
        turn=TurnSection(max_tokens=400, summary_tokens=96, keep_turns=1, compact_at=0.3),
    )
    limits = turn_limits(config)
    model = model_of()
    dialect, _ = choose_dialect(config, model)
    model.show(dialect.shown)
    compactions: list[ContextCompactedEvent] = []
    calls: list[ToolCallStartedEvent] = []

    def start() -> InProcessLoopd:
        return start_loopd(
            base,
            model,
            home=home,
            broker_socket=place.broker_socket,
            limits=limits,
            dialect=dialect,
            clock=lambda: CLOCK,
        )

    with DaemonProcess(broker_config) as brokerd:
        brokerd.wait_serving([place.broker_socket, place.admin_socket])
        loopd = start()
        try:
            for n, text in enumerate(ASKED):
                answers = loopd.turn(SESSION, text, resume=n > 0, timeout_s=600)
                assert isinstance(answers[-1].message, TurnDone), answers[-1]
                events = [a.message.event for a in answers if isinstance(a.message, TurnEvent)]
                compactions += [e for e in events if isinstance(e, ContextCompactedEvent)]
                calls += [e for e in events if isinstance(e, ToolCallStartedEvent)]
        finally:
            loopd.stop()
        loopd = start()  # loopd again, over the same log: the session resumed
        try:
            answers = loopd.turn(SESSION, RESUMED, resume=True, timeout_s=600)
            assert isinstance(answers[-1].message, TurnDone), answers[-1]
        finally:
            loopd.stop()
    assert calls, "the model made no call by itself"
    prompts = [
        e.prompt for e in SessionLogs(home).open(SESSION).entries if isinstance(e, ModelEntry)
    ]
    assert compactions, f"the conversation was never compacted: its prompts {prompts}"
    assert verify_log(home).failure is None
    kept: list[object] = []
    for entry in SessionLogs(home).open(SESSION).entries:
        if isinstance(entry, ModelEntry):
            kept.append(("model", entry.ids, entry.text, [c.name for c in entry.calls]))
        elif isinstance(entry, ToolEntry):
            kept.append(("tool", entry.name, entry.content))
        elif isinstance(entry, CompactionEntry):
            kept.append(("compaction", entry.summary, entry.replaces))
    return kept
