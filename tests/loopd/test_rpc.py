"""The model's layers on llama.cpp rpc-servers (issue 41): `[model] rpc_servers`.

Two real rpc-server processes (built by `scripts/build-llama-cpp --servers` from the
pinned llama-cpp-python's own llama.cpp) listen on 127.0.0.1; loopd's own path
(`boxmaker.testing.rpc_generate`: the endpoint rule, registering, the plan, the load
of the embedded model, bare and with its shipped adapter) runs in a process of its
own, with and without them, and the reply ids must be equal. An endpoint outside loopback that no
named tunnel covers is refused before anything loads.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from support.llama_server import running_rpc_server

from boxmaker.core.errors import StartupError
from boxmaker.loopd.config import LoopdConfig, ModelSection, PathsSection
from boxmaker.loopd.rpc import interface_networks
from boxmaker.loopd.startup import start_model

TOKENS = 48


def generate(home: Path, adapter: str, *endpoints: str) -> dict[str, Any]:
    helper = [sys.executable, "-m", "boxmaker.testing.rpc_generate"]
    done = subprocess.run(
        [*helper, str(home), str(TOKENS), adapter, *endpoints],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.slow
@pytest.mark.parametrize("adapter", ["none", "auto"])
def test_two_rpc_servers_hold_the_layers_and_the_reply_ids_are_the_same(
    tmp_path: Path, adapter: str
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    alone = generate(home, adapter)
    with ExitStack() as stack:
        first = stack.enter_context(running_rpc_server(tmp_path / "rpc-1.log"))
        second = stack.enter_context(running_rpc_server(tmp_path / "rpc-2.log"))
        split = generate(home, adapter, first, second)
    assert alone["offloaded"] is None  # the CPU build alone: nothing offloaded
    assert "backend CPU (this build has no GPU backend)" in alone["placed"]
    layers, of = split["offloaded"]
    assert layers == of > 0  # every layer on the rpc-servers' devices
    assert f"RPC0 {first}" in split["placed"]
    assert f"RPC1 {second}" in split["placed"]
    assert len(alone["ids"]) == TOKENS
    if adapter == "none":  # the base model writes on: text, not one token over and over
        assert len(set(alone["ids"])) >= 5
    assert split["ids"] == alone["ids"]


def test_an_endpoint_outside_loopback_and_any_tunnel_is_refused_at_start(tmp_path: Path) -> None:
    config = LoopdConfig(
        paths=PathsSection(home=str(tmp_path)),
        model=ModelSection(rpc_servers=["127.0.0.1:50052", "203.0.113.5:50052"]),
    )
    never = [sys.executable, "-c", "raise SystemExit('the probe must not run')"]
    with pytest.raises(StartupError) as refused:
        start_model(config, probe_argv=never)
    message = str(refused.value)
    assert message.startswith("[model] rpc_servers: 203.0.113.5:50052 is neither loopback")
    assert message.endswith("see runbook.md#loopd-rpc-refused")


def test_a_named_tunnel_without_an_address_here_is_refused(tmp_path: Path) -> None:
    config = LoopdConfig(
        paths=PathsSection(home=str(tmp_path)),
        model=ModelSection(rpc_servers=["10.8.0.2:50052"], rpc_tunnels=["bxwg-absent"]),
    )
    with pytest.raises(StartupError, match="rpc_tunnels names 'bxwg-absent', which has no"):
        start_model(config, probe_argv=[sys.executable, "-c", "raise SystemExit(1)"])


def test_an_rpc_server_that_is_not_there_is_one_line(tmp_path: Path) -> None:
    from support.llama_server import free_port

    config = LoopdConfig(
        paths=PathsSection(home=str(tmp_path)),
        model=ModelSection(rpc_servers=[f"127.0.0.1:{free_port()}"]),
    )
    with pytest.raises(StartupError, match="could not be reached: Connection refused"):
        start_model(config, probe_argv=[sys.executable, "-c", "raise SystemExit(1)"])


def test_the_loopback_interface_has_its_networks() -> None:
    networks = interface_networks("lo")
    assert ipaddress.ip_network("127.0.0.0/8") in networks
    assert interface_networks("bxwg-absent") == []
