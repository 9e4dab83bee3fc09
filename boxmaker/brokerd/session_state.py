"""Each session's taint and untrusted flag, as files under `<home>/broker/sessions/`.

I/O: reads and atomically replaces `<id>.json` (`boxmaker.ipc.files.write_atomic`:
`<id>.json.tmp`, fsync, rename, fsync the directory). A session with no file is
private and trusted. A file that cannot be read or parsed, or that says `public`
(a session is never below private, so brokerd did not write it), raises
`StateUnreadableError`: every call of that session is then denied with
`state_unreadable`. Only valid identifiers reach the file system.

    {"taint": "private", "untrusted": true,
     "untrusted_by": {"session": ..., "call": ..., "tool": ..., "rule": ...}}

`untrusted_by` (the call whose result first made the session untrusted) is
written only once the session is untrusted; a file without it (written before
it was kept) reads as untrusted by an unknown call. Its `rule` is there only
when the result's content matched a flag rule (the grant did not say untrusted,
or did and the content matched too): the rule's name.

`states` lists every session that has a file (for `session_states` on
admin.sock, `bxctl sessions`): each id with its state, or with the
`StateUnreadableError` that reading it raised, so one bad file spoils no other.
Left out: names that are not `<identifier>.json` (a `.tmp` left by a crash
mid-write among them), and a file removed while listed.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson
from pydantic import ValidationError

from boxmaker.core.errors import DamagedError
from boxmaker.core.home.layout import Home
from boxmaker.core.ids import is_identifier
from boxmaker.core.labels import DataClass
from boxmaker.core.policy import SessionState
from boxmaker.core.strict import Strict
from boxmaker.core.wire.broker_admin import UntrustedBy
from boxmaker.ipc.files import write_atomic


class StateUnreadableError(DamagedError):
    """A session's state file exists but cannot be trusted."""


class _StateFile(Strict):
    taint: DataClass
    untrusted: bool
    untrusted_by: UntrustedBy | None = None


class SessionStore:
    """Reads and writes session state files; callers hold the ledger lock."""

    def __init__(self, home: Path) -> None:
        self.directory = Home(home).broker_sessions
        self._prefix = os.path.join(self.directory, "")  # str joins: read at every call

    def _path(self, session: str) -> Path:
        return Path(self._file(session))

    def _file(self, session: str) -> str:
        if not is_identifier(session):
            raise StateUnreadableError(f"{session!r} is not a session identifier")
        return f"{self._prefix}{session}.json"

    def read(self, session: str) -> SessionState:
        path = self._file(session)
        try:
            with open(path, "rb") as file:
                raw = file.read()
        except FileNotFoundError:
            return SessionState()
        except OSError as exc:
            raise StateUnreadableError(f"{path}: {exc.strerror or exc}") from exc
        try:
            state = _StateFile.model_validate_json(raw)
        except ValidationError as exc:
            raise StateUnreadableError(f"{path}: not a session state file") from exc
        if state.taint is DataClass.PUBLIC:
            raise StateUnreadableError(f"{path}: says public, which brokerd never writes")
        by = state.untrusted_by if state.untrusted else None
        return SessionState(taint=state.taint, untrusted=state.untrusted, untrusted_by=by)

    def states(self) -> list[tuple[str, SessionState | StateUnreadableError]]:
        """Every session with a file, in id order, with its state or why it cannot be read."""
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StateUnreadableError(f"{self.directory}: {exc.strerror or exc}") from exc
        found: list[tuple[str, SessionState | StateUnreadableError]] = []
        for name in names:
            session = name.removesuffix(".json")
            if session == name or not is_identifier(session):
                continue
            try:
                state = self.read(session)
            except StateUnreadableError as exc:
                found.append((session, exc))
                continue
            if not os.path.lexists(self._file(session)):
                continue  # removed since listed: read() took it for a new session
            found.append((session, state))
        return found

    def write(self, session: str, state: SessionState) -> None:
        """Replace the session's state atomically and durably; OSError on failure."""
        path = self._path(session)
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        fields: dict[str, object] = {"taint": state.taint.value, "untrusted": state.untrusted}
        if state.untrusted and state.untrusted_by is not None:
            fields["untrusted_by"] = state.untrusted_by.model_dump(mode="json", exclude_none=True)
        body = orjson.dumps(fields)
        write_atomic(path, body)
