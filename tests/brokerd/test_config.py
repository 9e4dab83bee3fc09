"""brokerd.toml: defaults, overrides, and one-line errors for every kind of mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from boxmaker.brokerd.config import load_config
from boxmaker.core.errors import ConfigError


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "brokerd.toml"
    path.write_text(text)
    return path


def test_defaults_under_boxmaker_home() -> None:
    config = load_config(None, {"BOXMAKER_HOME": "/srv/bx"})
    assert config.home == Path("/srv/bx")
    assert config.broker_socket == Path("/srv/bx/run/loop-broker/broker.sock")
    assert config.admin_socket == Path("/srv/bx/run/owner-broker/admin.sock")
    assert config.approvals.ttl_ms == 900_000
    assert config.runner.backend == "bwrap"
    assert config.grants_dir == Path("/etc/boxmaker/grants")


def test_the_default_home() -> None:
    assert load_config(None, {}).home == Path("/var/lib/boxmaker")


def test_a_file_names_only_what_differs(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        '[paths]\nhome = "/h"\n[sockets]\nadmin = "/tmp/a.sock"\nbroker = ""\n[approvals]\nttl_ms = 100\n',
    )
    config = load_config(path, {"BOXMAKER_HOME": "/ignored"})
    assert config.home == Path("/h")
    assert config.admin_socket == Path("/tmp/a.sock")
    assert config.broker_socket == Path("/h/run/loop-broker/broker.sock")
    assert config.approvals.ttl_ms == 100


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[paths]\nhoem = "/h"\n', "unknown key `paths.hoem`"),
        ("[approval]\nttl_ms = 1\n", "unknown key `approval`"),
        ('[approvals]\nttl_ms = "100"\n', "`approvals.ttl_ms`"),
        ("[approvals]\nttl_ms = 0\n", "`approvals.ttl_ms`"),
        ('[runner]\nbackend = "docker"\n', "`runner.backend`"),
        ("[paths\n", "not valid TOML"),
    ],
    ids=[
        "unknown-key",
        "unknown-table",
        "wrong-type",
        "out-of-range",
        "unknown-backend",
        "bad-toml",
    ],
)
def test_mistakes_are_one_line_errors(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(_write(tmp_path, text), {})
    assert expected in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--config"):
        load_config(tmp_path / "nope.toml", {})


def test_an_unknown_boxmaker_variable_is_an_error() -> None:
    with pytest.raises(ConfigError, match="BOXMAKER_HOEM"):
        load_config(None, {"BOXMAKER_HOEM": "/h"})
