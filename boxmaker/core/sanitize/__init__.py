"""The sanitizer: refuse, neutralise, flag (003 section 6). Pure; no I/O.

    refuse(text, *, memory=False) -> list[Finding]    bytes that are only ever attacks
    flag(text) -> list[Finding]                       text shaped like an attack
    neutralise(text, tags) -> Neutralised             a model's chat-template tags disarmed
    check(text, tags=(), *, memory=False) -> list[Finding]   all three, in text order

A Finding names its action, its rule (a stable kebab-case name such as
`secret-github`, `control-character`, `exfil-url`; `RULES` has each with its
action and one sentence), where it starts in the text (a code-point offset) and
a short excerpt safe to print (one line, secrets cut to their prefix and an
ellipsis).

Used by memoryd (refuse, then flag, with `memory=True`), loopd (neutralise, with
the loaded model's tags) and `bxctl sanitize check` (check, with `MEMORY_TAGS`).
The nothing-is-refused-that-code-contains promise (owner, 2026-09-25) is kept by
the code-work corpus under tests/fixtures/sanitize/, which must pass every
action untouched; docs/sanitizer.md has the rule table, the emoji decision, the
normalisation, the attribution and how to change a rule (003 section 6.5).

Modules, one purpose each (the generated Unicode ranges are
`boxmaker.core.sanitize.unicode_tables`, shared with `core.display.hidden_chars`):

    findings         the answer types (Action, Finding, Neutralised, Rule)
    characters       refuse rules on single code points, and the emoji exception
    secret_prefixes  refuse rules on prefixed and named secrets and private keys; redact
    key_bodies       what a private key's header and base64 body look like
    tags             MEMORY_TAGS, refusing tags in memory, neutralise
    refusal          the refuse action
    normalisation    the folding the flag patterns read
    flag_words       the words the flag patterns are made of
    flag_patterns    the flag patterns (after Hermes' strict threat patterns, MIT)
    flagging         the flag action
    rules            RULES
"""

from __future__ import annotations

from collections.abc import Sequence

from boxmaker.core.sanitize.findings import Action, Finding, Neutralised, Rule
from boxmaker.core.sanitize.flagging import flag
from boxmaker.core.sanitize.refusal import refuse
from boxmaker.core.sanitize.rules import RULES
from boxmaker.core.sanitize.tags import MEMORY_TAGS, neutralise, neutralised_tags

_ACTION_ORDER = {Action.REFUSE: 0, Action.NEUTRALISE: 1, Action.FLAG: 2}


def check(text: str, tags: Sequence[str] = (), *, memory: bool = False) -> list[Finding]:
    """Everything the three actions find in `text`: refuse's findings, flag's, and
    one neutralise finding per tag of `tags` that neutralise would disarm; sorted
    by start (then refuse, neutralise, flag at one start)."""
    findings = refuse(text, memory=memory) + flag(text) + neutralised_tags(text, tags)
    return sorted(findings, key=lambda f: (f.start, _ACTION_ORDER[f.action], f.rule))


__all__ = [
    "MEMORY_TAGS",
    "RULES",
    "Action",
    "Finding",
    "Neutralised",
    "Rule",
    "check",
    "flag",
    "neutralise",
    "refuse",
]
