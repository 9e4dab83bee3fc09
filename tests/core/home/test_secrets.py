"""`boxmaker.core.home.secrets`: the sources a table may name, the checks on an open file,
and a `Secret` whose value shows nowhere but through `reveal` and `exposed`."""

from __future__ import annotations

import copy
import logging
import pickle
import stat
import traceback
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from boxmaker.core.home.secrets import (
    MAX_SECRET_BYTES,
    Secret,
    SecretPlace,
    Secrets,
    SecretSource,
    SourceKind,
    in_a_file,
    places,
    refusal,
    unavailable,
)
from boxmaker.core.runbook import Runbook

VALUE = b"s3cr3t-value-7f1c"
MASK = "Secret('api', ****)"


def secret(value: bytes = VALUE, name: str = "api") -> Secret:
    return Secret(name, bytearray(value))


def fill_with(data: bytes, grabbed: list[Any] | None = None) -> Any:
    """A fill that writes `data` (cut to the view) and keeps the view's buffer in `grabbed`."""

    def fill(view: memoryview) -> int:
        if grabbed is not None:
            grabbed.append(view.obj)
        size = min(len(data), len(view))
        view[:size] = data[:size]
        return size

    return fill


# --- sources ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "place"),
    [
        ({}, SecretPlace("api", SourceKind.CREDENTIAL, "api")),
        ({"credential": "api.key"}, SecretPlace("api", SourceKind.CREDENTIAL, "api.key")),
        ({"env": "API_TOKEN"}, SecretPlace("api", SourceKind.ENV, "API_TOKEN")),
        ({"file": "/etc/boxmaker/api"}, SecretPlace("api", SourceKind.FILE, "/etc/boxmaker/api")),
    ],
    ids=["empty-is-the-credential", "credential", "env", "file"],
)
def test_each_source_and_the_default(table: dict[str, str], place: SecretPlace) -> None:
    assert SecretSource.model_validate(table).place("api") == place


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ({"env": "A", "file": "/a"}, "not env and file"),
        ({"credential": "a", "env": "A", "file": "/a"}, "not credential and env and file"),
        ({"credential": "../a"}, "not a plain name"),
        ({"credential": "."}, "not a plain name"),
        ({"credential": "a/b"}, "not a plain name"),
        ({"env": "1A"}, "not an environment variable's name"),
        ({"env": "A-B"}, "not an environment variable's name"),
        ({"env": "BOXMAKER_TOKEN"}, "boxmaker setting"),
        ({"file": "relative/path"}, "not an absolute path"),
        ({"file": "/a\0b"}, "not an absolute path"),
        ({"file": 3}, "string"),
        ({"path": "/a"}, "Extra inputs"),
    ],
    ids=[
        "two",
        "three",
        "credential-dotdot",
        "credential-dot",
        "credential-slash",
        "env-digit",
        "env-dash",
        "env-boxmaker",
        "file-relative",
        "file-nul",
        "file-not-a-string",
        "unknown-key",
    ],
)
def test_a_wrong_table_is_refused(table: dict[str, object], expected: str) -> None:
    with pytest.raises(ValidationError, match=expected):
        SecretSource.model_validate(table)


def test_places_come_in_name_order() -> None:
    table = {"b": SecretSource(env="B"), "a": SecretSource()}
    assert [place.name for place in places(table)] == ["a", "b"]


# --- what an open file must be ------------------------------------------------------


REG = stat.S_IFREG


