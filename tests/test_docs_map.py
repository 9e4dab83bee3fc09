"""The map in the repository (docs/architecture.md) and the pages the README sends readers to.

The README holds what boxmaker is, its two commands, the drawing of the roles and
their sockets, and where to read next (docs/index.md); every section it held before
lives in a page that docs/index.md links. These tests hold the pages to the code:

- the drawing names every socket of `core/home/links.py` and no other, and the README
  draws the same map; the link table is written from `LINKS`;
- the floors and the import contracts are `.importlinter`'s;
- every key of each role's settings is in docs/configuration.md, and no other;
- every page is linked from docs/index.md, every relative link reaches a file (and a
  heading, for an anchor), and every docs page and runbook entry a page names exists;
- the README starts with its two commands and stays at most 200 lines.

Each check is a function returning what is wrong; the tests beside it show that it
finds what it is for. I/O: reads the repository's Markdown files and `.importlinter`.
"""

from __future__ import annotations

import configparser
import re
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import BaseModel

from boxmaker.brokerd.config import BrokerdConfig
from boxmaker.core.home.links import LINKS, LOOP, Link, Role
from boxmaker.gatewayd.config import GatewaydConfig
from boxmaker.loopd.config import LoopdConfig
from boxmaker.memoryd.config import MemorydConfig

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
RUNBOOK = ROOT / "runbook.md"
ARCHITECTURE = DOCS / "architecture.md"
INDEX = DOCS / "index.md"
IMPORTLINTER = ROOT / ".importlinter"

DRAWING = "The roles and their sockets"  # architecture.md's heading over the drawing
README_DRAWING = "How it fits together"  # the README's
README_MAX_LINES = 200
OWNER_PAGES = ["grants.md", "configuration.md", "install.md", "audit.md"]

# Each section the README held before issue 40, and the page of docs/ that holds it now.
MOVED = {
    "Grants": "grants.md",
    "Secrets": "grants.md",
    "brokerd": "brokerd.md",
    "The sandbox": "sandbox.md",
    "loopd and `bxctl chat`": "loopd.md",
    "The embedded model": "loopd.md",
    "Switching to your own model": "loopd.md",
    "`bxctl sanitize check`": "sanitizer.md",
    "`bxctl memory`": "memoryd.md",
    "Running it": "install.md",
    "Installing for real, as root": "install.md",
    "The owner's model on the GPU": "install.md",
    "Chat (Mattermost)": "install.md",
    "Development": "development.md",
    "The audit log": "audit.md",
    "Checkpoints: keeping the log's end outside the box": "audit.md",
    "Known limits and choices": "development.md",
}

CONFIGS: dict[str, type[BaseModel]] = {
    "brokerd.toml": BrokerdConfig,
    "loopd.toml": LoopdConfig,
    "memoryd.toml": MemorydConfig,
    "gatewayd.toml": GatewaydConfig,
}


# -- reading Markdown ---------------------------------------------------------------

_FENCE = re.compile(r"^(`{3,})\s*(\S*)")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*$")
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:")


def _lines(text: str) -> Iterator[tuple[str, bool]]:
    """Each line, and whether it belongs to a fenced block (its fences included)."""
    fence = ""
    for line in text.splitlines():
        if not fence and (opened := _FENCE.match(line)):
            fence = opened.group(1)
            yield line, True
        elif fence:
            yield line, True
            fence = "" if line.strip() == fence else fence
        else:
            yield line, False


def fenced(text: str) -> list[tuple[str, str]]:
    """Each fenced block: its info string and its body."""
    blocks: list[tuple[str, str]] = []
    body: list[str] | None = None
    fence = info = ""
    for line in text.splitlines():
        if body is None:
            if opened := _FENCE.match(line):
                fence, info, body = opened.group(1), opened.group(2), []
        elif line.strip() == fence:
            blocks.append((info, "\n".join(body)))
            body = None
        else:
            body.append(line)
    return blocks


def prose(text: str) -> str:
    """The text outside fenced blocks and inline code."""
    kept = (line for line, code in _lines(text) if not code)
    return "\n".join(_INLINE_CODE.sub("", line) for line in kept)


def headings(text: str) -> list[tuple[int, str]]:
    """Each heading outside fenced blocks: its level and its title."""
    found = []
    for line, code in _lines(text):
        if not code and (match := _HEADING.match(line)):
            found.append((len(match.group(1)), match.group(2)))
    return found


