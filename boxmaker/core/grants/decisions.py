"""The wire and audit shape of a decision's outcome. No I/O.

    {"outcome": "allowed"} | {"outcome": "ask", "why"?} | {"outcome": "denied", "reason": R}

`why` is `"untrusted"` on an ask that a grant's `when_untrusted` made of what
would otherwise have run (the session had read untrusted content), and absent
(`null` in an audit line) on any other ask.

`allowed` and `ask` are models with no fields but their tag, and refuse unknown
fields like every other model, so `{"outcome": "allowed", "x": 1}` does not parse.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

# the deny-reason table has a module of its own: the audit verifier reads it
# without pydantic (`core.audit.views`)
from boxmaker.core.grants.deny_reasons import DenyReason as DenyReason
from boxmaker.core.strict import Strict


class AllowedRecord(Strict):
    outcome: Literal["allowed"] = "allowed"


class AskRecord(Strict):
    outcome: Literal["ask"] = "ask"
    why: Literal["untrusted"] | None = None  # the session is untrusted (`when_untrusted`)


class DeniedRecord(Strict):
    outcome: Literal["denied"] = "denied"
    reason: DenyReason


DecisionRecord = Annotated[AllowedRecord | AskRecord | DeniedRecord, Field(discriminator="outcome")]
