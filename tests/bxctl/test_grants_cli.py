"""`bxctl grants check` and `bxctl grants explain`, through the installed console script."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

BXCTL = Path(sys.executable).parent / "bxctl"
EXAMPLES = Path(__file__).resolve().parents[2] / "grants.example"
NOW = "2026-11-30T12:00:00.000Z"


def bxctl(*args: str | Path, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if home is not None:
        env["BOXMAKER_HOME"] = str(home)
    return subprocess.run(
        [str(BXCTL), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def explain(
    directory: Path, tool: str, arguments: str, *extra: str, home: Path, now: str | None = NOW
) -> subprocess.CompletedProcess[str]:
    """`bxctl grants explain` for one call; `--now` unless `now` is None."""
    when = () if now is None else ("--now", now)
    args = ("--dir", directory, "--tool", tool, "--arguments", arguments, *when, *extra)
    return bxctl("grants", "explain", *args, home=home)


def grant_file(tool: str, mode: str = "auto", **fields: Any) -> str:
    """A grant file's TOML: the four required keys, then the rest."""
    lines = [
        f'tool = "{tool}"',
        f'mode = "{mode}"',
        f'max_taint = "{fields.pop("max_taint", "secret")}"',
        f'result_class = "{fields.pop("result_class", "private")}"',
    ]
    if "untrusted" in fields:
        lines.append(f"untrusted = {'true' if fields.pop('untrusted') else 'false'}")
    if "expires" in fields:
        lines.append(f'expires = "{fields.pop("expires")}"')
    lines.append("[constraints]")
    for key, values in fields.items():
        lines.append(f"{key} = {json.dumps(values)}")
    return "\n".join(lines) + "\n"


def write_dir(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text)
    return directory


def test_console_script_is_installed() -> None:
    assert BXCTL.is_file(), f"{BXCTL} is missing: is the package installed in this environment?"


# --- grants check -------------------------------------------------------------------


