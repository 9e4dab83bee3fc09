"""The worst inputs we can build for each sanitizer pattern, and a clock for scanning them.

Shared by tests/core/sanitize/test_sanitize_redos.py (each scan under 50 ms, or growing
linearly with its input on a machine too busy for that) and
bench/sanitize.py (which may print the worst). No I/O. The clock is the thread's own
CPU time (`time.thread_time`): a scan preempted by other work on a busy machine is not
charged for the wait (under a training run on both cores, wall time made a 31 ms scan
97 ms and its growth 21 times its quarter's).

Each input is a unit repeated to 64 KiB: a near miss of the pattern (a long run
of its prefix, partial matches over and over, filler words that each could also
be the next keyword, anchors packed as close as they go so that every window
check runs). Flag inputs are written as normalised text (lower case, single
spaces), which is what the flag patterns read; they are normalised again before
the scan, which leaves them as they are.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from functools import partial

from boxmaker.core.sanitize.characters import character_classes
from boxmaker.core.sanitize.flag_patterns import PATTERNS as FLAG_PATTERNS
from boxmaker.core.sanitize.flagging import spans
from boxmaker.core.sanitize.normalisation import normalise
from boxmaker.core.sanitize.secret_prefixes import PATTERNS as SECRET_PATTERNS
from boxmaker.core.sanitize.secret_prefixes import SecretPattern
from boxmaker.core.sanitize.tags import refused_tags

SIZE = 64 * 1024
LIMIT_S = 0.050
GROWTH_LIMIT = 8.0  # a scan over LIMIT_S must take less than this times its quarter's

_FILLER = "all " * 8

FLAG_UNITS: dict[str, tuple[str, ...]] = {
    "ignore-earlier": (
        "ignore " + _FILLER,
        "ignore previous previous previous previous previous previous previous x ",
        "ignore your all your all your all your all instructionz ",
        "ignore ",
    ),
    "ignore-earlier-typo": (
        "ignroe " + _FILLER,
        "ignroe previuos previuos previuos previuos previuos instrucitonz ",
        "disregrad your all your all your all prompz ",
        "ignroe ",
    ),
    "ignore-above-and": ("ignore all of the above text, and instead ", "ignore the above, and "),
    "override-system-prompt": ("system prompt ", "overridden the system prompt "),
    "system-prompt-override": ("system prompt overrid ", "system prompt "),
    "forget-everything": ("forget everything you were ", "forget about everything "),
    "send-to-url": (
        "send the secret to https:/ ",
        "to https://",
        "send secret to www.",
        "at the website http:/",
    ),
    "send-to-address": (
        "send the secret to eve.example.c ",
        "to " + "a." * 40 + " ",
        "send secret to mail address 'x" + "y" * 70 + ".com ",
        "to the email ",
    ),
    "pay-to-account": ("pay to the account ", "transfer to the bank accoun ", "to my account "),
    "pay-to-iban": (
        "pay to de" + "8" * 40 + " ",
        "send to the iban number: de89 ",
        "to the following account: " + "de89" * 8 + " ",
    ),
    "image-placeholder": (
        "![" + "a" * 100 + "](//" + "b" * 299 + "?" + " ",
        "![](//?" + "q" * 50 + "=",
        "![" + "]" * 50,
    ),
    "reveal-your-prompt": ("your ", "repeat back me your your your prompx ", "your " + _FILLER),
    "reveal-the-prompt": ("prompt ", "repeat the " + "a " * 40 + "prompt ", "message "),
    "dump-whole-conversation": ("conversation ", "print all the " + "whole " * 10 + "chat "),
    "dump-everything-above": ("above ", "print all of the " + "everything " * 6),
    "write-authorized-keys": ("authorized_keys ", "add " * 20 + "authorized_keyz "),
    "write-agent-instructions": (".md ", "agents.md ", "add " * 20 + "agents.mdx "),
    "write-agent-config": (".cursorrules ", ".ssh/config ", ".cursorrule "),
    "write-boxmaker-config": (".toml ", "loopd.toml ", "add loopd.tom "),
    "write-boxmaker-etc": ("/etc/boxmaker/", "/etc/boxmaker"),
    "write-startup-file": (".bashrc ", "add .bashrc ", "curl " * 10 + ".profile "),
    "write-crontab": ("crontab ", "add crontab ", "crontabs "),
    "write-sudoers": ("sudoers ", "add sudoers "),
    "write-rc-local": ("/etc/rc.local ", "add /etc/rc.loca "),
    "you-are-now": ("you are now a a a a ", "you are now "),
    "new-instructions": ("instructions ", "new important instructions ", "new new new new "),
    "mode-switch": ("mode on ", "dan mode enabl ", "mode enabled "),
    "mode-switch-enter": ("mode ", "enable dan mod "),
    "mode-switch-dan": ("do anything no ", "do anything "),
    "mode-switch-developer": ("mode enabled ", "developer mode enabled "),
    "no-restrictions": ("you are now no no no no ", "you have ", "you are free of any x "),
    "hide-from-user": ("user ", "do not tell the users ", "never mention this thing to the "),
    "message-to-the-ai": (
        "important message from " + "a " * 8 + "to you, the ",
        "important message from ",
    ),
    "note-to-the-ai": ("note to the ai assistant ", "note to "),
    "message-from-me-to-you": ("important message from me, " + "a " * 6, "important message from "),
    "todo-to-the-ai": (
        "todo: ai assistant, " + "a " * 6,
        "todo(agent): ",
        "todo for you, the ai model ",
        "todo ",
    ),
    "todo-you-must": ("todo: you must now ignore all of the ", "todo: you ", "todo "),
    "fake-system-header": (
        "###### ( system_message ",
        "### system_prompt ",
        "[system_message](#" + "a" * 40,
        "[system] ",
        "system override ",
        "<|system|> ",
        "# ",
    ),
}

SECRET_UNITS: dict[str, tuple[str, ...]] = {
    "github-classic": ("ghp_" + "a" * 29 + " ", "ghp_", "gh"),
    "github-fine-grained": ("github_pat_" + "a" * 21 + " ", "github_pat_"),
    "gitlab": ("glpat-" + "a" * 19 + " ", "glpat-"),
    "openai": ("sk-" + "a" * SIZE, "sk-" + "a" * 19 + " ", "ask-" + "a" * 30 + " ", "sk-"),
    "slack": ("xoxb-" + "a" * 9 + " ", "xoxb-"),
    "aws": ("AKIA" + "A" * 15 + " ", "AKIA", "AKIA" + "A" * 20 + " "),
    "private-key": (
        "-----BEGIN " + "A " * 20 + "PRIVATE KE\n",
        "-----BEGIN PRIVATE KEY-----x",
        "-----BEGIN ",
    ),
    "aws-secret-named": (
        "secret_access_key" + " " * 8 + "Ab" * 19 + "A ",
        "SECRET_ACCESS_KEY=" + "Ab" * 21 + " ",
        "secret access ",
        "secret_access_key" + "=" * 9,
    ),
    "aws-secret-beside-id": (
        "a" * 39 + " ",
        "AKIAABCDEFGHIJKLMNOP\n" * 12 + "Ab" * 20 + "\n",
        "AKIAABCDEFGHIJKLMNOP\n\n\n\n" + "Ab" * 20 + "\n\n\n\n",
        "Ab" * 20 + "= AKIAABCDEFGHIJKLMNOP ",
    ),
    "key-body-der": (
        "M" * 63 + " ",
        "M" + "A" * 62 + " ",
        "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" * 2 + "\n",
    ),
    "key-body-openssh": (
        "b3BlbnNzaC1rZXktdjE" + "A" * 44 + " ",
        "b3BlbnNzaC1rZXktdjE",
        "b3BlbnNzaC1rZXktdjE" + "A" * 45 + "\n",
    ),
}

OTHER_UNITS: dict[str, tuple[str, ...]] = {
    "template-tags": ("<|im_start", "<", "<end_of_tur", "<" + "|" * 10),
    "characters": ("\U0001f469\u200d", "\U0001f600\ufe0f", "1\ufe0f", "\U0001f3f4\U000e0067"),
    "normalise": ("\uff29\u200b ", "a \u2028\u200b b", "1 0 3 4 5 7 @ $ "),
}


def fill(unit: str, size: int = SIZE) -> str:
    """`unit` repeated to `size` characters."""
    return (unit * (size // len(unit) + 1))[:size]


def best_of(work: Callable[[], object], rounds: int = 3) -> float:
    """The fastest of `rounds` runs of `work`, in seconds of this thread's CPU time."""
    times: list[float] = []
    for _ in range(rounds):
        start = time.thread_time()
        work()
        times.append(time.thread_time() - start)
    return min(times)


