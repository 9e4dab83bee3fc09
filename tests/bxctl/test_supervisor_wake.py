"""The rpcinterface factory that wakes supervisord's first poll: ready at once, once."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from supervisor.poller import Poller

from boxmaker.bxctl.install_plan import data_dir
from boxmaker.bxctl.supervisor_wake import NoMethods, Wake, make_wake


def supervisord_with(socket_map: dict[int, Any]) -> Any:
    return SimpleNamespace(options=SimpleNamespace(get_socket_map=lambda: socket_map))


def only_wake(socket_map: dict[int, Any]) -> Wake:
    (wake,) = socket_map.values()
    assert isinstance(wake, Wake)
    return wake


def test_the_wake_is_writable_once_then_leaves_the_map_and_closes() -> None:
    socket_map: dict[int, Any] = {}
    assert isinstance(make_wake(supervisord_with(socket_map)), NoMethods)
    wake = only_wake(socket_map)
    assert socket_map == {wake.fd: wake}
    assert not wake.readable()
    assert wake.writable()
    wake.handle_write_event()
    assert not wake.writable()
    assert socket_map == {}
    with pytest.raises(OSError, match="Bad file descriptor") as closed:
        os.fstat(wake.fd)
    assert closed.value.errno == errno.EBADF
    wake.handle_error()  # a second event after the first changes nothing


def test_supervisords_poller_sees_the_wake_at_once() -> None:
    # what the first turn of supervisord's loop does with its socket map
    socket_map: dict[int, Any] = {}
    make_wake(supervisord_with(socket_map))
    wake = only_wake(socket_map)
    poller = Poller(SimpleNamespace())
    try:
        poller.register_writable(wake.fd)
        readable, writable = poller.poll(30.0)  # returns at once with the event, or fails
        assert (readable, writable) == ([], [wake.fd])
        wake.handle_write_event()
        poller.unregister_writable(wake.fd)
    finally:
        poller.close()


def test_a_supervisord_without_a_socket_map_gets_nothing() -> None:
    assert isinstance(make_wake(SimpleNamespace()), NoMethods)
    assert isinstance(make_wake(SimpleNamespace(options=SimpleNamespace())), NoMethods)


def test_boxmakers_supervisord_conf_names_the_factory() -> None:
    conf = (data_dir() / "supervisor.conf.d" / "supervisord.conf").read_text()
    line = "supervisor.rpcinterface_factory = boxmaker.bxctl.supervisor_wake:make_wake"
    assert line in conf.splitlines()
    module, _, name = line.split(" = ")[1].partition(":")
    assert Path(__import__(module, fromlist=[name]).__file__ or "").name == "supervisor_wake.py"
