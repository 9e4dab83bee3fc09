"""Refuse: bytes that are only ever attacks (003 section 6.1). Pure; no I/O.

The rules, each named in its finding:

1. Single characters (`characters`): `control-character`, `invisible-character`,
   `bidi-control`, `private-use`, `noncharacter`, `lone-surrogate`; an emoji
   sequence is ordinary text (the decision is in `characters` and
   docs/sanitizer.md).
2. Secrets known by their prefix, and private keys (`secret_prefixes`):
   `secret-github`, `secret-gitlab`, `secret-openai`, `secret-slack`,
   `secret-aws`, `private-key`.
3. In memory writes only (`memory=True`): the chat-template tags of
   `MEMORY_TAGS` (`template-tag`), which memory refuses outright, stricter than
   neutralising.

Not refused: hex or base64 runs, links, code fences, headings, commands, paths,
unassigned code points (other than default-ignorable ones).
"""

from __future__ import annotations

from boxmaker.core.sanitize.characters import refused_characters
from boxmaker.core.sanitize.findings import Finding
from boxmaker.core.sanitize.secret_prefixes import refused_secrets
from boxmaker.core.sanitize.tags import refused_tags


def refuse(text: str, *, memory: bool = False) -> list[Finding]:
    """Every refuse finding in `text`, in text order; none means the text may be kept."""
    findings = refused_characters(text) + refused_secrets(text)
    if memory:
        findings += refused_tags(text)
    return sorted(findings, key=lambda f: (f.start, f.rule))