def test_check_examples_is_ok(tmp_path: Path) -> None:
    done = bxctl("grants", "check", "--dir", EXAMPLES, home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "grants: ok\n"
    assert done.stderr == ""


def test_check_empty_directory_is_ok(tmp_path: Path) -> None:
    empty = tmp_path / "grants"
    empty.mkdir()
    done = bxctl("grants", "check", "--dir", empty, home=tmp_path)
    assert (done.returncode, done.stdout) == (0, "grants: ok\n")


def test_check_reports_each_problem_with_file_and_line(tmp_path: Path) -> None:
    directory = write_dir(
        tmp_path / "grants",
        {
            "notes.toml": grant_file("read_file", paths=["/home/kyle/notes"]),
            # rule 9, max_taint on line 3
            "keys-deny.toml": grant_file(
                "read_file", "deny", max_taint="private", paths=["/home/kyle/keys"]
            ),
            # rule 7, paths on line 6
            "root.toml": grant_file("read_file", paths=["/"]),
            # rule 2: no line
            "Bad_Name.toml": grant_file("shell"),
            "README.md": "not a grant",
        },
    )
    done = bxctl("grants", "check", "--dir", directory, home=tmp_path)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert len(lines) == 3, done.stdout
    by_file = {line.split(":", 1)[0]: line for line in lines}
    assert set(by_file) == {"keys-deny.toml", "root.toml", "Bad_Name.toml"}
    assert by_file["keys-deny.toml"].startswith("keys-deny.toml:3: ")
    assert "a deny grant must apply at every taint" in by_file["keys-deny.toml"]
    assert by_file["root.toml"].startswith("root.toml:6: ")
    assert "whole file system" in by_file["root.toml"]
    assert re.fullmatch(r"Bad_Name\.toml: .+", by_file["Bad_Name.toml"])
    assert "see runbook.md#grants-invalid" in done.stderr
    assert "Traceback" not in done.stderr


def test_check_bad_toml_names_the_line(tmp_path: Path) -> None:
    directory = write_dir(
        tmp_path / "grants",
        {"broken.toml": 'tool = "read_file"\nmode = "auto"\nmax_taint = "secret\n'},
    )
    done = bxctl("grants", "check", "--dir", directory, home=tmp_path)
    assert done.returncode == 1
    assert re.fullmatch(r"broken\.toml:3: is not valid TOML: .+\n", done.stdout), done.stdout


def test_check_missing_directory(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    done = bxctl("grants", "check", "--dir", missing, home=tmp_path)
    assert done.returncode == 1
    assert done.stdout.startswith(f"{missing}: ")
    assert "cannot be read" in done.stdout
    assert "Traceback" not in done.stderr


# --- grants explain --json: the tables ------------------------------------------------

TABLE_GRANTS = {
    "notes.toml": grant_file("read_file", paths=["/home/kyle/notes"]),
    "notes-private-deny.toml": grant_file("read_file", "deny", paths=["/home/kyle/notes/private"]),
    "a-home.toml": grant_file("read_file", paths=["/home/bob"], result_class="private"),
    "b-keys.toml": grant_file("read_file", paths=["/home/bob/keys"], result_class="secret"),
    "old.toml": grant_file("read_file", paths=["/old"], expires="2026-01-01T00:00:00.000Z"),
    "low.toml": grant_file("read_file", paths=["/low"], max_taint="public"),
    "scratch-write.toml": grant_file("write_file", paths=["/s", "/s/out"]),
    "shell-plain.toml": grant_file("shell", "ask", max_taint="private", result_class="public"),
    "shell-scratch.toml": grant_file("shell", paths=["/home/kyle/scratch"]),
    "fetch-exact.toml": grant_file(
        "http_fetch", hosts=["example.com"], result_class="public", untrusted=True
    ),
    "fetch-wild.toml": grant_file("http_fetch", "ask", hosts=["*.example.org"]),
}


def allowed(grant: str, matched: str | None, cls: str = "private", untrusted: bool = False) -> Any:
    return {
        "outcome": {"outcome": "allowed"},
        "grant": grant,
        "matched": matched,
        "result_class": cls,
        "untrusted": untrusted,
    }


def ask(grant: str, matched: str | None, cls: str = "private", untrusted: bool = False) -> Any:
    return {**allowed(grant, matched, cls, untrusted), "outcome": {"outcome": "ask"}}


def denied(reason: str, grant: str | None = None) -> Any:
    return {
        "outcome": {"outcome": "denied", "reason": reason},
        "grant": grant,
        "matched": None,
        "result_class": None,
        "untrusted": None,
    }


def read(path: str) -> tuple[str, str]:
    return ("read_file", json.dumps({"path": path}))


def write(path: str) -> tuple[str, str]:
    return ("write_file", json.dumps({"path": path, "content": "x"}))


def shell(cwd: str | None = None) -> tuple[str, str]:
    if cwd is None:
        return ("shell", json.dumps({"command": "ls"}))
    return ("shell", json.dumps({"command": "ls", "cwd": cwd}))


def fetch(url: str) -> tuple[str, str]:
    return ("http_fetch", json.dumps({"url": url}))


NOTES = "/home/kyle/notes"
# id: (call, expected JSON object)
EXPLAIN_ROWS: dict[str, tuple[tuple[str, str], Any]] = {
    # what each tool takes
    "read-inside": (read(f"{NOTES}/a.md"), allowed("notes", NOTES)),
    "read-elsewhere": (read("/etc/passwd"), denied("no_grant")),
    "write-inside": (write("/s/x"), allowed("scratch-write", "/s")),
    "write-the-grant-path-itself": (write("/s"), denied("no_grant")),
    "write-inner-grant-path-through-outer": (write("/s/out"), allowed("scratch-write", "/s")),
    "write-below-inner-path": (write("/s/out/x"), allowed("scratch-write", "/s/out")),
    "shell-without-cwd": (shell(), ask("shell-plain", None, "public")),
    "shell-cwd-null": (
        ("shell", '{"command":"ls","cwd":null}'),
        ask("shell-plain", None, "public"),
    ),
    "shell-cwd-inside": (
        shell("/home/kyle/scratch/x"),
        allowed("shell-scratch", "/home/kyle/scratch"),
    ),
    "shell-cwd-elsewhere": (shell("/tmp"), denied("no_grant")),
    "fetch-granted-host": (
        fetch("https://example.com/x"),
        allowed("fetch-exact", "example.com", "public", untrusted=True),
    ),
    "fetch-other-host": (fetch("https://example.net/x"), denied("no_grant")),
    "fetch-ip-literal": (fetch("https://127.0.0.1/"), denied("invalid_arguments")),
    # paths
    "path-inside": (read(f"{NOTES}/a.md"), allowed("notes", NOTES)),
    "path-the-directory-itself": (read(NOTES), allowed("notes", NOTES)),
    "path-not-inside-notes2": (read("/home/kyle/notes2/a.md"), denied("no_grant")),
    "path-dotdot": (read(f"{NOTES}/../.ssh/id"), denied("invalid_arguments")),
    "path-relative": (read("notes/a.md"), denied("invalid_arguments")),
    "path-double-slash-dot": (read("/home/kyle//notes/./a.md"), denied("invalid_arguments")),
    # hosts
    "host-exact": (
        fetch("https://example.com/"),
        allowed("fetch-exact", "example.com", "public", True),
    ),
    "host-exact-not-sub": (fetch("https://www.example.com/"), denied("no_grant")),
    "host-wild-one-label": (
        fetch("https://www.example.org/"),
        ask("fetch-wild", "*.example.org"),
    ),
    "host-wild-two-labels": (
        fetch("https://a.b.example.org/"),
        ask("fetch-wild", "*.example.org"),
    ),
    "host-wild-not-apex": (fetch("https://example.org/"), denied("no_grant")),
    # matching
    "deny-wins": (read(f"{NOTES}/private/x"), denied("denied_by_grant", "notes-private-deny")),
    "home-and-keys-secret": (
        read("/home/bob/keys/id"),
        allowed("b-keys", "/home/bob/keys", "secret"),
    ),
    "home-alone-private": (read("/home/bob/a"), allowed("a-home", "/home/bob", "private")),
    "expired": (read("/old/x"), denied("grant_expired")),
    "taint-too-high": (read("/low/x"), denied("taint_too_high")),
    "unknown-tool": (("exec", '{"path":"/home/kyle/notes/a"}'), denied("no_grant")),
    "invalid-arguments": (("read_file", '{"file":"/a"}'), denied("invalid_arguments")),
}


@pytest.fixture(scope="module")
def explained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every row answered by the real bxctl, run a few at a time."""
    base = tmp_path_factory.mktemp("explain")
    directory = write_dir(base / "grants", TABLE_GRANTS)
    assert bxctl("grants", "check", "--dir", directory).stdout == "grants: ok\n"

    def one(row: str) -> Any:
        tool, arguments = EXPLAIN_ROWS[row][0]
        done = explain(directory, tool, arguments, "--json", home=base)
        assert done.returncode == 0, (row, done.stderr)
        assert done.stdout.count("\n") == 1, done.stdout
        return json.loads(done.stdout)

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(EXPLAIN_ROWS, pool.map(one, EXPLAIN_ROWS), strict=True))


@pytest.mark.parametrize("row", list(EXPLAIN_ROWS))
def test_explain_json_tables(explained: dict[str, Any], row: str) -> None:
    assert explained[row] == EXPLAIN_ROWS[row][1]


def test_explain_root_grant_makes_the_set_invalid(tmp_path: Path) -> None:
    directory = write_dir(
        tmp_path / "grants",
        {
            "notes.toml": grant_file("read_file", paths=["/home/kyle/notes"]),
            "root.toml": grant_file("read_file", paths=["/"]),
        },
    )
    tool, arguments = read("/home/kyle/notes/a.md")
    done = explain(directory, tool, arguments, "--json", home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == denied("grants_invalid")


@pytest.mark.parametrize(
    ("taint", "want"),
    [
        pytest.param("public", allowed("shell-plain", None, "public"), id="public"),
        pytest.param("private", ask("shell-plain", None, "public"), id="private"),
        pytest.param("secret", denied("taint_too_high"), id="secret"),
    ],
)
def test_explain_taint_option(tmp_path: Path, taint: str, want: Any) -> None:
    mode = "auto" if taint == "public" else "ask"
    text = grant_file("shell", mode, max_taint="private", result_class="public")
    directory = write_dir(tmp_path / "grants", {"shell-plain.toml": text})
    done = explain(
        directory, "shell", '{"command":"ls"}', "--taint", taint, "--json", home=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == want


@pytest.mark.parametrize(
    ("tool", "arguments", "text", "want"),
    [
        pytest.param(
            "write_file",
            '{"path":"/s/a","content":"x"}',
            grant_file("write_file", paths=["/s"]),
            {**ask("w", "/s"), "outcome": {"outcome": "ask", "why": "untrusted"}},
            id="write-asks",
        ),
        pytest.param(
            "read_file",
            '{"path":"/s/a"}',
            grant_file("read_file", paths=["/s"]),
            allowed("w", "/s"),
            id="read-stays-auto",
        ),
        pytest.param(
            "write_file",
            '{"path":"/s/a","content":"x"}',
            grant_file("write_file", paths=["/s"]).replace(
                "[constraints]", 'when_untrusted = "deny"\n[constraints]'
            ),
            {**denied("untrusted_session"), "grant": "w"},
            id="deny-denies",
        ),
    ],
)
def test_explain_untrusted_option(
    tmp_path: Path, tool: str, arguments: str, text: str, want: Any
) -> None:
    directory = write_dir(tmp_path / "grants", {"w.toml": text})
    trusted = explain(directory, tool, arguments, "--json", home=tmp_path)
    assert json.loads(trusted.stdout)["outcome"] == {"outcome": "allowed"}
    done = explain(directory, tool, arguments, "--untrusted", "--json", home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == want


def test_explain_human_untrusted_says_why(tmp_path: Path) -> None:
    text = grant_file("write_file", paths=["/s"])
    directory = write_dir(tmp_path / "grants", {"w.toml": text})
    done = explain(
        directory, "write_file", '{"path":"/s/a","content":"x"}', "--untrusted", home=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == (
        "ask the owner: grant w (the session is untrusted: when_untrusted = ask)"
    )


def test_explain_now_decides_expiry(tmp_path: Path) -> None:
    directory = write_dir(
        tmp_path / "grants",
        {"old.toml": grant_file("read_file", paths=["/old"], expires=NOW)},
    )
    answers = []
    for now in ("2026-11-30T11:59:59.999Z", NOW):
        done = explain(
            directory, "read_file", '{"path":"/old/x"}', "--json", home=tmp_path, now=now
        )
        answers.append(json.loads(done.stdout))
    assert answers == [allowed("old", "/old"), denied("grant_expired")]


# --- grants explain: the human form -------------------------------------------------


@pytest.fixture
def table_dir(tmp_path: Path) -> Path:
    return write_dir(tmp_path / "grants", TABLE_GRANTS)


def explain_text(directory: Path, tool: str, arguments: str) -> subprocess.CompletedProcess[str]:
    return explain(directory, tool, arguments, home=directory.parent)


def test_explain_human_allowed(table_dir: Path) -> None:
    done = explain_text(table_dir, *read("/home/bob/keys/id"))
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert lines[0].startswith("allowed")
    assert "b-keys" in lines[0]
    assert any("/home/bob/keys" in line for line in lines[1:])
    assert any("secret" in line for line in lines[1:])
    assert "a-home" not in done.stdout


def test_explain_human_ask(table_dir: Path) -> None:
    done = explain_text(table_dir, *fetch("https://www.example.org/"))
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert lines[0].startswith("ask")
    assert "fetch-wild" in lines[0]
    assert any("*.example.org" in line for line in lines[1:])


def test_explain_human_denied_by_grant(table_dir: Path) -> None:
    done = explain_text(table_dir, *read(f"{NOTES}/private/diary"))
    assert done.returncode == 0
    assert done.stdout.splitlines() == ["denied: denied_by_grant by grant notes-private-deny"]


def test_explain_human_invalid_arguments_shows_the_detail(table_dir: Path) -> None:
    done = explain_text(table_dir, "read_file", '{"file":"/a"}')
    assert done.returncode == 0
    assert done.stdout.splitlines()[0].startswith("denied: invalid_arguments")
    assert "unknown field `file`, expected `path`" in done.stdout


def test_explain_human_lists_problems_of_an_invalid_set(tmp_path: Path) -> None:
    text = grant_file("read_file", "deny", max_taint="public", paths=["/k"])
    directory = write_dir(tmp_path / "grants", {"keys.toml": text})
    done = explain_text(directory, *read("/k/x"))
    assert done.stdout.splitlines()[0] == "denied: grants_invalid"
    assert "keys.toml:3: " in done.stdout
    assert "see runbook.md#grants-invalid" in done.stderr


# --- errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "now",
    [
        pytest.param("yesterday", id="words"),
        pytest.param("2026-02-30T00:00:00.000Z", id="no-such-day"),
        pytest.param("2026-11-30T12:00:00Z", id="no-milliseconds"),
        pytest.param("2026-11-30 12:00:00.000Z", id="space"),
        pytest.param("", id="empty"),
    ],
)
def test_bad_now_is_one_line_exit_2(tmp_path: Path, now: str) -> None:
    done = explain(EXAMPLES, "read_file", '{"path":"/a"}', home=tmp_path, now=now)
    assert done.returncode == 2
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert "--now" in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(("grants",), id="no-subcommand"),
        pytest.param(("grants", "frobnicate"), id="unknown-subcommand"),
        pytest.param(("grants", "explain", "--dir", "x"), id="explain-without-tool"),
        pytest.param(
            (
                "grants",
                "explain",
                "--dir",
                "x",
                "--tool",
                "shell",
                "--arguments",
                "{}",
                "--taint",
                "top",
            ),
            id="bad-taint",
        ),
    ],
)
def test_usage_errors_are_one_line_exit_2(tmp_path: Path, args: tuple[str, ...]) -> None:
    done = bxctl(*args, home=tmp_path)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr


@pytest.mark.parametrize(
    ("place", "relation"),
    [
        ("home", "is"),
        ("home", "contains"),
        ("home", "under"),
        ("grants", "is"),
        ("grants", "contains"),
        ("install", "under"),
        ("install", "contains"),
    ],
    ids=lambda value: value,
)
def test_check_refuses_a_grant_that_reaches_boxmaker_itself(
    tmp_path: Path, place: str, relation: str
) -> None:
    """A shell granted boxmaker's home could approve its own calls over admin.sock."""
    home = tmp_path / "outer" / "home"
    (home / "run").mkdir(parents=True)
    grants = tmp_path / "grants"
    target = {"home": home, "grants": grants, "install": Path(sys.prefix).resolve()}[place]
    path = {"is": target, "contains": target.parent, "under": target / "x"}[relation]
    directory = write_dir(grants, {"reach.toml": grant_file("shell", paths=[str(path)])})
    done = bxctl("grants", "check", "--dir", directory, home=home)
    assert done.returncode == 1, done.stdout
    assert done.stdout.startswith("reach.toml:6: "), done.stdout
    assert "reaches boxmaker's own" in done.stdout
    assert "see runbook.md#grant-covers-boxmaker" in done.stdout


def test_check_allows_a_grant_beside_boxmaker(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    directory = write_dir(
        tmp_path / "grants", {"side.toml": grant_file("shell", paths=[str(tmp_path / "homework")])}
    )
    done = bxctl("grants", "check", "--dir", directory, home=home)
    assert (done.returncode, done.stdout) == (0, "grants: ok\n")
