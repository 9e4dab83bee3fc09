"""Loading a grants directory: one case per loading rule, and the set as a whole."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from boxmaker.core.grants.decisions import DenyReason
from boxmaker.core.grants.loading import load_grant_dir, parse_grant_file
from boxmaker.core.grants.model import Grant, GrantProblem, GrantSet, Mode
from boxmaker.core.grants.tools import ToolName
from boxmaker.core.labels import DataClass
from boxmaker.core.policy import Decision, Denial, SessionState, decide
from boxmaker.core.wire.broker import ToolRequest

EXAMPLES = Path(__file__).resolve().parents[3] / "grants.example"
NOW = "2026-11-30T12:00:00.000Z"

HEAD = 'tool = "read_file"\nmode = "auto"\nmax_taint = "secret"\nresult_class = "private"\n'
VALID_READ = HEAD + '[constraints]\npaths = ["/home/kyle/notes"]\n'


def load_dir(directory: Path) -> GrantSet:
    return load_grant_dir(
        lambda: os.listdir(directory), lambda name: (directory / name).read_bytes(), str(directory)
    )


def write(directory: Path, files: dict[str, str | bytes]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        data = content.encode() if isinstance(content, str) else content
        (directory / name).write_bytes(data)
    return directory


def request(tool: str, arguments: str) -> ToolRequest:
    return ToolRequest(session="s-1", call="c-1", tool=tool, arguments=arguments)


# --- one case per rule --------------------------------------------------------------

# (file name, content, text the problem must contain, line or None)
RULE_CASES = [
    # 1: unreadable as a grant: not UTF-8, not TOML, wrong types, unknown fields
    pytest.param("a.toml", b'tool = "read_\xff"\n', "is not UTF-8", None, id="rule1-not-utf8"),
    pytest.param(
        "a.toml", HEAD + 'mode = "ask"\n', "is not valid TOML", 5, id="rule1-duplicate-key"
    ),
    pytest.param(
        "a.toml",
        'tool = "read_file"\nmode = "auto\nmax_taint = "secret"\n',
        "is not valid TOML",
        2,
        id="rule1-unterminated-string",
    ),
    pytest.param(
        "a.toml",
        HEAD + 'colour = "red"\n[constraints]\npaths = ["/a"]\n',
        "unknown field `colour`",
        5,
        id="rule1-unknown-field",
    ),
    pytest.param(
        "a.toml",
        HEAD + '[constraints]\npaths = ["/a"]\nglobs = ["*.md"]\n',
        "unknown field `constraints.globs`",
        7,
        id="rule1-unknown-constraint",
    ),
    pytest.param(
        "a.toml",
        'tool = "read_file"\nmax_taint = "secret"\nresult_class = "private"\n'
        '[constraints]\npaths = ["/a"]\n',
        "missing field `mode`",
        None,
        id="rule1-missing-mode",
    ),
    pytest.param(
        "a.toml",
        HEAD + 'untrusted = "yes"\n[constraints]\npaths = ["/a"]\n',
        "`untrusted`",
        5,
        id="rule1-wrong-type",
    ),
    pytest.param(
        "a.toml",
        'tool = "read_file"\nmode = "allow"\nmax_taint = "secret"\nresult_class = "private"\n'
        '[constraints]\npaths = ["/a"]\n',
        "`mode`",
        2,
        id="rule1-bad-mode",
    ),
    pytest.param(
        "a.toml",
        'tool = "read_file"\nmode = "auto"\nmax_taint = "top-secret"\nresult_class = "private"\n'
        '[constraints]\npaths = ["/a"]\n',
        "`max_taint`",
        3,
        id="rule1-bad-data-class",
    ),
    pytest.param(
        "a.toml",
        HEAD + 'expires = "2027-01-01"\n[constraints]\npaths = ["/a"]\n',
        "`expires`",
        5,
        id="rule1-bad-expires",
    ),
    pytest.param(
        "a.toml",
        HEAD + 'expires = 2027-01-01T00:00:00Z\n[constraints]\npaths = ["/a"]\n',
        "`expires`",
        5,
        id="rule1-toml-datetime-expires",
    ),
    pytest.param(
        "a.toml",
        HEAD + '[constraints]\npaths = "/a"\n',
        "`constraints.paths`",
        6,
        id="rule1-paths-not-a-list",
    ),
    # 2: the stem is not an id
    pytest.param("Notes.toml", VALID_READ, "file name", None, id="rule2-uppercase-stem"),
    pytest.param("my_notes.toml", VALID_READ, "file name", None, id="rule2-underscore-stem"),
    pytest.param("my notes.toml", VALID_READ, "file name", None, id="rule2-space-stem"),
    pytest.param(".toml", VALID_READ, "file name", None, id="rule2-empty-stem"),
    pytest.param("a.b.toml", VALID_READ, "file name", None, id="rule2-dot-in-stem"),
    pytest.param("a" * 65 + ".toml", VALID_READ, "file name", None, id="rule2-65-chars"),
    # 3: unknown tool
    pytest.param(
        "a.toml",
        'tool = "exec"\nmode = "auto"\nmax_taint = "secret"\nresult_class = "private"\n',
        "`tool` must be one of read_file, write_file, shell, http_fetch, memory_add, "
        "memory_replace, memory_consolidate, memory_note, memory_recall",
        1,
        id="rule3-unknown-tool",
    ),
    pytest.param(
        "a.toml",
        '# a comment\ntool = "Read_File"\nmode = "auto"\nmax_taint = "secret"\n'
        'result_class = "private"\n[constraints]\npaths = ["/a"]\n',
        "`tool` must be one of",
        2,
        id="rule3-tool-case",
    ),
    # 4: secret set
    pytest.param(
        "a.toml",
        HEAD + 'secret = "API_KEY"\n[constraints]\npaths = ["/a"]\n',
        "secrets are not supported",
        5,
        id="rule4-secret",
    ),
    pytest.param(
        "a.toml",
        HEAD + 'secret = ""\n[constraints]\npaths = ["/a"]\n',
        "secrets are not supported",
        5,
        id="rule4-empty-secret-is-set",
    ),
    # 5: patterns
    pytest.param(
        "a.toml",
        HEAD + '[constraints]\npaths = ["/a"]\npatterns = ["*.md"]\n',
        "patterns are not supported",
        7,
        id="rule5-patterns",
    ),
    # 6: constraints the tool does not take, or a required one missing
    pytest.param(
        "a.toml",
        HEAD,
        "a read_file grant needs at least one entry in constraints.paths",
        None,
        id="rule6-read-without-paths",
    ),
    pytest.param(
        "a.toml",
        HEAD + "[constraints]\npaths = []\n",
        "needs at least one entry in constraints.paths",
        None,
        id="rule6-read-empty-paths",
    ),
    pytest.param(
        "a.toml",
        HEAD + '[constraints]\npaths = ["/a"]\nhosts = ["example.com"]\n',
        "a read_file grant takes no constraints.hosts",
        7,
        id="rule6-read-with-hosts",
    ),
    pytest.param(
        "a.toml",
        HEAD.replace("read_file", "write_file"),
        "a write_file grant needs at least one entry in constraints.paths",
        None,
        id="rule6-write-without-paths",
    ),
    pytest.param(
        "a.toml",
        HEAD.replace("read_file", "write_file")
        + '[constraints]\npaths = ["/a"]\nhosts = ["example.com"]\n',
        "a write_file grant takes no constraints.hosts",
        7,
        id="rule6-write-with-hosts",
    ),
    pytest.param(
        "a.toml",
        HEAD.replace("read_file", "shell") + '[constraints]\nhosts = ["example.com"]\n',
        "a shell grant takes no constraints.hosts",
        6,
        id="rule6-shell-with-hosts",
    ),
    pytest.param(
        "a.toml",
        HEAD.replace("read_file", "http_fetch"),
        "a http_fetch grant needs at least one entry in constraints.hosts",
        None,
        id="rule6-fetch-without-hosts",
    ),
    pytest.param(
        "a.toml",
        HEAD.replace("read_file", "http_fetch")
        + '[constraints]\nhosts = ["example.com"]\npaths = ["/a"]\n',
        "a http_fetch grant takes no constraints.paths",
        7,
        id="rule6-fetch-with-paths",
    ),
    # 7: paths
    pytest.param(
        "a.toml",
        HEAD + '[constraints]\npaths = ["/"]\n',
        "a grant of the whole file system is not supported",
        6,
        id="rule7-root",
    ),
    pytest.param(
        "a.toml",
        HEAD + '[constraints]\npaths = [\n  "/a",\n  "a/b",\n]\n',
        "'a/b' is not a valid absolute path",
        6,
        id="rule7-relative",
    ),
    pytest.param(
        "a.toml",
        HEAD + '[constraints]\npaths = ["/a/../b"]\n',
        "is not a valid absolute path",
        6,
        id="rule7-dotdot",
    ),
    pytest.param(
        "a.toml",
        HEAD + '[constraints]\npaths = ["/a/"]\n',
        "is not a valid absolute path",
        6,
        id="rule7-trailing-slash",
    ),
    pytest.param(
        "a.toml",
        HEAD.replace("read_file", "shell") + '[constraints]\npaths = ["/a//b"]\n',
        "is not a valid absolute path",
        6,
        id="rule7-shell-double-slash",
    ),
    pytest.param(
        "a.toml",
        HEAD.replace("read_file", "write_file") + 'constraints.paths = ["/"]\n',
        "a grant of the whole file system is not supported",
        5,
        id="rule7-root-dotted-key",
    ),
    # 8: hosts
    pytest.param(
        "a.toml",
        HEAD.replace("read_file", "http_fetch") + '[constraints]\nhosts = ["127.0.0.1"]\n',
        "'127.0.0.1' is not a valid host pattern",
        6,
        id="rule8-ip",
    ),
    pytest.param(
        "a.toml",
        HEAD.replace("read_file", "http_fetch") + '[constraints]\nhosts = ["Example.com"]\n',
        "'Example.com' is not a valid host pattern",
        6,
        id="rule8-uppercase",
    ),
    pytest.param(
        "a.toml",
        HEAD.replace("read_file", "http_fetch") + '[constraints]\nhosts = ["*"]\n',
        "'*' is not a valid host pattern",
        6,
        id="rule8-bare-star",
    ),
    pytest.param(
        "a.toml",
        HEAD.replace("read_file", "http_fetch")
        + '[constraints]\nhosts = ["example.com", "https://example.com"]\n',
        "'https://example.com' is not a valid host pattern",
        6,
        id="rule8-url-as-host",
    ),
    # 9: deny must apply at every taint
    pytest.param(
        "a.toml",
        'tool = "read_file"\nmode = "deny"\nmax_taint = "private"\nresult_class = "private"\n'
        '[constraints]\npaths = ["/a"]\n',
        "a deny grant must apply at every taint",
        3,
        id="rule9-deny-private",
    ),
    pytest.param(
        "a.toml",
        'tool = "http_fetch"\nmode = "deny"\nmax_taint = "public"\nresult_class = "public"\n'
        '[constraints]\nhosts = ["example.com"]\n',
        "a deny grant must apply at every taint",
        3,
        id="rule9-deny-public",
    ),
]


@pytest.mark.parametrize(("name", "content", "text", "line"), RULE_CASES)
def test_loading_rule(name: str, content: str | bytes, text: str, line: int | None) -> None:
    data = content.encode() if isinstance(content, str) else content
    grant, problems = parse_grant_file(name, data)
    assert grant is None
    matching = [p for p in problems if text in p.problem]
    assert matching, [p.problem for p in problems]
    assert matching[0].file == name
    assert matching[0].line == line
    assert "\n" not in matching[0].problem


@pytest.mark.parametrize(("name", "content", "text", "line"), RULE_CASES)
def test_loading_rule_through_a_directory(
    tmp_path: Path, name: str, content: str | bytes, text: str, line: int | None
) -> None:
    directory = write(tmp_path / "grants", {"ok.toml": VALID_READ, name: content})
    grants = load_dir(directory)
    assert not grants.valid
    assert any(p.file == name and text in p.problem and p.line == line for p in grants.problems)
    where = name if line is None else f"{name}:{line}"
    assert any(p.render().startswith(f"{where}: ") for p in grants.problems)


def test_a_file_that_cannot_be_read(tmp_path: Path) -> None:
    directory = write(tmp_path / "grants", {"ok.toml": VALID_READ})
    (directory / "sub.toml").mkdir()  # reading a directory fails, even as root
    grants = load_dir(directory)
    assert not grants.valid
    assert [p.file for p in grants.problems] == ["sub.toml"]
    assert "cannot be read" in grants.problems[0].problem


def test_a_read_error_from_the_reader_is_a_problem_of_that_file() -> None:
    def read(name: str) -> bytes:
        if name == "b.toml":
            raise PermissionError(13, "Permission denied")
        return VALID_READ.encode()

    grants = load_grant_dir(lambda: ["a.toml", "b.toml"], read, "/etc/boxmaker/grants")
    assert not grants.valid
    assert grants.problems == (
        GrantProblem(file="b.toml", problem="cannot be read: Permission denied"),
    )


def test_every_problem_of_a_file_is_reported() -> None:
    content = (
        'tool = "read_file"\nmode = "deny"\nmax_taint = "private"\nresult_class = "private"\n'
        'secret = "X"\n[constraints]\npaths = ["/"]\nhosts = ["127.0.0.1"]\npatterns = ["*"]\n'
    )
    grant, problems = parse_grant_file("Bad_Name.toml", content.encode())
    assert grant is None
    texts = " | ".join(p.problem for p in problems)
    for fragment in (
        "file name",
        "secrets are not supported",
        "patterns are not supported",
        "takes no constraints.hosts",
        "whole file system",
        "not a valid host pattern",
        "deny grant must apply at every taint",
    ):
        assert fragment in texts


# --- the directory ------------------------------------------------------------------


def test_missing_directory_makes_the_set_invalid(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    grants = load_dir(missing)
    assert not grants.valid
    assert grants.grants == ()
    assert len(grants.problems) == 1
    assert grants.problems[0].file == str(missing)
    assert "cannot be read" in grants.problems[0].problem


def test_a_file_in_place_of_the_directory_makes_the_set_invalid(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "grants"
    not_a_dir.write_text(VALID_READ)
    grants = load_dir(not_a_dir)
    assert not grants.valid
    assert grants.problems[0].file == str(not_a_dir)


def test_a_listing_error_makes_the_set_invalid() -> None:
    def listing() -> list[str]:
        raise PermissionError(13, "Permission denied")

    grants = load_grant_dir(listing, lambda name: b"", "/etc/boxmaker/grants")
    assert not grants.valid
    assert grants.problems == (
        GrantProblem(
            file="/etc/boxmaker/grants",
            problem="the grants directory cannot be read: Permission denied",
        ),
    )


def test_empty_directory_is_a_valid_empty_set(tmp_path: Path) -> None:
    directory = tmp_path / "grants"
    directory.mkdir()
    grants = load_dir(directory)
    assert grants.valid
    assert grants.grants == ()
    assert grants.problems == ()


def test_files_not_ending_in_toml_are_ignored(tmp_path: Path) -> None:
    directory = write(
        tmp_path / "grants",
        {
            "notes.toml": VALID_READ,
            "README": "not a grant",
            "notes.toml.bak": "tool = 1\n",
            "notes.toml~": "garbage [[[",
            "Other.TOML": "garbage [[[",
            "x.json": "{}",
        },
    )
    (directory / "subdir").mkdir()
    grants = load_dir(directory)
    assert grants.valid, grants.problems
    assert [g.id for g in grants.grants] == ["notes"]


def test_a_valid_file_becomes_a_grant() -> None:
    content = (
        b'tool = "http_fetch"\nmode = "ask"\nmax_taint = "private"\nresult_class = "public"\n'
        b'untrusted = true\nexpires = "2027-01-01T00:00:00.000Z"\n'
        b'[constraints]\nhosts = ["docs.python.org", "*.example.com"]\n'
    )
    grant, problems = parse_grant_file("docs-fetch.toml", content)
    assert problems == []
    assert grant == Grant(
        id="docs-fetch",
        tool=ToolName.HTTP_FETCH,
        mode=Mode.ASK,
        max_taint=DataClass.PRIVATE,
        result_class=DataClass.PUBLIC,
        untrusted=True,
        expires="2027-01-01T00:00:00.000Z",
        paths=(),
        hosts=("docs.python.org", "*.example.com"),
        sha256=hashlib.sha256(content).hexdigest(),
    )


@pytest.mark.parametrize(
    ("name", "content"),
    [
        pytest.param("a" * 64 + ".toml", VALID_READ, id="stem-64-chars"),
        pytest.param("0-9-a.toml", VALID_READ, id="digits-and-hyphens"),
        pytest.param(
            "sh.toml",
            'tool = "shell"\nmode = "ask"\nmax_taint = "private"\nresult_class = "private"\n',
            id="shell-without-paths",
        ),
        pytest.param(
            "sh.toml",
            'tool = "shell"\nmode = "ask"\nmax_taint = "private"\nresult_class = "private"\n'
            "[constraints]\n",
            id="shell-empty-constraints",
        ),
        pytest.param(
            "d.toml",
            'tool = "read_file"\nmode = "deny"\nmax_taint = "secret"\nresult_class = "public"\n'
            'constraints = { paths = ["/home/kyle/keys"] }\n',
            id="deny-secret-inline-table",
        ),
        pytest.param(
            "p.toml",
            HEAD + '[constraints]\npaths = ["/a"]\npatterns = []\n',
            id="empty-patterns",
        ),
    ],
)
def test_valid_files(name: str, content: str) -> None:
    grant, problems = parse_grant_file(name, content.encode())
    assert problems == []
    assert grant is not None
    assert grant.id == name.removesuffix(".toml")


def test_one_invalid_file_among_valid_ones_denies_what_a_valid_file_allows(
    tmp_path: Path,
) -> None:
    valid_only = write(tmp_path / "valid", {"notes.toml": VALID_READ})
    call = request("read_file", '{"path":"/home/kyle/notes/a.md"}')
    state = SessionState(taint=DataClass.PRIVATE)
    allowed = decide(call, load_dir(valid_only), state, NOW)
    assert isinstance(allowed, Decision)
    assert allowed.grant.id == "notes"

    broken = write(
        tmp_path / "broken",
        {
            "notes.toml": VALID_READ,
            # a mistyped deny grant for something unrelated
            "keys-deny.toml": HEAD.replace('"auto"', '"deny"').replace("secret", "private")
            + '[constraints]\npaths = ["/home/kyle/keys"]\n',
        },
    )
    grants = load_dir(broken)
    assert not grants.valid
    denied = decide(call, grants, state, NOW)
    assert isinstance(denied, Denial)
    assert denied.reason is DenyReason.GRANTS_INVALID
    assert denied.grant is None


def test_examples_load() -> None:
    names = sorted(n for n in os.listdir(EXAMPLES) if n.endswith(".toml"))
    assert names, "grants.example/ holds no grant files"
    grants = load_dir(EXAMPLES)
    assert grants.problems == ()
    assert sorted(g.id for g in grants.grants) == [n.removesuffix(".toml") for n in names]
