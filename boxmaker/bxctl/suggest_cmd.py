"""`bxctl grants suggest`: writes one narrower `auto` grant from asks the owner keeps approving.

I/O: reads the audit log (`audit_reader`) and the grants directory, and writes
one new file, `--out`, which must not exist yet and must lie outside the grants
directory and boxmaker's home: the suggestion is never applied by this command.
The owner reviews it and moves it into the grants directory by hand. What
qualifies is `boxmaker.core.audit.grant_suggest`'s to say. It prints

    wrote <out>: grant <g> narrowed to <paths|hosts>, mode auto, from <n> approvals
    not applied: review it, then move it into <grants dir> by hand
    also qualifies: grant <g> narrowed to <paths|hosts>, <n> approvals    (each other one)

or `nothing to suggest: ...` (exit 0, nothing written). An `--out` inside the
grants directory or the home is refused with one line (exit 2).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

import boxmaker
from boxmaker.bxctl.audit_reader import AuditReader
from boxmaker.bxctl.cli import EXIT_OK, EXIT_USAGE, CliError, Parser, out
from boxmaker.core.audit.ask_history import AskHistory
from boxmaker.core.audit.grant_suggest import Suggestion, suggest_grants
from boxmaker.core.grants.loading import load_grant_dir
from boxmaker.core.grants.paths import is_inside
from boxmaker.core.grants.reserved import Place, install_places, reserved_places
from boxmaker.core.home.layout import Home, home_from

DEFAULT_GRANTS = Path("/etc/boxmaker/grants")  # brokerd's `[paths] grants` default
DEFAULT_MIN_APPROVALS = 3
_FILE_NAME = re.compile(r"[a-z0-9-]{1,64}\.toml")


def add_parser(sub: Any) -> None:
    suggest: Parser = sub.add_parser(
        "suggest",
        help="write a narrower auto grant from often-approved asks (for review; not applied)",
    )
    suggest.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="the audit directory (default: $BOXMAKER_HOME/audit)",
    )
    suggest.add_argument(
        "--grants",
        type=Path,
        default=DEFAULT_GRANTS,
        help=f"the grants directory (default: {DEFAULT_GRANTS})",
    )
    suggest.add_argument(
        "--out",
        type=Path,
        required=True,
        help="the new grant file, e.g. ~/notes-auto.toml (not in the grants directory)",
    )
    suggest.add_argument(
        "--min-approvals",
        type=_at_least_one,
        default=DEFAULT_MIN_APPROVALS,
        help=f"approvals a suggestion needs (default: {DEFAULT_MIN_APPROVALS})",
    )
    suggest.set_defaults(handler=cmd_suggest)


def _at_least_one(text: str) -> int:
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of at least 1")
    return int(text)


def _both(path: Path) -> set[str]:
    """`path` made absolute as written and as the file system resolves it."""
    return {os.path.normpath(os.path.abspath(path)), os.path.realpath(path)}


def refuse_out(out_file: Path, grants: Path, home: Path) -> None:
    """CliError (one line, usage) if `out_file` is in the grants directory or the home."""
    if _FILE_NAME.fullmatch(out_file.name) is None:
        raise CliError(
            f"--out {out_file}: a grant file name is 1 to 64 characters of a-z, 0-9"
            " and - before .toml",
            EXIT_USAGE,
        )
    target = {str(Path(parent) / out_file.name) for parent in _both(out_file.parent)}
    for what, place in (("the grants directory", grants), ("boxmaker's home", home)):
        if any(is_inside(p, t) for p in _both(place) for t in target):
            raise CliError(
                f"--out {out_file} is inside {what} ({place}): write the suggestion"
                " elsewhere, review it, then move it in by hand",
                EXIT_USAGE,
            )


def _places(grants: Path, home: Path) -> tuple[Place, ...]:
    """What no grant may reach, as `bxctl grants check --dir` judges it."""
    return reserved_places(
        [
            ("home", str(home)),
            ("grants", str(grants)),
            *install_places(sys.prefix, boxmaker.__file__),
        ],
        os.path.realpath,
    )


def _narrowed(suggestion: Suggestion) -> str:
    return ", ".join(suggestion.paths or suggestion.hosts)


def cmd_suggest(args: argparse.Namespace) -> int:
    home = home_from(os.environ)
    out_file: Path = args.out
    grants_dir: Path = args.grants
    refuse_out(out_file, grants_dir, home)
    places = _places(grants_dir, home)
    grants = load_grant_dir(
        lambda: os.listdir(grants_dir),
        lambda name: (grants_dir / name).read_bytes(),
        str(grants_dir),
        places,
    )
    if not grants.valid:
        raise CliError(
            f"{grants.problems[0].render()} (bxctl grants check --dir {grants_dir} lists all)"
        )
    history = AskHistory()
    history.extend(AuditReader(args.dir or Home(home).audit).records())
    found = suggest_grants(history.finish(), grants, args.min_approvals, out_file.name, places)
    if not found:
        out(
            f"nothing to suggest: no ask grant has {args.min_approvals} or more approved calls"
            " that a narrower grant would cover; nothing written"
        )
        return EXIT_OK
    best = found[0]
    try:
        with out_file.open("x", encoding="utf-8") as file:
            file.write(best.text)
    except FileExistsError as exc:
        raise CliError(f"--out {out_file} exists already: choose another name") from exc
    except OSError as exc:
        raise CliError(f"cannot write {out_file}: {exc.strerror or exc}") from exc
    out(
        f"wrote {out_file}: grant {best.grant} narrowed to {_narrowed(best)}, mode auto,"
        f" from {best.approvals} approvals"
    )
    out(f"not applied: review it, then move it into {grants_dir} by hand")
    for other in found[1:]:
        out(
            f"also qualifies: grant {other.grant} narrowed to {_narrowed(other)},"
            f" {other.approvals} approvals"
        )
    return EXIT_OK
