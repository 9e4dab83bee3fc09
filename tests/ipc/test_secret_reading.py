"""`boxmaker.ipc.secrets`: reading each source at start, and each refusal as one line
naming the secret, with the runbook's pointer."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from boxmaker.core.errors import StartupError
from boxmaker.core.home.secrets import MAX_SECRET_BYTES, SecretSource
from boxmaker.ipc.secrets import CREDENTIALS_VARIABLE, load_secrets

VALUE = b"s3cr3t-value-7f1c"
POINTER = "; see runbook.md#secret-unavailable"


def write(path: Path, data: bytes = VALUE + b"\n", mode: int = 0o600) -> Path:
    path.write_bytes(data)
    path.chmod(mode)
    return path


def credentials(tmp_path: Path, data: bytes = VALUE + b"\n", mode: int = 0o400) -> dict[str, str]:
    """An environment whose credentials directory holds `api`."""
    directory = tmp_path / "credentials"
    directory.mkdir()
    write(directory / "api", data, mode)
    return {CREDENTIALS_VARIABLE: str(directory)}


def refused(table: dict[str, SecretSource], environ: dict[str, str] | None = None) -> str:
    """The one line `load_secrets` stops with."""
    with pytest.raises(StartupError) as caught:
        load_secrets(table, environ if environ is not None else {})
    line = str(caught.value)
    assert "\n" not in line
    assert line.endswith(POINTER)
    assert VALUE.decode() not in line
    return line.removesuffix(POINTER)


# --- each source --------------------------------------------------------------------


def test_a_credential_is_read_from_the_credentials_directory(tmp_path: Path) -> None:
    environ = credentials(tmp_path)
    loaded = load_secrets({"api": SecretSource()}, environ)
    assert loaded["api"].reveal() == VALUE
    assert CREDENTIALS_VARIABLE in environ  # the directory stays: only variables read go


def test_a_credential_may_have_another_id(tmp_path: Path) -> None:
    loaded = load_secrets({"token": SecretSource(credential="api")}, credentials(tmp_path))
    assert loaded["token"].reveal() == VALUE


def test_a_variable_is_read_and_removed(tmp_path: Path) -> None:
    environ = {"API_TOKEN": VALUE.decode() + "\n", "OTHER": "kept"}
    loaded = load_secrets({"api": SecretSource(env="API_TOKEN")}, environ)
    assert loaded["api"].reveal() == VALUE
    assert environ == {"OTHER": "kept"}


def test_a_variable_read_from_the_process_is_gone_for_its_children(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BX_TEST_API_TOKEN", VALUE.decode())
    loaded = load_secrets({"api": SecretSource(env="BX_TEST_API_TOKEN")})
    assert loaded["api"].reveal() == VALUE
    assert "BX_TEST_API_TOKEN" not in os.environ
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ.get('BX_TEST_API_TOKEN'))"],
        capture_output=True,
        text=True,
        check=True,
        env=None,  # the process's own environment, as a sandbox would inherit it
    )
    assert child.stdout == "None\n"


def test_a_file_is_read_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write(tmp_path / "api")
    with caplog.at_level(logging.DEBUG, logger="boxmaker.ipc.secrets"):
        loaded = load_secrets({"api": SecretSource(file=str(path))}, {})
    assert loaded["api"].reveal() == VALUE
    warning = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warning] == [
        f"event=secret_in_a_file name=api path={path}: a file is weaker than a systemd "
        "credential; see runbook.md#secret-in-a-file"
    ]
    assert "event=secrets_loaded names=api" in caplog.text
    assert "secret=Secret('api', ****)" in caplog.text
    assert VALUE.decode() not in caplog.text


def test_a_read_only_file_of_the_owner_is_read(tmp_path: Path) -> None:
    path = write(tmp_path / "api", mode=0o400)
    assert load_secrets({"api": SecretSource(file=str(path))}, {})["api"].reveal() == VALUE


def test_no_table_reads_nothing() -> None:
    assert len(load_secrets({}, {})) == 0


# --- each refusal -------------------------------------------------------------------


def test_a_link_at_the_path_is_refused(tmp_path: Path) -> None:
    target = write(tmp_path / "real")
    (tmp_path / "api").symlink_to(target)
    line = refused({"api": SecretSource(file=str(tmp_path / "api"))})
    assert (
        line == f"secret api (file {tmp_path}/api): it is a symbolic link, which is never followed"
    )


def test_a_link_in_the_credentials_directory_is_refused(tmp_path: Path) -> None:
    environ = credentials(tmp_path)
    (tmp_path / "credentials" / "linked").symlink_to(tmp_path / "credentials" / "api")
    line = refused({"linked": SecretSource()}, environ)
    assert line.endswith("it is a symbolic link, which is never followed")


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (0o640, "its group or others may use it (mode 0640); chmod 600 it"),
        (0o604, "its group or others may use it (mode 0604); chmod 600 it"),
        (0o660, "its group or others may use it (mode 0660); chmod 600 it"),
        (0o606, "its group or others may use it (mode 0606); chmod 600 it"),
    ],
    ids=["group-read", "other-read", "group-write", "other-rw"],
)
def test_a_file_group_or_others_may_use_is_refused(
    tmp_path: Path, mode: int, expected: str
) -> None:
    path = write(tmp_path / "api", mode=mode)
    line = refused({"api": SecretSource(file=str(path))})
    assert line == f"secret api (file {path}): {expected}"


def test_a_file_of_another_user_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "api")
    other = os.geteuid() + 1
    with pytest.raises(StartupError, match=f"belongs to uid {os.geteuid()}, not to uid {other}"):
        load_secrets({"api": SecretSource(file=str(path))}, {}, uid=other)


def test_a_credential_others_may_read_is_refused(tmp_path: Path) -> None:
    line = refused({"api": SecretSource()}, credentials(tmp_path, mode=0o404))
    assert line.endswith("others may use it (mode 0404)")


def test_a_credential_with_group_bits_is_read(tmp_path: Path) -> None:
    # systemd grants the unit's user read access through an ACL; its mask shows as group bits
    loaded = load_secrets({"api": SecretSource()}, credentials(tmp_path, mode=0o440))
    assert loaded["api"].reveal() == VALUE


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", "it is empty"),
        (b"\n", "it is empty"),
        (b"x" * (MAX_SECRET_BYTES + 1), f"it is larger than {MAX_SECRET_BYTES} bytes"),
    ],
    ids=["empty", "only-a-newline", "too-large"],
)
def test_an_empty_or_oversized_file_is_refused(tmp_path: Path, data: bytes, expected: str) -> None:
    path = write(tmp_path / "api", data)
    assert refused({"api": SecretSource(file=str(path))}).endswith(f": {expected}")


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    line = refused({"api": SecretSource(file=str(tmp_path / "nope"))})
    assert line == f"secret api (file {tmp_path}/nope): there is no such file"


def test_a_path_through_a_file_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "plain")
    line = refused({"api": SecretSource(file=str(tmp_path / "plain" / "api"))})
    assert line.endswith("a directory on its path is not a directory")


def test_a_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "api").mkdir(mode=0o700)
    line = refused({"api": SecretSource(file=str(tmp_path / "api"))})
    assert line.endswith("it is a directory, not a regular file")


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "api", 0o600)
    line = refused({"api": SecretSource(file=str(tmp_path / "api"))})
    assert line.endswith("it is a FIFO, not a regular file")


def test_a_missing_credential_is_refused(tmp_path: Path) -> None:
    line = refused({"other": SecretSource()}, credentials(tmp_path))
    assert line == "secret other (credential other): there is no such file"


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, "CREDENTIALS_DIRECTORY is not set: no systemd credentials"),
        ({CREDENTIALS_VARIABLE: ""}, "CREDENTIALS_DIRECTORY is not set: no systemd credentials"),
        (
            {CREDENTIALS_VARIABLE: "credentials"},
            "CREDENTIALS_DIRECTORY is not an absolute path ('credentials'): no systemd credentials",
        ),
    ],
    ids=["unset", "empty", "relative"],
)
def test_credentials_need_their_directory(environ: dict[str, str], expected: str) -> None:
    assert refused({"api": SecretSource()}, environ) == f"secret api (credential api): {expected}"


def test_an_unset_variable_is_refused() -> None:
    line = refused({"api": SecretSource(env="API_TOKEN")}, {"OTHER": "x"})
    assert line == "secret api (env API_TOKEN): the variable is not set"


def test_an_empty_variable_is_refused_and_removed() -> None:
    environ = {"API_TOKEN": ""}
    line = refused({"api": SecretSource(env="API_TOKEN")}, environ)
    assert line == "secret api (env API_TOKEN): it is empty"
    assert environ == {}


def test_the_first_secret_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    table = {
        "a": SecretSource(env="A"),
        "b": SecretSource(file=str(tmp_path / "nope")),
        "c": SecretSource(env="C"),
    }
    line = refused(table, {"A": "one", "C": "three"})
    assert line.startswith("secret b (file ")