def _secret_scan(pattern: SecretPattern, text: str) -> list[re.Match[str]]:
    return [m for m in pattern.regex.finditer(text) if pattern.accept(text, m)]


def _characters_scan(text: str) -> int:
    """The character scan's regex over `text`, in C (the work per finding after it is
    linear in the findings, not a pattern's)."""
    return character_classes().scan.subn("", text)[1]


def scans(size: int = SIZE) -> list[tuple[str, str, Callable[[], object]]]:
    """(what is scanned, the unit, the scan of its input of `size` characters) for every
    pattern and unit, always in the same order."""
    out: list[tuple[str, str, Callable[[], object]]] = []
    for pattern in FLAG_PATTERNS:
        for unit in FLAG_UNITS[pattern.name]:
            text = normalise(fill(unit, size)).text
            out.append((f"flag {pattern.name}", unit, partial(spans, pattern, text)))
    for secret in SECRET_PATTERNS:
        for unit in SECRET_UNITS[secret.name]:
            scan = partial(_secret_scan, secret, fill(unit, size))
            out.append((f"refuse {secret.name}", unit, scan))
    for unit in OTHER_UNITS["template-tags"]:
        out.append(("refuse template-tag", unit, partial(refused_tags, fill(unit, size))))
    for unit in OTHER_UNITS["characters"]:
        out.append(("refuse characters", unit, partial(_characters_scan, fill(unit, size))))
    for unit in OTHER_UNITS["normalise"]:
        out.append(("flag normalise", unit, partial(normalise, fill(unit, size))))
    return out


def growth(large: Callable[[], object], quarter: Callable[[], object]) -> float:
    """How many times longer a scan of the whole input takes than one of its quarter:
    about 4 for linear time, 16 for quadratic, whatever else the machine is doing
    (best of three each, taken back to back)."""
    return best_of(large) / max(best_of(quarter), 1e-9)


def worst() -> tuple[float, float, str, str]:
    """The slowest scan of all: (seconds, its growth against its quarter, what, unit)."""
    whole, quarters = scans(), scans(SIZE // 4)  # in the same order
    seconds, index, what, unit = max(
        (best_of(scan), index, what, unit) for index, (what, unit, scan) in enumerate(whole)
    )
    return seconds, growth(whole[index][2], quarters[index][2]), what, unit