@pytest.mark.parametrize(
    ("kind", "mode", "owner", "expected"),
    [
        (SourceKind.FILE, REG | 0o600, 7, None),
        (SourceKind.FILE, REG | 0o400, 7, None),
        (SourceKind.FILE, REG | 0o640, 7, "group or others may use it (mode 0640)"),
        (SourceKind.FILE, REG | 0o604, 7, "group or others may use it (mode 0604)"),
        (SourceKind.FILE, REG | 0o600, 8, "belongs to uid 8, not to uid 7"),
        (SourceKind.FILE, stat.S_IFDIR | 0o700, 7, "a directory, not a regular file"),
        (SourceKind.FILE, stat.S_IFIFO | 0o600, 7, "a FIFO"),
        (SourceKind.FILE, stat.S_IFCHR | 0o600, 7, "a character device"),
        (SourceKind.CREDENTIAL, REG | 0o400, 0, None),  # systemd's: root's, read by ACL
        (SourceKind.CREDENTIAL, REG | 0o440, 0, None),  # the ACL's mask shows as group bits
        (SourceKind.CREDENTIAL, REG | 0o404, 0, "others may use it (mode 0404)"),
        (SourceKind.CREDENTIAL, stat.S_IFSOCK | 0o400, 0, "a socket"),
    ],
    ids=[
        "file-0600",
        "file-0400",
        "file-group",
        "file-other",
        "file-other-owner",
        "file-directory",
        "file-fifo",
        "file-device",
        "credential-0400-root",
        "credential-acl-mask",
        "credential-other",
        "credential-socket",
    ],
)
def test_what_an_open_file_must_be(
    kind: SourceKind, mode: int, owner: int, expected: str | None
) -> None:
    why = refusal(kind, mode, owner, uid=7)
    if expected is None:
        assert why is None
    else:
        assert why is not None
        assert expected in why


def test_the_lines_name_the_secret_and_point_at_the_runbook() -> None:
    place = SecretPlace("api", SourceKind.FILE, "/etc/api")
    assert unavailable(place, "it is empty") == (
        "secret api (file /etc/api): it is empty; see runbook.md#secret-unavailable"
    )
    assert unavailable(place, "x").endswith(Runbook.SECRET_UNAVAILABLE.pointer)
    assert in_a_file(place).startswith("event=secret_in_a_file name=api path=/etc/api: ")
    assert in_a_file(place).endswith(Runbook.SECRET_IN_A_FILE.pointer)


# --- filled: the value as read ------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "value"),
    [
        (VALUE, VALUE),
        (VALUE + b"\n", VALUE),
        (VALUE + b"\n\n", VALUE + b"\n"),
        (VALUE + b"\r\n", VALUE + b"\r"),
        (b"\n" + VALUE, b"\n" + VALUE),
        (b"x" * MAX_SECRET_BYTES, b"x" * MAX_SECRET_BYTES),
    ],
    ids=["plain", "one-newline", "two-newlines", "crlf", "leading-newline", "at-the-limit"],
)
def test_one_trailing_newline_is_removed(data: bytes, value: bytes) -> None:
    assert Secret.filled("api", fill_with(data)).reveal() == value


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", "it is empty"),
        (b"\n", "it is empty"),
        (b"x" * (MAX_SECRET_BYTES + 1), f"larger than {MAX_SECRET_BYTES} bytes"),
    ],
    ids=["empty", "only-a-newline", "over-the-limit"],
)
def test_an_empty_or_oversized_value_is_refused(data: bytes, expected: str) -> None:
    grabbed: list[Any] = []
    with pytest.raises(ValueError, match=expected) as caught:
        Secret.filled("api", fill_with(data, grabbed))
    assert not any(grabbed[0]), "the read buffer was not wiped"
    assert b"x" * 8 not in str(caught.value).encode()


def test_the_read_buffer_is_wiped_after_a_good_read_and_a_failing_fill() -> None:
    grabbed: list[Any] = []
    assert Secret.filled("api", fill_with(VALUE, grabbed)).reveal() == VALUE
    assert not any(grabbed[0])

    def failing(view: memoryview) -> int:
        grabbed.append(view.obj)
        view[: len(VALUE)] = VALUE
        raise OSError("the disk went away")

    with pytest.raises(OSError, match="went away"):
        Secret.filled("api", failing)
    assert not any(grabbed[1])


# --- the Secret ---------------------------------------------------------------------


