"""Secrets in a role: brokerd reads its `[secrets.<name>]` at start, stops on one it
cannot read, and no value it read shows in any log, traceback or dump. loopd has
no secrets table.

The done-when test of issue 14: a secret through each of the three sources, a
debug log and a forced exception in brokerd (in this process, and in the real
process), and every output grepped for each value.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
import tomli_w

from boxmaker.brokerd.config import BrokerdConfig, load_config
from boxmaker.core.errors import ConfigError, StartupError
from boxmaker.core.home.layout import Home
from boxmaker.core.home.secrets import Secrets
from boxmaker.ipc.secrets import CREDENTIALS_VARIABLE, load_secrets
from boxmaker.loopd.config import load_config as load_loopd_config
from boxmaker.testing.homes import make_home
from boxmaker.testing.processes import DaemonProcess, clean_environment

# one value per source, each a string found nowhere else
VALUES = {
    "a_cred": "cred-value-4b1d9e0a",
    "b_env": "env-value-93ac07f2",
    "c_file": "file-value-c2e8f15d",
}
VARIABLE = "BX_TEST_TOKEN"
POINTER = "see runbook.md#secret-unavailable"


def leaks(*outputs: str) -> list[str]:
    """The names of the secrets whose value shows in any of `outputs`."""
    return sorted(name for name, value in VALUES.items() if any(value in o for o in outputs))


def three_sources(tmp_path: Path) -> tuple[dict[str, object], dict[str, str]]:
    """A `[secrets]` table with one secret per source, and the environment it needs."""
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "a_cred").write_text(VALUES["a_cred"] + "\n")
    (credentials / "a_cred").chmod(0o400)
    file = tmp_path / "c_file"
    file.write_text(VALUES["c_file"] + "\n")
    file.chmod(0o600)
    table: dict[str, object] = {
        "a_cred": {},
        "b_env": {"env": VARIABLE},
        "c_file": {"file": str(file)},
    }
    environ = {CREDENTIALS_VARIABLE: str(credentials), VARIABLE: VALUES["b_env"]}
    return table, environ


def brokerd_toml(tmp_path: Path, secrets: dict[str, object]) -> tuple[Path, Path]:
    """A home, and a brokerd.toml for it with `secrets` as its `[secrets]` table."""
    home = make_home(tmp_path)
    grants = tmp_path / "grants"
    grants.mkdir()
    data = {
        "paths": {"home": str(home), "grants": str(grants)},
        "runner": {"backend": "refusing"},
        "secrets": secrets,
    }
    config = tmp_path / "brokerd.toml"
    config.write_text(tomli_w.dumps(data))
    return home, config


def home_files(home: Path) -> str:
    """Every regular file under `home` (the audit log, session state), as text."""
    return "".join(
        path.read_bytes().decode("utf-8", "replace") for path in home.rglob("*") if path.is_file()
    )


# --- configuration ------------------------------------------------------------------


def test_brokerd_reads_where_each_secret_is_and_no_value(tmp_path: Path) -> None:
    table, _ = three_sources(tmp_path)
    config = load_config(brokerd_toml(tmp_path, table)[1], {})
    assert sorted(config.secrets) == sorted(VALUES)
    assert config.secrets["a_cred"].place("a_cred").where == "a_cred"
    assert config.secrets["b_env"].env == VARIABLE
    assert leaks(repr(config), config.model_dump_json()) == []
    assert BrokerdConfig().secrets == {}


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ({"api": {"env": "A", "file": "/a"}}, "`secrets.api`: give one of credential, env or file"),
        ({"api": {"file": "api.txt"}}, "`secrets.api`: file: 'api.txt' is not an absolute path"),
        ({"api": {"value": "x"}}, "unknown key `secrets.api.value`"),
        ({"api": "x"}, "`secrets.api`"),
        ({"../api": {}}, "is not a plain name"),
    ],
    ids=["two-sources", "relative-file", "a-value-key", "not-a-table", "bad-name"],
)
def test_a_wrong_secrets_table_is_a_one_line_error(
    tmp_path: Path, table: dict[str, object], expected: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(brokerd_toml(tmp_path, table)[1], {})
    assert expected in str(caught.value)
    assert "\n" not in str(caught.value)


def test_loopd_has_no_secrets_table(tmp_path: Path) -> None:
    path = tmp_path / "loopd.toml"
    path.write_text(tomli_w.dumps({"secrets": {"api": {}}}))
    with pytest.raises(ConfigError, match="unknown key `secrets`"):
        load_loopd_config(path, {})


# --- nothing shows the values (in this process) -------------------------------------


def use_them(config: BrokerdConfig, secrets: Secrets) -> None:
    """A role's code failing while it holds its secrets (as locals, and in its message)."""
    cred = secrets["a_cred"]
    logging.getLogger("boxmaker.brokerd.serve").debug(
        "event=debug config=%r secrets=%r cred=%s", config, secrets, cred
    )
    raise RuntimeError(f"forced while holding {cred} and {dict(secrets)}")


def formatted(exc: BaseException) -> tuple[str, str]:
    """`exc`'s traceback as `format_exc` prints it, and with every frame's locals."""
    with_locals = traceback.TracebackException.from_exception(exc, capture_locals=True)
    return "".join(traceback.format_exception(exc)), "".join(with_locals.format())


