"""A role's secrets: where each is read from, the checks a read must pass, and the
`Secret` that holds one. Pure; no I/O: the reading is `boxmaker.ipc.secrets`.

A role names each secret it needs in its configuration file as a table
`[secrets.<name>]` (brokerd now; memoryd and gatewayd when they hold keys; never
loopd, which holds no credentials: an import-linter contract keeps this module
and its reader out of it). The rules, in the order they are applied:

1. A table gives at most one source; an empty table means the credential named
   like the secret:

       credential = "<id>"   a systemd credential, $CREDENTIALS_DIRECTORY/<id>
                             (LoadCredential= or LoadCredentialEncrypted=)
       env = "<VARIABLE>"    an environment variable; removed from the role's
                             environment once read, so no child inherits it
       file = "/abs/path"    a file only its owner can read (0600 or 0400); the
                             role warns at every start that a file is weaker than
                             a credential (runbook.md#secret-in-a-file)

   Two sources, a name or credential id that is not a plain file name, a
   variable name that is not one (or is a `BOXMAKER_*` setting) or a relative
   path is a `ConfigError` when the configuration loads.
2. A credential or file is opened without following a link at its last
   component, and is checked on the open descriptor (`fstat`), so nothing can be
   swapped in between the check and the read: it must be a regular file. A file
   must also have no group or other permission bits and belong to the uid that
   reads it. A credential is checked for other bits only: systemd gives the
   unit's user read access to a root-owned 0400 file through an ACL, whose mask
   shows as the group bits, and the directory is systemd's and private.
3. The value is at most 65,536 bytes as read; one trailing newline is removed
   (editors add one); what is left must not be empty.
4. A secret that cannot be read stops the role: one line naming it and its
   source, `see runbook.md#secret-unavailable` (`unavailable`). The value is
   never part of any message.

How far a `Secret` keeps its value out of sight, in CPython:

- Guaranteed: `repr`, `str`, `format` (so f-strings, `%s`, `%r` and logging) show
  `Secret('<name>', ****)`; a pydantic model holding one dumps that mask too, in
  Python and in JSON; pickling and copying raise `TypeError`; there is no
  `__dict__`. An exception's message never holds the value, and a traceback
  that shows locals (`TracebackException(capture_locals=True)`, pytest's
  `--showlocals`, rich) shows the masked repr, a `memoryview`'s address or a
  length, since the value lives only in the Secret's buffer while it is read.
- The value is held in one bytearray, filled in place by the reader and never
  resized (a resize could leave a copy behind in freed memory). `wipe()` zeroes
  it in place, and `__del__` wipes, so in CPython (reference counting) it is
  zeroed as soon as the last reference goes: at the latest when the role's
  `serve` returns.
- Not guaranteed: `reveal()` returns an immutable `bytes` copy that cannot be
  wiped and lives until the garbage collector frees it, its memory not zeroed;
  so does anything derived from it (a `str`, a header, a buffer inside a library
  the value is handed to). Prefer `exposed()`, a read-only view of the buffer
  itself, where the consumer takes a buffer. A value read from the environment
  also exists as the `str` and `bytes` of `os.environ` (freed unwiped when the
  variable is removed) and, for the whole life of the process, in its initial
  environment block, readable in /proc/<pid>/environ by its own user and root:
  removing the variable keeps it from children, not from those. Memory is not
  locked, so any of these copies may be paged out to swap, and a core dump holds
  them: keep swap encrypted (or off) and core dumps off for the roles. Nothing
  here protects against code running in the same process, a debugger, or root.
"""

from __future__ import annotations

import re
import stat
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, NoReturn, Self, final

from pydantic import AfterValidator, GetCoreSchemaHandler, GetJsonSchemaHandler, model_validator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from boxmaker.core.home.settings_check import Section
from boxmaker.core.runbook import Runbook

MAX_SECRET_BYTES = 65_536
MASK = "****"
_NEWLINE = 0x0A
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SETTINGS_PREFIX = "BOXMAKER_"  # the roles' own settings: refused as unknown at start


# --- where a secret comes from (rule 1) ---------------------------------------------


