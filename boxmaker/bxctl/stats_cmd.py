"""`bxctl approvals --stats`: how the owner has answered asks, per grant, from the audit log.

I/O: reads the audit log (`audit_reader`; no daemon is asked) and prints the
figures of `boxmaker.core.audit.approval_stats`. Text, one row per grant (most asks
first) and a total:

    grant          asks  approved  refused  expired  abandoned  rate  median   p90
    projects-read     5         4        1        0          0   80%   8.0 s  30.0 s
    total            11         6        3        1          1   60%   6.0 s  30.0 s

`rate` is approved of answered (approved, refused, expired); `median` and `p90`
are the times from the ask to the owner's answer (approved and refused); `-`
where there is nothing to measure. With no ask: `no asks in the audit log`
(and ` since <day>` with `--since`).
`--json` prints one object instead:

    {"since": null | "YYYY-MM-DD", "grants": [{"grant", "asks", "approved",
     "refused", "expired", "abandoned", "approve_rate", "median_answer_ms",
     "p90_answer_ms"}, ...], "total": {the same, without "grant"}, "skipped_lines": n}

Lines that are not records are skipped; their count goes to stderr as one line.
"""

from __future__ import annotations

import argparse
import datetime
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from boxmaker.bxctl.audit_reader import AuditReader
from boxmaker.bxctl.cli import EXIT_OK, EXIT_USAGE, CliError, Parser, err, out
from boxmaker.core.audit.approval_stats import ApprovalStats, GrantStats, approval_stats
from boxmaker.core.audit.ask_history import AskHistory
from boxmaker.core.home.layout import Home, home_from

Handler = Callable[[argparse.Namespace], int]


def add_stats_options(listing: Parser, plain: Handler) -> None:
    """Give `bxctl approvals` its `--stats` options; `plain` lists what is waiting."""
    listing.add_argument(
        "--stats",
        action="store_true",
        help="instead of what is waiting: per grant, how asks were answered (audit log)",
    )
    listing.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="with --stats: the audit directory (default: $BOXMAKER_HOME/audit)",
    )
    listing.add_argument(
        "--since", default=None, help="with --stats: only asks on or after this day (YYYY-MM-DD)"
    )
    listing.add_argument("--json", action="store_true", help="with --stats: print one JSON object")

    def handler(args: argparse.Namespace) -> int:
        if args.stats:
            return cmd_stats(args)
        if args.dir is not None or args.since is not None or args.json:
            raise CliError("--dir, --since and --json go with --stats", EXIT_USAGE)
        return plain(args)

    listing.set_defaults(handler=handler)


def since_day(text: str | None) -> str:
    """`--since` checked: "" for none, else the `YYYY-MM-DD` of a real day."""
    if text is None:
        return ""
    try:
        if len(text) != 10:
            raise ValueError(text)
        datetime.date.fromisoformat(text)
    except ValueError as exc:
        raise CliError(f"--since: not a day like 2026-11-30: {text!r}", EXIT_USAGE) from exc
    return text


def cmd_stats(args: argparse.Namespace) -> int:
    since = since_day(args.since)
    audit_dir: Path = args.dir or Home(home_from(os.environ)).audit
    reader = AuditReader(audit_dir, since)
    history = AskHistory(f"{since}T00:00:00.000Z" if since else "")
    history.extend(reader.records())
    stats = approval_stats(history.finish())
    if args.json:
        out(orjson.dumps(stats_object(stats, since or None, reader.skipped)).decode())
    else:
        for line in stats_lines(stats, since):
            out(line)
    if reader.skipped:
        err(f"approvals: skipped {reader.skipped} lines that are not audit records")
    return EXIT_OK


def _row_object(row: GrantStats) -> dict[str, Any]:
    return {
        "asks": row.asks,
        "approved": row.approved,
        "refused": row.refused,
        "expired": row.expired,
        "abandoned": row.abandoned,
        "approve_rate": None if row.rate is None else round(row.rate, 4),
        "median_answer_ms": row.median_ms,
        "p90_answer_ms": row.p90_ms,
    }


def stats_object(stats: ApprovalStats, since: str | None, skipped: int) -> dict[str, Any]:
    """The `--json` object (module docstring)."""
    return {
        "since": since,
        "grants": [{"grant": row.grant, **_row_object(row)} for row in stats.grants],
        "total": _row_object(stats.total),
        "skipped_lines": skipped,
    }


_HEADS = ("grant", "asks", "approved", "refused", "expired", "abandoned", "rate", "median", "p90")


def span(ms: int | None) -> str:
    """A duration as `8.0 s`, `3 min 20 s` or `1 h 5 min`; `-` for none."""
    if ms is None:
        return "-"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    seconds = ms // 1000
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def _cells(name: str, row: GrantStats) -> list[str]:
    rate = "-" if row.rate is None else f"{round(row.rate * 100)}%"
    counts = (row.asks, row.approved, row.refused, row.expired, row.abandoned)
    return [name, *map(str, counts), rate, span(row.median_ms), span(row.p90_ms)]


def stats_lines(stats: ApprovalStats, since: str = "") -> list[str]:
    """The text table (module docstring)."""
    if not stats.grants:
        return ["no asks in the audit log" + (f" since {since}" if since else "")]
    rows = [list(_HEADS)]
    rows += [_cells(row.grant or "-", row) for row in stats.grants]
    rows.append(_cells("total", stats.total))
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADS))]
    return [
        "  ".join(
            cell.ljust(widths[0]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)
        ).rstrip()
        for row in rows
    ]