def test_no_value_shows_in_a_log_a_traceback_or_a_dump(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    table, environ = three_sources(tmp_path)
    config = load_config(brokerd_toml(tmp_path, table)[1], {})
    with caplog.at_level(logging.DEBUG):
        secrets = load_secrets(config.secrets, environ)
        assert {name: secrets[name].reveal().decode() for name in secrets} == VALUES
        with pytest.raises(RuntimeError) as caught:
            use_them(config, secrets)
        logging.getLogger("boxmaker.brokerd.serve").exception("event=forced")
    plain, with_locals = formatted(caught.value)
    assert "Secret('a_cred', ****)" in with_locals  # the locals were shown, masked
    assert "secret=Secret('c_file', ****)" in caplog.text  # the debug lines were logged
    assert "event=secret_in_a_file name=c_file" in caplog.text
    outputs = [
        caplog.text,
        plain,
        with_locals,
        repr(config),
        config.model_dump_json(),
        str(config.model_dump()),
        repr(secrets),
        repr(dict(secrets)),
        str(environ),
    ]
    assert leaks(*outputs) == []
    assert VARIABLE not in environ  # removed once read


def test_a_failing_load_shows_no_value_already_read(tmp_path: Path) -> None:
    table, environ = three_sources(tmp_path)
    table["d_missing"] = {"file": str(tmp_path / "missing")}
    with pytest.raises(StartupError) as caught:
        load_secrets(load_config(brokerd_toml(tmp_path, table)[1], {}).secrets, environ)
    assert str(caught.value) == (
        f"secret d_missing (file {tmp_path}/missing): there is no such file; {POINTER}"
    )
    plain, with_locals = formatted(caught.value)
    assert "Secret('a_cred', ****)" in with_locals  # load_secrets' `loaded`, masked
    assert leaks(plain, with_locals, str(environ)) == []


# --- the real brokerd ---------------------------------------------------------------


@pytest.mark.e2e
def test_brokerd_serves_with_three_secrets_and_shows_none(tmp_path: Path) -> None:
    table, environ = three_sources(tmp_path)
    home, config = brokerd_toml(tmp_path, table)
    with DaemonProcess(config, env=environ) as daemon:
        daemon.wait_serving([Home(home).broker_socket, Home(home).admin_socket])
        status = daemon.stop()
    assert status == 0, daemon.stderr
    assert "event=secrets_loaded names=a_cred,b_env,c_file" in daemon.stderr
    assert "event=secret_in_a_file name=c_file" in daemon.stderr
    assert "see runbook.md#secret-in-a-file" in daemon.stderr
    assert leaks(daemon.stderr, home_files(home)) == []


# brokerd's own main(), at DEBUG, with its start forced to fail once the secrets are
# read, and the uncaught exception printed with every frame's locals
FORCED_FAILURE = """
import logging, sys, traceback
logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format="brokerd %(levelname)s %(message)s")
from boxmaker.brokerd import main, serve

def start(self):
    logging.getLogger("boxmaker.brokerd.serve").debug("event=forcing config=%r", self.config)
    raise RuntimeError("forced by the test")

def excepthook(kind, value, tb):
    shown = traceback.TracebackException(kind, value, tb, capture_locals=True)
    sys.stderr.write("".join(shown.format()))

serve.Brokerd.start = start
sys.excepthook = excepthook
sys.exit(main.main(sys.argv[1:]))
"""


@pytest.mark.e2e
def test_brokerd_failing_at_debug_shows_no_value(tmp_path: Path) -> None:
    table, environ = three_sources(tmp_path)
    home, config = brokerd_toml(tmp_path, table)
    done = subprocess.run(
        [sys.executable, "-c", FORCED_FAILURE, "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        env=clean_environment(environ),
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "RuntimeError: forced by the test" in done.stderr
    assert "secrets = Secrets(['a_cred', 'b_env', 'c_file'])" in done.stderr  # serve's locals
    assert "brokerd DEBUG event=secret_loaded name=b_env source=env" in done.stderr
    assert "brokerd DEBUG event=forcing config=BrokerdConfig(" in done.stderr
    assert leaks(done.stdout, done.stderr, home_files(home)) == []


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("mode", "why"),
    [
        (0o644, "its group or others may use it (mode 0644); chmod 600 it"),
        (None, "there is no such file"),
    ],
    ids=["readable-by-others", "missing"],
)
def test_a_bad_secret_stops_brokerd_with_one_line(
    tmp_path: Path, mode: int | None, why: str
) -> None:
    path = tmp_path / "api"
    if mode is not None:
        path.write_text(VALUES["c_file"])
        path.chmod(mode)
    home, config = brokerd_toml(tmp_path, {"api": {"file": str(path)}})
    daemon = DaemonProcess(config)
    assert daemon.wait_exit() == 1
    assert daemon.stderr_lines() == [f"brokerd ERROR secret api (file {path}): {why}; {POINTER}"]
    assert not (home / "audit").exists()  # stopped before anything else
    assert leaks(daemon.stderr) == []