def _plain_name(value: str) -> str:
    if not _PLAIN_NAME.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a plain name (letters, digits, `_`, `.`, `-`; "
            "at most 64; not starting with `.` or `-`)"
        )
    return value


SecretName = Annotated[str, AfterValidator(_plain_name)]


class SourceKind(StrEnum):
    """Where a secret is read from: the key of its `[secrets.<name>]` table."""

    CREDENTIAL = "credential"
    ENV = "env"
    FILE = "file"


@dataclass(frozen=True)
class SecretPlace:
    """One secret to read: its name, its kind of source and where in that source."""

    name: str
    kind: SourceKind
    where: str  # a credential id, a variable's name, or an absolute path

    def describe(self) -> str:
        """`<name> (<kind> <where>)`, how messages name it."""
        return f"{self.name} ({self.kind} {self.where})"


class SecretSource(Section):
    """A `[secrets.<name>]` table: at most one of `credential`, `env`, `file`."""

    credential: SecretName | None = None
    env: str | None = None
    file: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        given = [kind.value for kind in SourceKind if getattr(self, kind.value) is not None]
        if len(given) > 1:
            raise ValueError(f"give one of credential, env or file, not {' and '.join(given)}")
        if self.env is not None:
            if not _VARIABLE.fullmatch(self.env):
                raise ValueError(f"env: {self.env!r} is not an environment variable's name")
            if self.env.startswith(_SETTINGS_PREFIX):
                raise ValueError(f"env: {self.env} is a boxmaker setting's name; choose another")
        if self.file is not None and (not self.file.startswith("/") or "\0" in self.file):
            raise ValueError(f"file: {self.file!r} is not an absolute path")
        return self

    def place(self, name: str) -> SecretPlace:
        """Where the secret `name` is read from; the credential `name` when none is given."""
        if self.env is not None:
            return SecretPlace(name, SourceKind.ENV, self.env)
        if self.file is not None:
            return SecretPlace(name, SourceKind.FILE, self.file)
        return SecretPlace(name, SourceKind.CREDENTIAL, self.credential or name)


# what a role's settings class declares: `secrets: SecretsTable = Field(default_factory=dict)`
SecretsTable = dict[SecretName, SecretSource]


def places(table: Mapping[str, SecretSource]) -> list[SecretPlace]:
    """Every secret of `table`, in the order of their names."""
    return [table[name].place(name) for name in sorted(table)]


# --- what may hold a secret, and the one line when it cannot be read (rules 2, 4) --


def _what(mode: int) -> str:
    for test, what in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return what
    return "not a plain file"


def refusal(kind: SourceKind, mode: int, owner: int, uid: int) -> str | None:
    """Why an open file, by its fstat's `st_mode` and `st_uid`, cannot hold a secret
    of `kind` read by `uid`; None when it can (rule 2)."""
    if not stat.S_ISREG(mode):
        return f"it is {_what(mode)}, not a regular file"
    bits = stat.S_IMODE(mode)
    if kind is SourceKind.FILE:
        if bits & 0o077:
            return f"its group or others may use it (mode {bits:04o}); chmod 600 it"
        if owner != uid:
            return f"it belongs to uid {owner}, not to uid {uid} that reads it; chown it"
    elif bits & 0o007:
        return f"others may use it (mode {bits:04o})"
    return None


def unavailable(place: SecretPlace, why: str) -> str:
    """The one line a role stops with when `place` cannot be read."""
    return f"secret {place.describe()}: {why}; {Runbook.SECRET_UNAVAILABLE.pointer}"


def in_a_file(place: SecretPlace) -> str:
    """The warning a role logs at start for a secret read from a file."""
    return (
        f"event=secret_in_a_file name={place.name} path={place.where}: a file is weaker "
        f"than a systemd credential; {Runbook.SECRET_IN_A_FILE.pointer}"
    )


# --- the Secret (rule 3, and the guarantees above) ----------------------------------


def _zero(buffer: bytearray) -> None:
    with memoryview(buffer) as view:
        view[:] = bytes(len(view))  # in place: a bytearray slice assignment may copy


