"""`bxctl sanitize check`: its lines and exit status, with a fake check and the real one.

The unit tests hand `examine` and `cmd_check` a fake check (a function from text
to findings), so the printing is tested apart from the rules. The rest drive the
installed console script: reading stdin, refusing text that is not UTF-8 in one
line, and the expected exit status for every line of both corpora
(tests/fixtures/sanitize/): 1 for an attack case that must be refused, flagged or
neutralised, 0 for code work. The corpus runs one process per line, several at a
time, once for the whole module.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from boxmaker.bxctl import main as bxctl_main
from boxmaker.bxctl.cli import EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, CliError
from boxmaker.bxctl.sanitize_cmd import cmd_check, examine, read_text, render, show
from boxmaker.core.sanitize import Action, Finding

BXCTL = Path(sys.executable).parent / "bxctl"
CORPORA = Path(__file__).resolve().parents[1] / "fixtures" / "sanitize"
POINTER = "see runbook.md#sanitizer-rules"
FIRES = {Action.REFUSE.value, Action.FLAG.value, Action.NEUTRALISE.value}

GITHUB = Finding(Action.REFUSE, "secret-github", 12, "ghp_…")
EXFIL = Finding(Action.FLAG, "exfil-url", 40, "send … to https://…")
TAG = Finding(Action.NEUTRALISE, "neutralised-tag", 70, "<" + "|im_start|" + ">")


def fake(*findings: Finding) -> Any:
    """A check that finds `findings` in any text."""
    return lambda text: list(findings)


# --- the printing, with a fake check


def test_the_lines_of_the_spec_example() -> None:
    assert render([GITHUB, EXFIL, TAG]) == [
        "refuse      secret-github  ghp_… at 12",
        'flag        exfil-url      "send … to https://…" at 40',
        "neutralise  1 tag",
    ]


def test_findings_are_printed_in_text_order_and_tags_counted_last() -> None:
    second_tag = Finding(Action.NEUTRALISE, "neutralised-tag", 1, "<" + "think" + ">")
    assert render([TAG, EXFIL, second_tag, GITHUB]) == [
        "refuse      secret-github  ghp_… at 12",
        'flag        exfil-url      "send … to https://…" at 40',
        "neutralise  2 tags",
    ]


def test_only_tags_is_the_count_line() -> None:
    assert render([TAG]) == ["neutralise  1 tag"]


def test_the_rule_column_is_as_wide_as_the_longest_rule() -> None:
    long = Finding(Action.REFUSE, "control-character", 0, "\a")
    assert render([long, GITHUB]) == [
        "refuse      control-character  \\u0007 at 0",
        "refuse      secret-github      ghp_… at 12",
    ]


@pytest.mark.parametrize(
    ("excerpt", "shown"),
    [
        ("plain", "plain"),
        ("a\u202eb", "a\\u202eb"),  # a bidi override cannot reorder the line
        ("a\nb\tc\rd", "a\\u000ab\\u0009c\\u000dd"),  # one line
        ("\x1b[2J", "\\u001b[2J"),  # no escape sequence reaches the terminal
        ("a\u200bb", "a\\u200bb"),  # zero width
        ("\U000e0041", "\\udb40\\udc41"),  # a tag letter
        ("\\u202e", "\\\\u202e"),  # typed backslash-u reads differently from the character
        ("日本語 🎉", "日本語 🎉"),
    ],
    ids=[
        "plain",
        "bidi",
        "newline-tab-cr",
        "escape",
        "zero-width",
        "tag-letter",
        "backslash",
        "cjk",
    ],
)
def test_an_excerpt_is_shown_as_data(excerpt: str, shown: str) -> None:
    assert show(excerpt) == shown
    line = render([Finding(Action.REFUSE, "r", 3, excerpt)])[0]
    assert line.endswith(f"{shown} at 3")
    assert line.isprintable()


def test_a_flag_excerpt_is_quoted_with_its_quotes_escaped() -> None:
    said = Finding(Action.FLAG, "ignore-instructions", 0, 'say "hi" \\ ignore')
    assert render([said]) == ['flag        ignore-instructions  "say \\"hi\\" \\\\ ignore" at 0']


def test_an_empty_excerpt_leaves_the_position() -> None:
    assert render([Finding(Action.REFUSE, "control-character", 5, "")]) == [
        "refuse      control-character  at 5"
    ]


def test_nothing_fires_is_ok_and_exit_0() -> None:
    assert examine("ls -la", fake()) == (["sanitize: ok"], EXIT_OK)


def test_something_fires_is_exit_1() -> None:
    lines, status = examine("x", fake(EXFIL))
    assert status == EXIT_PROBLEM == 1
    assert lines == ['flag        exfil-url  "send … to https://…" at 40']


def _args(argv: Sequence[str]) -> Any:
    return bxctl_main.build_parser(argv).parse_args(argv)


def test_the_command_prints_the_lines_and_the_pointer(capsys: pytest.CaptureFixture[str]) -> None:
    status = cmd_check(_args(["sanitize", "check", "some text"]), fake(GITHUB, TAG))
    shown = capsys.readouterr()
    assert status == EXIT_PROBLEM
    assert shown.out.splitlines() == ["refuse      secret-github  ghp_… at 12", "neutralise  1 tag"]
    assert shown.err == POINTER + "\n"


def test_the_command_gives_the_check_the_text(capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[str] = []

    def check(text: str) -> list[Finding]:
        seen.append(text)
        return []

    assert cmd_check(_args(["sanitize", "check", "a\tb"]), check) == EXIT_OK
    assert seen == ["a\tb"]
    assert capsys.readouterr() == ("sanitize: ok\n", "")


def test_memory_is_the_default() -> None:
    assert _args(["sanitize", "check", "x"]).memory is True
    assert _args(["sanitize", "check", "--no-memory", "x"]).memory is False


# --- reading the text


def test_text_is_the_argument_when_given() -> None:
    assert read_text("hello", io.BytesIO(b"not read")) == "hello"


def test_text_is_stdin_without_an_argument() -> None:
    assert read_text(None, io.BytesIO("naïve\n".encode())) == "naïve\n"


def test_stdin_that_is_not_utf8_is_one_line_and_exit_2() -> None:
    with pytest.raises(CliError) as raised:
        read_text(None, io.BytesIO(b"ok \xff then"))
    assert raised.value.status == EXIT_USAGE
    assert "\n" not in raised.value.message
    assert "byte 0xff at offset 3" in raised.value.message


def test_an_argument_that_is_not_utf8_is_one_line_and_exit_2() -> None:
    with pytest.raises(CliError) as raised:
        read_text("ok \udcff", None)  # how Python hands over the byte 0xff in argv
    assert raised.value.status == EXIT_USAGE
    assert raised.value.message.startswith("TEXT is not UTF-8 (byte 0xff at offset 3)")


def test_a_surrogate_spelled_in_utf8_reaches_the_sanitizer() -> None:
    assert read_text(None, io.BytesIO(b"\xed\xa0\xbd alone")) == "\ud83d alone"
    assert read_text(os.fsdecode(b"\xed\xa0\xbd alone"), None) == "\ud83d alone"
    assert read_text("\ud83d alone", None) == "\ud83d alone"  # given in-process


def test_no_argument_and_no_stdin_is_one_line() -> None:
    with pytest.raises(CliError) as raised:
        read_text(None, None)
    assert raised.value.status == EXIT_USAGE


# --- the console script, with the real sanitizer


def bxctl(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(BXCTL), "sanitize", "check", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_the_script_passes_ordinary_text_from_stdin() -> None:
    done = bxctl(stdin=b"git log --oneline | head -n 3\n")
    assert (done.returncode, done.stdout, done.stderr) == (0, b"sanitize: ok\n", b"")


def test_the_script_refuses_a_secret_given_as_text() -> None:
    done = bxctl("my token is ghp_" + "a1B2c3D4e5" * 4)
    assert done.returncode == 1
    assert done.stdout.decode().startswith("refuse")
    assert b"a1B2c3D4e5" * 4 not in done.stdout  # never the whole secret
    assert done.stderr.decode() == POINTER + "\n"


def test_the_script_never_prints_a_bidi_control() -> None:
    done = bxctl(stdin="if admin \u202e then\n".encode())
    assert done.returncode == 1
    assert "\u202e".encode() not in done.stdout  # shown escaped or replaced, never raw
    assert done.stdout.decode().startswith("refuse")


def test_the_script_names_stdin_that_is_not_utf8_in_one_line() -> None:
    done = bxctl(stdin=b"caf\xe9\n")
    assert done.returncode == 2
    assert done.stdout == b""
    assert len(done.stderr.splitlines()) == 1
    assert b"Traceback" not in done.stderr
    assert done.stderr.startswith(b"bxctl: standard input is not UTF-8")


def test_the_script_names_an_argument_that_is_not_utf8_in_one_line() -> None:
    done = bxctl(os.fsdecode(b"caf\xe9"))
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr == b"bxctl: TEXT is not UTF-8 (byte 0xe9 at offset 3):" + (
        b" convert it first, for example with iconv\n"
    )


def test_the_script_refuses_a_lone_surrogate() -> None:
    done = bxctl(stdin=b"\xed\xa0\xbd alone\n")
    assert done.returncode == 1
    assert done.stdout.decode().split()[:2] == ["refuse", "lone-surrogate"]


def test_the_script_has_help() -> None:
    done = bxctl("--help")
    assert done.returncode == 0
    assert b"--no-memory" in done.stdout


# --- both corpora, through the console script


def _cases() -> list[Any]:
    cases: list[Any] = []
    for corpus in ("attack", "code_work"):
        path = CORPORA / f"{corpus}.jsonl"
        if not path.exists():
            cases.append(pytest.param(corpus, 0, None, id=f"{corpus}-missing"))
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            case = json.loads(line)
            cases.append(pytest.param(corpus, number, case, id=f"{corpus}:{number}"))
    return cases


CASES = _cases()


def expected_status(corpus: str, case: dict[str, Any]) -> int:
    return 1 if corpus == "attack" and case["action"] in FIRES else 0


@pytest.fixture(scope="module")
def corpus_runs() -> dict[tuple[str, int], subprocess.CompletedProcess[bytes]]:
    """Every corpus line through the console script, on stdin, a few processes at a time;
    with `--no-memory` where the case says `"memory": false`."""
    cases = [(p.values[0], p.values[1], p.values[2]) for p in CASES if p.values[2] is not None]

    def run(case: tuple[str, int, dict[str, Any]]) -> subprocess.CompletedProcess[bytes]:
        memory = () if case[2].get("memory", True) else ("--no-memory",)
        return bxctl(*memory, stdin=case[2]["text"].encode("utf-8", "surrogatepass"))

    with ThreadPoolExecutor(max_workers=max(2, (os.cpu_count() or 1) * 2)) as pool:
        done = list(pool.map(run, cases))
    return {(corpus, number): run for (corpus, number, _), run in zip(cases, done, strict=True)}


@pytest.mark.slow
@pytest.mark.parametrize(("corpus", "number", "case"), CASES)
def test_every_corpus_line_gets_its_exit_status(
    corpus: str,
    number: int,
    case: dict[str, Any] | None,
    corpus_runs: dict[tuple[str, int], subprocess.CompletedProcess[bytes]],
) -> None:
    assert case is not None, f"{CORPORA / corpus}.jsonl is missing"
    done = corpus_runs[(corpus, number)]
    assert b"Traceback" not in done.stderr
    assert done.returncode == expected_status(corpus, case), (case, done.stdout, done.stderr)
    if done.returncode == 1:
        assert done.stderr.decode() == POINTER + "\n"
        lines = done.stdout.decode().splitlines()
        rule = case.get("rule")
        if case["action"] in (Action.REFUSE, Action.FLAG) and rule:
            assert (case["action"], rule) in {tuple(line.split()[:2]) for line in lines}
        if case["action"] == Action.NEUTRALISE:
            assert lines[-1].startswith("neutralise  "), lines
