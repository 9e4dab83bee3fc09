"""The runbook's entries: one member per `## <anchor>` heading in runbook.md. Pure; no I/O.

A message that sends the operator to the runbook ends with `Runbook.X.pointer`,
`see runbook.md#<anchor>`, never with the text written out by hand, so every
pointer names an entry that exists. `tests/test_runbook.py` fails when this
table and the document's headings differ.
"""

from __future__ import annotations

from enum import StrEnum


class Runbook(StrEnum):
    """An entry of runbook.md; the value is its anchor."""

    GRANTS_INVALID = "grants-invalid"
    GRANT_COVERS_BOXMAKER = "grant-covers-boxmaker"
    AUDIT_CHAIN_BROKEN = "audit-chain-broken"
    AUDIT_RECOVERED = "audit-recovered"
    AUDIT_BELOW_CHECKPOINT = "audit-below-checkpoint"
    AUDIT_CHECKPOINTS_BROKEN = "audit-checkpoints-broken"
    BROKERD_ALREADY_RUNNING = "brokerd-already-running"
    SECRET_UNAVAILABLE = "secret-unavailable"  # noqa: S105
    SECRET_IN_A_FILE = "secret-in-a-file"  # noqa: S105
    AUDIT_UNAVAILABLE = "audit-unavailable"
    BROKER_STATE_DAMAGED = "broker-state-damaged"
    SOCKET_FORBIDDEN = "socket-forbidden"
    SOCKET_OWNER_ONLY = "socket-owner-only"
    BROKER_UNAVAILABLE = "broker-unavailable"
    BROKER_BUSY = "broker-busy"
    SANDBOX_UNAVAILABLE = "sandbox-unavailable"
    LOOPD_UNAVAILABLE = "loopd-unavailable"
    LOOPD_BUSY = "loopd-busy"
    LOOPD_SELFTEST_FAILED = "loopd-selftest-failed"
    LOOPD_TAGS_UNEXPECTED = "loopd-tags-unexpected"
    LOOPD_TEMPLATE_REFUSED = "loopd-template-refused"
    LOOPD_MODEL_CRASHED = "loopd-model-crashed"
    LOOPD_MODEL_UNREADABLE = "loopd-model-unreadable"
    LOOPD_ADAPTER_REFUSED = "loopd-adapter-refused"
    LOOPD_GPU_SETTINGS = "loopd-gpu-settings"
    LOOPD_MODEL_TOO_BIG = "loopd-model-too-big"
    LOOPD_CONTEXT_FULL = "loopd-context-full"
    LOOPD_BACKEND_UNREACHABLE = "loopd-backend-unreachable"
    LOOPD_BACKEND_MISMATCH = "loopd-backend-mismatch"
    LOOPD_RPC_REFUSED = "loopd-rpc-refused"
    SESSION_LOG_DAMAGED = "session-log-damaged"
    SANITIZER_RULES = "sanitizer-rules"
    MEMORY_WRITE_REFUSED = "memory-write-refused"
    MEMORY_WRITE_FLAGGED = "memory-write-flagged"
    MEMORY_ENTRY_EXCLUDED = "memory-entry-excluded"
    MEMORYD_BUSY = "memoryd-busy"
    MEMORYD_UNAVAILABLE = "memoryd-unavailable"
    MEMORY_UNAVAILABLE = "memory-unavailable"
    MEMORYD_UNREACHABLE = "memoryd-unreachable"
    GATEWAY_UNREACHABLE = "gateway-unreachable"
    GATEWAY_NOT_CONFIGURED = "gateway-not-configured"

    @property
    def pointer(self) -> str:
        """`see runbook.md#<anchor>`, the words a message ends with."""
        return f"see runbook.md#{self.value}"