def test_every_printed_form_is_the_mask() -> None:
    held = secret()
    assert repr(held) == str(held) == format(held) == f"{held}" == f"{held!r}" == MASK
    assert f"{held:>25}" == f"{MASK:>25}"
    assert "%s %r" % (held, held) == f"{MASK} {MASK}"  # noqa: UP031
    assert repr([held]) == f"[{MASK}]"
    assert repr(Secrets({"api": held})) == "Secrets(['api'])"
    assert not hasattr(held, "__dict__")


def test_a_log_line_shows_the_mask(caplog: pytest.LogCaptureFixture) -> None:
    held = secret()
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("test").debug("event=x secret=%s again=%r", held, held)
    assert caplog.records[0].getMessage() == f"event=x secret={MASK} again={MASK}"
    assert VALUE.decode() not in caplog.text


def test_a_traceback_with_its_locals_shows_the_mask() -> None:
    def use(held: Secret) -> None:
        raise RuntimeError(f"could not use {held}")

    held = secret()
    try:
        use(held)
    except RuntimeError as exc:
        plain = traceback.format_exc()
        with_locals = "".join(
            traceback.TracebackException.from_exception(exc, capture_locals=True).format()
        )
    assert MASK in with_locals
    for text in (plain, with_locals):
        assert VALUE.decode() not in text


class Holder(BaseModel):
    key: Secret
    note: str = "n"


def test_a_pydantic_model_dumps_the_mask() -> None:
    model = Holder(key=secret())
    assert model.model_dump() == {"key": MASK, "note": "n"}
    assert model.model_dump(mode="json") == {"key": MASK, "note": "n"}
    assert model.model_dump_json() == f'{{"key":"{MASK}","note":"n"}}'
    assert MASK in repr(model)
    assert VALUE.decode() not in repr(model) + str(model) + model.model_dump_json()
    assert Holder.model_json_schema()["properties"]["key"]["type"] == "string"


def test_a_pydantic_model_takes_only_a_secret() -> None:
    with pytest.raises(ValidationError):
        Holder.model_validate({"key": "a plain string"})


@pytest.mark.parametrize(
    "how",
    [
        pickle.dumps,
        lambda held: pickle.dumps(held, protocol=0),
        copy.copy,
        copy.deepcopy,
    ],
    ids=["pickle", "pickle-0", "copy", "deepcopy"],
)
def test_pickling_and_copying_are_refused(how: Any) -> None:
    with pytest.raises(TypeError, match=r"cannot be pickled or copied"):
        how(secret())
    with pytest.raises(TypeError, match=r"cannot be pickled or copied"):
        how(Secrets({"api": secret()}))


def test_reveal_and_exposed_show_the_value() -> None:
    held = secret()
    assert held.reveal() == VALUE
    with held.exposed() as view:
        assert view.readonly
        assert bytes(view) == VALUE
    with pytest.raises(ValueError, match="released"):
        bytes(view)


def test_wipe_zeroes_the_buffer_in_place() -> None:
    buffer = bytearray(VALUE)
    held = Secret("api", buffer)
    held.wipe()
    assert buffer == bytearray(len(VALUE))
    assert held.wiped
    with pytest.raises(ValueError, match=r"Secret\('api', \*\*\*\*\) was wiped"):
        held.reveal()
    with pytest.raises(ValueError, match="was wiped"), held.exposed():
        pass


def test_dropping_a_secret_wipes_it() -> None:
    buffer = bytearray(VALUE)
    held = Secret("api", buffer)
    del held
    assert buffer == bytearray(len(VALUE))


def test_secrets_wipe_every_secret() -> None:
    buffers = [bytearray(b"one"), bytearray(b"two")]
    loaded = Secrets({"a": Secret("a", buffers[0]), "b": Secret("b", buffers[1])})
    assert list(loaded) == ["a", "b"]
    assert len(loaded) == 2
    loaded.wipe()
    assert buffers == [bytearray(3), bytearray(3)]


def test_a_secret_holds_only_a_bytearray() -> None:
    with pytest.raises(TypeError, match="bytearray"):
        Secret("api", VALUE)  # type: ignore[arg-type]