def slug(title: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to -."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor, a repeated one numbered as GitHub numbers it."""
    seen: dict[str, int] = {}
    found = set()
    for _, title in headings(text):
        base = slug(title)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def section(text: str, title: str) -> str:
    """From the heading `title` to the next heading of its level or above."""
    out: list[str] = []
    level = 0
    for line, code in _lines(text):
        match = None if code else _HEADING.match(line)
        if level and match and len(match.group(1)) <= level:
            break
        if level:
            out.append(line)
        elif match and match.group(2) == title:
            level = len(match.group(1))
    assert level, f"no heading {title!r}"
    return "\n".join(out)


def links(text: str) -> list[str]:
    """The target of every Markdown link outside code."""
    return _LINK.findall(prose(text))


def broken_links(page: Path, root: Path) -> list[str]:
    """Each relative link of `page` whose file, or whose heading, does not exist."""
    problems = []
    for target in links(page.read_text(encoding="utf-8")):
        if _SCHEME.match(target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(root)}: ({target})"
        if not linked.exists():
            problems.append(f"{where}: there is no {path}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text()):
            problems.append(f"{where}: {path or page.name} has no heading #{anchor}")
    return problems


def pages_linked(page: Path) -> list[str]:
    """The pages of the same folder that `page` links, in order, each once."""
    named: dict[str, None] = {}
    for target in links(page.read_text(encoding="utf-8")):
        path = target.partition("#")[0]
        if path.endswith(".md") and "/" not in path and not _SCHEME.match(path):
            named.setdefault(path)
    return list(named)


# -- the drawing and the link table -------------------------------------------------

_SOCKET = re.compile(r"[\w./-]*\.sock\b")
_RUNBOOK_FROM_DOCS = "../runbook.md"


def _drawn(link: Link) -> str:
    return f"{link.directory}/{link.socket}"


def drawing(text: str, title: str) -> str:
    """The first fenced block under the heading `title`."""
    blocks = fenced(section(text, title))
    assert blocks, f"no drawing under {title!r}"
    return blocks[0][1]


def drawing_drift(drawn: str, table: Iterable[Link]) -> list[str]:
    """How the sockets and roles a drawing names differ from the table's (empty: not at
    all); bxctl stands for the owner."""
    rows = tuple(table)
    wanted = {_drawn(link) for link in rows}
    named = set(_SOCKET.findall(drawn))
    roles = {
        "bxctl" if role is Role.OWNER else role.value
        for link in rows
        for role in (link.server, *link.clients)
    }
    return [
        *(f"the drawing lacks {socket}" for socket in sorted(wanted - named)),
        *(
            f"the drawing names {socket}, no link of core/home/links.py"
            for socket in sorted(named - wanted)
        ),
        *(
            f"the drawing lacks the role {role}"
            for role in sorted(roles)
            if not re.search(rf"\b{role}\b", drawn)
        ),
    ]


def _who(role: Role) -> str:
    return "the owner (bxctl)" if role is Role.OWNER else role.value


def _kinds(link: Link) -> str:
    shown = []
    for kind in link.accepts:
        only = link.senders_of(kind)
        names = (
            ""
            if only is None
            else f" ({', '.join('the owner' if r is Role.OWNER else r.value for r in only)} only)"
        )
        shown.append(f"`{kind}`{names}")
    return ", ".join(shown)


def _modes(link: Link) -> str:
    root, dev = link.root, link.dev
    return (
        f"root {root.directory:04o}, {root.socket:04o}; dev {dev.directory:04o}, {dev.socket:04o}"
    )


def link_table(table: Iterable[Link]) -> str:
    """architecture.md's link table, one row per link, written from `table`."""
    rows = [
        "| socket, under `<home>/run/` | served by | clients | group, in a root install"
        " | modes: directory, socket | accepts | over its cap |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for link in table:
        rows.append(
            f"| `{_drawn(link)}` | {_who(link.server)} | {', '.join(_who(r) for r in link.clients)}"
            f" | `{link.group}` | {_modes(link)} | {_kinds(link)}"
            f" | [{link.busy.value}]({_RUNBOOK_FROM_DOCS}#{link.busy.value}) |"
        )
    return "\n".join(rows)


# -- .importlinter ------------------------------------------------------------------

_CONTRACT = "importlinter:contract:"


def _importlinter() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.read_string(IMPORTLINTER.read_text(encoding="utf-8"))
    return parser


def contract_ids() -> list[str]:
    return [
        s.removeprefix(_CONTRACT) for s in _importlinter().sections() if s.startswith(_CONTRACT)
    ]


def contract_layers(contract: str) -> list[str]:
    """A layers contract's layers, top first, each as `a | b`."""
    value = _importlinter()[_CONTRACT + contract]["layers"]
    return [
        " | ".join(part.strip() for part in line.split("|"))
        for line in value.splitlines()
        if line.strip()
    ]


def floors(block: str) -> list[str]:
    """The floors a drawn block names: each line at the margin, up to two spaces."""
    return [re.split(r"\s{2,}", line.strip())[0] for line in block.splitlines() if line[:1].strip()]


def table_ids(text: str) -> list[str]:
    """The first cells of a table's rows that are one `name` in backticks."""
    return re.findall(r"^\| `([\w-]+)` \|", text, flags=re.MULTILINE)


# -- configuration ------------------------------------------------------------------

_TABLE = re.compile(r"^#?\s*\[([^\]]+)\]")
_KEY = re.compile(r"^#?\s*([a-z_]+)\s*=")


def settings_keys(model: type[BaseModel]) -> set[str]:
    """Every key of a settings class: `table.key`, and a table of tables by its name."""
    keys = set()
    for name, field in model.model_fields.items():
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            keys |= {f"{name}.{key}" for key in settings_keys(kind)}
        else:
            keys.add(name)
    return keys


def documented_keys(text: str) -> set[str]:
    """Every key the TOML blocks of `text` set or show commented out, as `table.key`;
    a `[secrets.<id>]` table counts as the key `secrets`."""
    keys = set()
    for info, body in fenced(text):
        if info != "toml":
            continue
        table = ""
        for line in body.splitlines():
            if opened := _TABLE.match(line):
                table = opened.group(1)
                if table.startswith("secrets."):
                    keys.add("secrets")
            elif (key := _KEY.match(line)) and table and not table.startswith("secrets."):
                keys.add(f"{table}.{key.group(1)}")
    return keys


def keys_drift(name: str, text: str, model: type[BaseModel]) -> list[str]:
    have, want = documented_keys(text), settings_keys(model)
    return [
        *(f"{name}: {key} is not in docs/configuration.md" for key in sorted(want - have)),
        *(
            f"{name}: docs/configuration.md shows {key}, not a key of it"
            for key in sorted(have - want)
        ),
    ]


# -- the tests ----------------------------------------------------------------------


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def test_the_drawing_names_every_socket_and_no_other() -> None:
    assert drawing_drift(drawing(_read(ARCHITECTURE), DRAWING), LINKS) == []


def test_the_readme_draws_the_same_map() -> None:
    assert drawing(_read(README), README_DRAWING) == drawing(_read(ARCHITECTURE), DRAWING)


# a drawing of every link and role, to show the check failing when one is changed
ALL_DRAWN = " ".join([*(_drawn(link) for link in LINKS), "bxctl loopd brokerd memoryd gatewayd"])


def test_the_drift_check_passes_a_drawing_of_every_link() -> None:
    assert drawing_drift(ALL_DRAWN, LINKS) == []


def test_the_drift_check_finds_a_socket_missing_or_unknown() -> None:
    drawn = ALL_DRAWN
    extra = replace(LOOP, directory="owner-loop", socket="admin.sock")
    assert drawing_drift(drawn, [*LINKS, extra]) == ["the drawing lacks owner-loop/admin.sock"]
    assert drawing_drift(drawn, [link for link in LINKS if link is not LOOP]) == [
        "the drawing names loop/loop.sock, no link of core/home/links.py"
    ]
    assert drawing_drift(drawn + "\n  see run.sock", LINKS) == [
        "the drawing names run.sock, no link of core/home/links.py"
    ]


def test_the_drift_check_finds_a_role_missing() -> None:
    assert drawing_drift(ALL_DRAWN.replace("gatewayd", "gateway"), LINKS) == [
        "the drawing lacks the role gatewayd"
    ]


def test_the_link_table_is_written_from_the_links() -> None:
    table = link_table(LINKS)
    assert table in _read(ARCHITECTURE), f"architecture.md's link table should read:\n{table}"


def test_a_changed_link_changes_the_table() -> None:
    changed = [replace(link, group="bx-other") if link is LOOP else link for link in LINKS]
    assert link_table(changed) not in _read(ARCHITECTURE)
    assert "`compact` (the owner only)" in link_table(LINKS)


@pytest.mark.parametrize(
    ("contract", "title"),
    [("layers", "Packages and their layers"), ("core-layers", "Core's floors")],
)
def test_the_floors_drawn_are_the_contracts(contract: str, title: str) -> None:
    blocks = fenced(section(_read(ARCHITECTURE), title))
    assert blocks, f"no block under {title!r}"
    layers = contract_layers(contract)
    assert len(layers) >= 4, "the contract's layers were not read"
    assert floors(blocks[0][1]) == layers


def test_the_floors_reader_reads_a_block() -> None:
    block = "a | b       what a and b are\n            more of it\nc           the ground\n"
    assert floors(block) == ["a | b", "c"]


def test_every_import_contract_is_in_the_table() -> None:
    listed = table_ids(section(_read(ARCHITECTURE), "The import contracts"))
    assert len(contract_ids()) >= 8, "the contracts were not read"
    assert sorted(listed) == sorted(contract_ids())


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_configuration_key_is_on_the_page(name: str) -> None:
    text = section(_read(DOCS / "configuration.md"), name)
    assert keys_drift(name, text, CONFIGS[name]) == []


def test_the_keys_check_finds_a_key_missing_or_unknown() -> None:
    page = (
        '```toml\n[paths]\nhome = ""\n# [secrets.<id>]\n```\n```toml\n[runner]\ncolour = 1\n```\n'
    )
    found = keys_drift("brokerd.toml", page, BrokerdConfig)
    assert "brokerd.toml: paths.grants is not in docs/configuration.md" in found
    assert "brokerd.toml: docs/configuration.md shows runner.colour, not a key of it" in found
    assert not any("paths.home" in line or "secrets" in line for line in found)


def test_the_index_links_every_page() -> None:
    linked = set(pages_linked(INDEX))
    missing = sorted(page.name for page in _pages() if page != INDEX and page.name not in linked)
    assert missing == [], "docs/index.md does not link these pages"


def test_the_index_lists_the_owner_pages_first() -> None:
    assert pages_linked(INDEX)[: len(OWNER_PAGES)] == OWNER_PAGES


@pytest.mark.parametrize(("title", "page"), sorted(MOVED.items()))
def test_a_section_the_readme_dropped_lives_in_a_linked_page(title: str, page: str) -> None:
    assert page in pages_linked(INDEX)
    assert title in [t for _, t in headings(_read(DOCS / page))]


def test_the_readme_links_the_index() -> None:
    assert "docs/index.md" in links(_read(README))


def test_the_readme_starts_with_its_two_commands() -> None:
    text = _read(README)
    blocks = fenced(text)
    assert blocks[:2] == [("sh", "scripts/test"), ("sh", "scripts/run")]
    before = text[: text.index("scripts/run\n```")]
    assert [t for _, t in headings(before)] == ["boxmaker"]


def test_the_readme_is_short() -> None:
    lines = len(_read(README).splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines"


@pytest.mark.parametrize(
    "page", [README, RUNBOOK, *sorted(DOCS.glob("*.md"))], ids=lambda p: p.name
)
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page, ROOT) == []


def test_the_link_check_finds_a_missing_file_or_heading(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text(
        "# A\n\n## Two words\n\n[b](b.md) [c](c.md#nowhere) [d](#nowhere)\n"
    )
    (tmp_path / "c.md").write_text("# C\n")
    assert broken_links(tmp_path / "a.md", tmp_path) == [
        "a.md: (b.md): there is no b.md",
        "a.md: (c.md#nowhere): c.md has no heading #nowhere",
        "a.md: (#nowhere): a.md has no heading #nowhere",
    ]
    (tmp_path / "a.md").write_text(
        "# A\n\n## Two `words`\n\n[c](c.md#c) [x](#two-words) `[d](d.md)`\n"
    )
    assert broken_links(tmp_path / "a.md", tmp_path) == []


def test_anchors_are_githubs() -> None:
    text = "# loopd and `bxctl chat`\n## The embedded model's adapter (issue 39)\n## A\n## A\n```\n# no\n```\n"
    assert anchors(text) == {
        "loopd-and-bxctl-chat",
        "the-embedded-models-adapter-issue-39",
        "a",
        "a-1",
    }


_MENTION = re.compile(r"\bdocs/([\w-]+\.md)\b")
_POINTER = re.compile(r"runbook\.md#([a-z0-9-]+)")


def test_every_docs_page_named_exists() -> None:
    texts = {p: _read(p) for p in [README, RUNBOOK, *_pages()]}
    named = {(p.name, m) for p, text in texts.items() for m in _MENTION.findall(text)}
    assert named, "no page names a docs page: the search is broken"
    assert sorted((where, m) for where, m in named if not (DOCS / m).exists()) == []


def test_every_runbook_pointer_in_the_pages_has_an_entry() -> None:
    entries = {t for level, t in headings(_read(RUNBOOK)) if level == 2}
    named = {(p.name, a) for p in [README, *_pages()] for a in _POINTER.findall(_read(p))}
    assert named, "no page points into the runbook: the search is broken"
    assert sorted((where, a) for where, a in named if a not in entries) == []
