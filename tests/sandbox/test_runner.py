"""The runner seam: what each tool's spec mounts and reaches, and who may build a spec."""

from __future__ import annotations

import copy
import pickle

import pytest

from boxmaker.core.grants.loading import parse_grant_file
from boxmaker.core.grants.model import GrantSet
from boxmaker.core.grants.tools import ToolName
from boxmaker.core.labels import DataClass
from boxmaker.core.policy import Decision, SessionState, decide
from boxmaker.core.wire.broker import FailedResponse, ResultResponse, ToolRequest
from boxmaker.sandbox.runner import (
    Mount,
    RefusingRuntime,
    RunError,
    RunFailure,
    RunOutput,
    RunSpec,
    build_spec,
    run,
)
from boxmaker.testing.runtime import RecordingRuntime

NOW = "2026-11-30T12:00:00.000Z"


def _grant(name: str, text: str) -> GrantSet:
    grant, problems = parse_grant_file(name, text.encode())
    assert grant is not None, problems
    return GrantSet(grants=(grant,))


def _decision(tool: str, arguments: str, grants: GrantSet) -> Decision:
    request = ToolRequest(session="s1", call="c1", tool=tool, arguments=arguments)
    outcome = decide(request, grants, SessionState(), NOW)
    assert isinstance(outcome, Decision), outcome
    return outcome


def _files(tool: str, paths: str) -> GrantSet:
    return _grant(
        "g.toml",
        f'tool = "{tool}"\nmode = "auto"\nmax_taint = "secret"\nresult_class = "secret"\n'
        f"untrusted = true\n[constraints]\npaths = {paths}\n",
    )


@pytest.mark.parametrize(
    ("tool", "paths", "arguments", "mounts"),
    [
        (
            "read_file",
            '["/n", "/n/deep"]',
            '{"path":"/n/deep/a"}',
            (Mount("/n/deep/a", writable=False, granted="/n/deep"),),
        ),
        (
            "write_file",
            '["/s", "/s/out"]',
            '{"path":"/s/out","content":"x"}',
            (Mount("/s/out", writable=True, granted="/s"),),
        ),
        (
            "shell",
            '["/a", "/b"]',
            '{"command":"ls","cwd":"/b"}',
            (Mount("/a", writable=True, granted="/a"), Mount("/b", writable=True, granted="/b")),
        ),
    ],
    ids=["read-file-the-file-read-only", "write-file-the-file", "shell-every-path"],
)
def test_file_tools_mount_and_have_no_egress(
    tool: str, paths: str, arguments: str, mounts: tuple[Mount, ...]
) -> None:
    spec = build_spec(_decision(tool, arguments, _files(tool, paths)))
    assert spec.tool is ToolName(tool)
    assert spec.mounts == mounts
    assert spec.egress is None


def test_http_fetch_reaches_only_the_url_host_and_mounts_nothing() -> None:
    """Not every host of the grant: a redirect elsewhere would carry the first host's label."""
    grants = _grant(
        "web.toml",
        'tool = "http_fetch"\nmode = "auto"\nmax_taint = "private"\nresult_class = "public"\n'
        '[constraints]\nhosts = ["docs.python.org", "*.example.com"]\n',
    )
    spec = build_spec(_decision("http_fetch", '{"url":"https://a.example.com/x"}', grants))
    assert spec.mounts == ()
    assert spec.egress == ("a.example.com",)


def test_run_labels_the_result_with_the_decision() -> None:
    runtime = RecordingRuntime(RunOutput(content="hello", truncated=True))
    response = run(
        _decision("read_file", '{"path":"/n/a"}', _files("read_file", '["/n"]')), runtime
    )
    assert response == ResultResponse(
        content="hello", class_=DataClass.SECRET, untrusted=True, truncated=True
    )
    assert runtime.count == 1


def test_a_run_error_is_a_fixed_sentence() -> None:
    runtime = RecordingRuntime(RunError(RunFailure.TIMED_OUT))
    response = run(
        _decision("read_file", '{"path":"/n/a"}', _files("read_file", '["/n"]')), runtime
    )
    assert response == FailedResponse(message="the tool timed out")


def test_the_refusing_runtime_runs_nothing() -> None:
    response = run(
        _decision("read_file", '{"path":"/n/a"}', _files("read_file", '["/n"]')), RefusingRuntime()
    )
    assert isinstance(response, FailedResponse)
    assert response.message == RunFailure.NOT_CONFIGURED.value


def test_a_spec_cannot_be_built_outside_the_runner() -> None:
    with pytest.raises(TypeError, match="built only"):
        RunSpec(object(), ToolName.READ_FILE, None, (), (), None)  # type: ignore[arg-type]


def test_a_spec_cannot_be_changed_copied_or_pickled() -> None:
    spec = build_spec(_decision("read_file", '{"path":"/n/a"}', _files("read_file", '["/n"]')))
    with pytest.raises(AttributeError):
        spec.mounts = ()
    with pytest.raises(TypeError):
        copy.copy(spec)
    with pytest.raises(TypeError):
        pickle.dumps(spec)


def test_a_decision_assembled_without_policy_builds_no_spec() -> None:
    real = _decision("read_file", '{"path":"/n/a"}', _files("read_file", '["/n"]'))
    forged = object.__new__(Decision)
    for name in ("request", "args", "grant", "matched_path", "matched_host", "result_class"):
        object.__setattr__(forged, name, getattr(real, name))
    object.__setattr__(forged, "untrusted", False)
    with pytest.raises(TypeError, match=r"built by boxmaker\.core\.policy"):
        build_spec(forged)


def test_a_spec_type_cannot_be_subclassed() -> None:
    with pytest.raises(TypeError):

        class Forged(RunSpec):
            pass
