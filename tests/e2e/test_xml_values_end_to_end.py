"""A write_file whose content holds the XML syntax's own tags reaches brokerd whole (issue 37).

Qwen3.5's template writes a parameter's value verbatim between `<parameter=K>\\n` and
`\\n</parameter>`, so a model writing an XML, HTML or Jinja file, or docs about tool
calls, writes `</parameter>`, `</function>`, `</tool_call>`, `<parameter=x>` or
`<tool_call>` inside a value, and cannot escape them. Each such content is written
here as the real model would write it: the call is rendered by the real Qwen3.5
template (tests/fixtures/chat_templates/Qwen3.5-4B.jinja, through
`core.model.template_sandbox` with Hugging Face's `tojson`), both as a direct
`write_file` call and as `call_tool` whose `arguments` parameter is the JSON text of
the inner call's arguments. A scripted model (`testing.scripted_model`) streams that
reply into loopd's real turn loop (in this process), which calls the real `brokerd`
console script; brokerd runs the call in the sandbox, once per runtime the sandbox
conformance suite covers (bubblewrap and Podman; a runtime this host cannot run is
skipped loudly, and fails under CI).

Each case checks: the audit log holds exactly one Decision, for write_file, whose
arguments carry exactly the content, and its Result (nothing truncated, and nothing
else, ever reached brokerd); the file in the granted directory is byte-identical;
the owner's answer is the model's answer alone (no tail of the call shown as it).

I/O: temporary directories, the brokerd child process, its sandbox runtime.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from support.sandbox_fixtures import KINDS, require

from boxmaker.core.audit.records import DecisionEvent, ResultEvent
from boxmaker.core.home.layout import Home
from boxmaker.core.model.template_sandbox import ChatTemplate
from boxmaker.core.model.tool_calls import CallSyntax
from boxmaker.core.wire.loop import ContentEvent, Event, ToolResultEvent
from boxmaker.loopd.broker_port import BrokerPort
from boxmaker.loopd.config import LoopdConfig
from boxmaker.loopd.dialects import choose_dialect
from boxmaker.loopd.limits import TurnLimits
from boxmaker.loopd.session_log import SessionLogs
from boxmaker.loopd.tools import TOOL_SCHEMAS
from boxmaker.loopd.turn import TurnLoop
from boxmaker.testing.homes import make_home, read_records, write_config, write_grant
from boxmaker.testing.processes import DaemonProcess
from boxmaker.testing.scripted_model import SPECIAL, ScriptedModel

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TEMPLATE = Path(__file__).parents[1] / "fixtures" / "chat_templates" / "Qwen3.5-4B.jinja"
SESSION = "chat-1"
THINKING = "The owner wants this file written as it is. I will write it."
ANSWER = "The file is written."

# Each hostile content: the five tags, each in ordinary file text; all of them (docs
# showing a whole call); one ending in a closer; one that is only a closer.
CONTENTS = {
    "parameter-closer": (
        '<?xml version="1.0"?>\n<call>\n  <parameter>7</parameter>\n'
        "  <note>a value ends at </parameter> in Qwen's format</note>\n</call>\n"
    ),
    "function-closer": (
        "<functions>\n  <function>\n    <name>add</name>\n  </function>\n</functions>\n"
    ),
    "tool-call-closer": (
        "# Tool calls\n\nThe model ends each call with </tool_call> on its own line.\n"
    ),
    "parameter-opener": (
        "{% for k, v in args.items() %}<parameter=x>{{ v }}{% endfor %}\n"
        "Write <parameter=x> before the value of x.\n"
    ),
    "tool-call-opener": "<p>Each call begins with <tool_call> and a newline.</p>\n",
    "all-of-them": (
        "Qwen3.5 writes a call like this:\n\n<tool_call>\n<function=write_file>\n"
        "<parameter=path>\n/tmp/x\n</parameter>\n<parameter=x>\n1\n</parameter>\n"
        "</function>\n</tool_call>\n\nThat is all.\n"
    ),
    "ends-in-a-closer": "The template closes every value with\n</parameter>",
    "only-a-closer": "</tool_call>",
}
FORMS = ("direct", "call_tool")


def render_call(name: str, arguments: dict[str, Any]) -> str:
    """The call as the real Qwen3.5 template writes an assistant's tool call: from
    `<tool_call>` to `</tool_call>`, values verbatim, an object as its JSON."""
    template = ChatTemplate(TEMPLATE.read_text(encoding="utf-8"), clock=time.monotonic)
    call = {"type": "function", "function": {"name": name, "arguments": arguments}}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "write the file"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
    ]
    text = template.render(
        messages,
        tools=TOOL_SCHEMAS,
        add_generation_prompt=False,
        bos_token="",
        eos_token="<|im_end|>",
        now=datetime.now(UTC),
    )
    turn = text.rpartition("<|im_start|>assistant\n")[2]
    opened, closed = "<think>\n\n</think>\n\n", "<|im_end|>\n"
    assert turn.startswith(opened), turn
    assert turn.endswith(closed), turn
    return turn.removeprefix(opened).removesuffix(closed)


def written_call(form: str, path: str, content: str) -> tuple[str, dict[str, str]]:
    """The model's call for `form` (checked against the form the issue spells out), and
    the arguments brokerd must receive."""
    arguments = {"path": path, "content": content}
    if form == "direct":
        call = render_call("write_file", arguments)
        spelled = (
            f"<tool_call>\n<function=write_file>\n<parameter=path>\n{path}\n</parameter>\n"
            f"<parameter=content>\n{content}\n</parameter>\n</function>\n</tool_call>"
        )
    else:
        call = render_call("call_tool", {"name": "write_file", "arguments": arguments})
        spelled = (
            "<tool_call>\n<function=call_tool>\n<parameter=name>\nwrite_file\n</parameter>\n"
            f"<parameter=arguments>\n{json.dumps(arguments, ensure_ascii=False)}\n"
            "</parameter>\n</function>\n</tool_call>"
        )
    assert call == spelled
    return call, arguments


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest, rootfs: Path) -> str:
    """Each runtime the sandbox conformance suite runs: skipped loudly (failed under CI)
    where this host cannot run it."""
    name: str = request.param
    require(name, rootfs)
    return name


@pytest.fixture
def short_base() -> Iterator[Path]:
    """A short folder for brokerd's home and the granted directory (socket paths)."""
    folder = Path(tempfile.mkdtemp(prefix="bx-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_turn(
    base: Path, kind: str, rootfs: Path, reply: str
) -> tuple[Path, list[Event], str, ScriptedModel]:
    """One owner turn: the model writes `reply` (reasoning, then the call), reads the
    result and answers; brokerd runs on `kind`. The home, the events, the answer."""
    home = make_home(base)
    grants = base / "grants"
    write_grant(grants, "scratch-write", tool="write_file", paths=[str(base / "scratch")])
    config = write_config(base / "brokerd.toml", home, grants, backend=kind)
    if kind == "podman":
        with config.open("a", encoding="utf-8") as file:
            file.write(f'rootfs = "{rootfs}"\n')
    model = ScriptedModel(
        [reply, f"I wrote it.\n</think>\n\n{ANSWER}"],
        chat_template=TEMPLATE.read_text(encoding="utf-8"),
    )
    dialect, _ = choose_dialect(LoopdConfig(), model)
    assert (dialect.syntax, dialect.opens_reasoning) == (CallSyntax.XML, True)
    events: list[Event] = []
    place = Home(home)
    with DaemonProcess(config) as brokerd:
        brokerd.wait_serving([place.broker_socket, place.admin_socket], timeout_s=60)
        loop = TurnLoop(
            model,
            dialect,
            SessionLogs(home),
            BrokerPort(place.broker_socket, 60_000),
            TurnLimits(),
            markers=tuple(SPECIAL),
        )
        done = loop.run(SESSION, "write the file exactly as I gave it", False, events.append)
        status = brokerd.stop()
    assert status == 0, brokerd.stderr
    return home, events, done.content, model


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("case", CONTENTS)
def test_a_write_file_whose_content_holds_the_xml_tags_reaches_brokerd_whole(
    kind: str, rootfs: Path, short_base: Path, case: str, form: str
) -> None:
    content = CONTENTS[case]
    scratch = short_base / "scratch"
    scratch.mkdir()
    target = scratch / f"{case}.txt"
    call, arguments = written_call(form, str(target), content)
    home, events, answer, model = run_turn(
        short_base, kind, rootfs, f"{THINKING}\n</think>\n\n{call}"
    )

    records = read_records(home)
    decisions = [r.event for r in records if isinstance(r.event, DecisionEvent)]
    # exactly one call reached brokerd, and it carried the whole content
    assert [(d.tool, json.loads(d.arguments)) for d in decisions] == [("write_file", arguments)]
    assert [type(r.event) for r in records] == [DecisionEvent, ResultEvent]
    # the file written in the sandbox is byte-identical
    assert target.read_bytes() == content.encode("utf-8")
    assert sorted(p.name for p in scratch.iterdir()) == [target.name]
    results = [e for e in events if isinstance(e, ToolResultEvent)]
    wrote = f"wrote {len(content.encode('utf-8'))} bytes to {target}"
    called = "write_file" if form == "direct" else "call_tool"
    assert [(r.name, r.content) for r in results] == [(called, wrote)]
    # the owner sees the answer alone: no tail of the call, and the model ran twice
    assert "".join(e.text for e in events if isinstance(e, ContentEvent)) == ANSWER
    assert answer == ANSWER
    assert len(model.prompts) == 2
