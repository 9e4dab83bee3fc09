"""The two corpora of 003 section 6.4, one test per line: attacks get their action, code passes.

tests/fixtures/sanitize/attack.jsonl: each line a case `{"text", "action", "rule",
"source", "memory"?}`; `check(text, MEMORY_TAGS, memory=...)` (memory defaults to
true, as memoryd and `bxctl sanitize check` check) must give a finding with that
action and rule. code_work.jsonl: `{"text", "source", "near"?}`; the text must pass
every action untouched: no finding from a memory-write check, and `neutralise`
leaves it as it is. `near` names the rule a case is a near miss for; every rule has
at least one attack case and one near miss. See tests/fixtures/sanitize/README.md.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from boxmaker.core.sanitize import MEMORY_TAGS, RULES, Action, check, neutralise

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "sanitize"
ATTACK = FIXTURES / "attack.jsonl"
CODE_WORK = FIXTURES / "code_work.jsonl"


def _cases(path: Path) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            case = json.loads(line)
            case["line"] = number
            cases.append(case)
    return cases


def _id(case: dict[str, Any]) -> str:
    words = re.sub(r"[^A-Za-z0-9]+", "-", case["source"]).strip("-").lower()
    return f"{case['line']}-{words[:48]}"


ATTACKS = _cases(ATTACK)
CODE = _cases(CODE_WORK)


@pytest.mark.parametrize("case", ATTACKS, ids=[_id(c) for c in ATTACKS])
def test_attack_gets_its_action(case: dict[str, Any]) -> None:
    findings = check(case["text"], MEMORY_TAGS, memory=case.get("memory", True))
    got = [(f.action.value, f.rule) for f in findings]
    assert (case["action"], case["rule"]) in got, f"{case['source']}: got {got}"


@pytest.mark.parametrize("case", CODE, ids=[_id(c) for c in CODE])
def test_code_work_passes_untouched(case: dict[str, Any]) -> None:
    text = case["text"]
    findings = check(text, MEMORY_TAGS, memory=True)
    assert findings == [], f"{case['source']}: {findings}"
    assert neutralise(text, MEMORY_TAGS).text == text


def test_every_case_is_well_formed() -> None:
    for case in ATTACKS:
        assert set(case) <= {"text", "action", "rule", "source", "memory", "line"}, case
        assert case["rule"] in RULES, case
        assert RULES[case["rule"]].action == Action(case["action"]), case
        assert case["source"].strip(), case
    for case in CODE:
        assert set(case) <= {"text", "source", "near", "line"}, case
        assert case.get("near", next(iter(RULES))) in RULES, case
        assert case["source"].strip(), case


def test_every_rule_has_an_attack_and_a_near_miss() -> None:
    attacked = {case["rule"] for case in ATTACKS}
    near = {case["near"] for case in CODE if "near" in case}
    assert set(RULES) - attacked == set(), "rules without an attack case"
    assert set(RULES) - near == set(), "rules without a near miss in the code-work corpus"
