"""`gatewayd serve` as a process: configured, unconfigured, and with a token the server refuses.

The fake Mattermost serves in this process on 127.0.0.1; a scripted loopd
answers turns on a real loop.sock.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from boxmaker.core.home.layout import Home
from boxmaker.core.wire.loop import TurnDone
from boxmaker.gatewayd.config import load_config
from boxmaker.gatewayd.live_check import check
from boxmaker.testing.fake_mattermost import BOT_TOKEN, FakeMattermost
from boxmaker.testing.fake_mattermost_web import running
from boxmaker.testing.homes import make_home
from boxmaker.testing.processes import DaemonProcess, clean_environment, console_script
from boxmaker.testing.sockets import Peer, ScriptedServer, accepts
from boxmaker.testing.waiting import wait_until

pytestmark = pytest.mark.e2e


def write_config(tmp_path: Path, home: Path, url: str, owner: str, token: str) -> Path:
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n", encoding="utf-8")
    token_file.chmod(0o600)
    config = tmp_path / "gatewayd.toml"
    config.write_text(
        f'[paths]\nhome = "{home}"\n'
        f'[mattermost]\nurl = "{url}"\nowner = "{owner}"\n'
        f'[secrets.mattermost_token]\nfile = "{token_file}"\n',
        encoding="utf-8",
    )
    return config


def answer(peer: Peer) -> None:
    session = peer.request.message.session  # type: ignore[union-attr]
    peer.send(TurnDone(session=session, content="hello from loopd", untrusted=False), final=True)


def test_gatewayd_serves_a_turn_and_stops_on_sigterm(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    fake = FakeMattermost(auth_cutoff_s=0.5)
    loopd = ScriptedServer(Home(home).loop_socket, answer)
    try:
        with running(fake) as url:
            config = write_config(tmp_path, home, url, fake.owner.id, BOT_TOKEN)
            with DaemonProcess(config, role="gatewayd") as gatewayd:
                gatewayd.wait_serving([Home(home).gateway_socket])
                dm = fake.direct(fake.bot, fake.owner)
                fake.post_as(fake.owner, dm, "hi")
                wait_until(
                    lambda: any(p["message"] == "hello from loopd" for p in fake.posts.values()),
                    15.0,
                    "the answer posted",
                )
                gatewayd.process.send_signal(signal.SIGTERM)
                assert gatewayd.wait_exit() == 0, gatewayd.stderr
                assert "event=stopped" in gatewayd.stderr
                assert BOT_TOKEN not in gatewayd.stderr
            assert not accepts(Home(home).gateway_socket)
    finally:
        loopd.stop()


def test_a_refused_token_stops_gatewayd_with_one_line(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    fake = FakeMattermost(auth_cutoff_s=0.5)
    with running(fake) as url:
        config = write_config(tmp_path, home, url, fake.owner.id, "not-the-token")
        with DaemonProcess(config, role="gatewayd") as gatewayd:
            assert gatewayd.wait_exit(30) == 1
    assert "status 401" in gatewayd.stderr
    assert "not-the-token" not in gatewayd.stderr


def test_an_unconfigured_gatewayd_says_so_and_exits_0(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    config = tmp_path / "gatewayd.toml"
    config.write_text(f'[paths]\nhome = "{home}"\n', encoding="utf-8")
    with DaemonProcess(config, role="gatewayd") as gatewayd:
        assert gatewayd.wait_exit(30) == 0
    assert "event=not_configured" in gatewayd.stderr
    assert "see runbook.md#gateway-not-configured" in gatewayd.stderr


@pytest.mark.parametrize(
    ("mattermost", "problem"),
    [
        pytest.param('url = "http://chat.example.com"', "must be https://", id="plain-http"),
        pytest.param('url = "https://chat.example.com"', "[mattermost] owner", id="no-owner"),
        pytest.param(
            'url = "https://chat.example.com"\nowner = "Kyle"', "26 characters", id="bad-owner"
        ),
    ],
)
def test_a_bad_configuration_exits_2(tmp_path: Path, mattermost: str, problem: str) -> None:
    config = tmp_path / "gatewayd.toml"
    config.write_text(f"[mattermost]\n{mattermost}\n", encoding="utf-8")
    with DaemonProcess(config, role="gatewayd") as gatewayd:
        assert gatewayd.wait_exit(30) == 2
    assert problem in gatewayd.stderr


# --- the opt-in live check, against the fake ---------------------------------------------


def test_the_live_check_posts_once_and_reads_the_metadata_back(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    fake = FakeMattermost(auth_cutoff_s=0.5)
    with running(fake) as url:
        config = write_config(tmp_path, home, url, fake.owner.id, BOT_TOKEN)
        done = subprocess.run(
            [*console_script("gatewayd"), "check", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=60,
            env=clean_environment(),
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert "check: ok, nothing fetched" in done.stdout
    (post,) = fake.posts.values()
    assert post["user_id"] == fake.bot.id
    assert post["props"]["unsafe_links"] == "true"
    assert fake.fetched[post["id"]] == []


def test_the_live_check_fails_when_the_server_fetched(tmp_path: Path) -> None:
    fake = FakeMattermost(auth_cutoff_s=0.5)
    with running(fake) as url:
        config = load_config(write_config(tmp_path, tmp_path, url, fake.owner.id, BOT_TOKEN), {})

        def the_server_fetches() -> None:
            post = wait_until(lambda: list(fake.posts.values()), 10.0, "the check's post")[0]
            with fake.lock:  # what a server with an image proxy off records
                post["metadata"] = {"images": {"https://example.com/x.png": {"width": 1}}}

        filler = threading.Thread(target=the_server_fetches)
        filler.start()
        status = asyncio.run(check(config, BOT_TOKEN, wait_s=1.0))
        filler.join()
    assert status == 1