@final
class Secret:
    """A secret's value in a bytearray that only `reveal` and `exposed` show.

    Built by a reader with `Secret.filled`, or from a bytearray the Secret then
    owns (it is wiped with the Secret). Every printed form is the mask.
    """

    __slots__ = ("_buffer", "_name", "_wiped")

    def __init__(self, name: str, buffer: bytearray) -> None:
        if not isinstance(buffer, bytearray):
            raise TypeError("a Secret holds a bytearray (bytes cannot be wiped)")
        self._name = name
        self._buffer = buffer
        self._wiped = False

    @classmethod
    def filled(
        cls,
        name: str,
        fill: Callable[[memoryview], int],
        capacity: int = MAX_SECRET_BYTES + 1,
    ) -> Secret:
        """The value `fill` writes at the start of the view it is given (returning
        how many bytes), less one trailing newline. ValueError (its message never
        holds the value) when it is empty or fills the view (over the limit); the
        buffer is wiped however this ends."""
        scratch = cls(name, bytearray(capacity))  # the value is never in a plain local
        try:
            with memoryview(scratch._buffer) as view:
                size = fill(view)
                if size >= capacity:
                    raise ValueError(f"it is larger than {capacity - 1} bytes")
                if size and view[size - 1] == _NEWLINE:
                    size -= 1
                if size == 0:
                    raise ValueError("it is empty")
                value = cls(name, bytearray(size))
                with memoryview(value._buffer) as target:
                    target[:] = view[:size]
                return value
        finally:
            scratch.wipe()

    @property
    def name(self) -> str:
        return self._name

    @property
    def wiped(self) -> bool:
        return self._wiped

    def reveal(self) -> bytes:
        """The value, as an immutable copy that cannot be wiped (see the module's
        docstring); prefer `exposed` where a buffer will do."""
        self._check_live()
        return bytes(self._buffer)

    @contextmanager
    def exposed(self) -> Iterator[memoryview]:
        """A read-only view of the value itself, no copy, released when the block ends."""
        self._check_live()
        with memoryview(self._buffer) as view, view.toreadonly() as readonly:
            yield readonly

    def wipe(self) -> None:
        """Zero the value in place; `reveal` and `exposed` refuse from now on."""
        _zero(self._buffer)
        self._wiped = True

    def _check_live(self) -> None:
        if self._wiped:
            raise ValueError(f"{self!r} was wiped")

    # `zero` is bound now: at interpreter exit this module's globals may be gone first
    def __del__(self, zero: Callable[[bytearray], None] = _zero) -> None:
        buffer = getattr(self, "_buffer", None)  # None when __init__ refused
        if buffer is not None:
            zero(buffer)

    def __repr__(self) -> str:
        return f"Secret({self._name!r}, {MASK})"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return format(repr(self), spec)

    def _refuse_copy(self, *args: object) -> NoReturn:
        raise TypeError(f"{self!r} cannot be pickled or copied")

    __reduce__ = _refuse_copy
    __reduce_ex__ = _refuse_copy
    __getstate__ = _refuse_copy
    __copy__ = _refuse_copy
    __deepcopy__ = _refuse_copy

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        """In a pydantic model: only a Secret validates, and every dump is the mask."""
        return core_schema.is_instance_schema(
            cls,
            serialization=core_schema.plain_serializer_function_ser_schema(
                repr, return_schema=core_schema.str_schema(), when_used="always"
            ),
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"type": "string", "description": "a secret, always shown as its mask"}


class Secrets(Mapping[str, Secret]):
    """The secrets a role loaded at start, by name. Read-only; shown by name only."""

    __slots__ = ("_by_name",)

    def __init__(self, by_name: Mapping[str, Secret] | None = None) -> None:
        self._by_name = dict(by_name or {})

    def __getitem__(self, name: str) -> Secret:
        return self._by_name[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def wipe(self) -> None:
        """Wipe every secret."""
        for secret in self._by_name.values():
            secret.wipe()

    def __repr__(self) -> str:
        return f"Secrets({sorted(self._by_name)!r})"

    def _refuse_copy(self, *args: object) -> NoReturn:
        raise TypeError("Secrets cannot be pickled or copied")

    __reduce__ = _refuse_copy
    __reduce_ex__ = _refuse_copy
    __copy__ = _refuse_copy
    __deepcopy__ = _refuse_copy
