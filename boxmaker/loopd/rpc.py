"""The model's layers on llama.cpp rpc-servers: the endpoints checked, then registered.

I/O: this machine's interface addresses (an ioctl for IPv4, /proc/net/if_inet6 for
IPv6), and ggml's backend registry through ctypes: `ggml_backend_reg_by_name("RPC")`,
its `ggml_backend_rpc_add_server`, and `ggml_backend_register`, as llama.cpp's own
`--rpc` does (common/arg.cpp); llama-cpp-python 0.3.36 binds none of them. Once
registered, each server's devices are ggml devices like a local GPU's: `read_backend`
lists them, `core.model.offload` plans the layers onto them, and llama.cpp splits
the layers across them by their free memory. Tokenizing and sampling stay here.

Which endpoints are taken is `core.model.rpc_endpoints`' rule (loopback, or inside a
tunnel the owner named). Registering is for the life of the process, once per
endpoint.
"""

from __future__ import annotations

import ctypes
import fcntl
import ipaddress
import socket
import struct
from collections.abc import Sequence
from pathlib import Path

from boxmaker.core.errors import StartupError
from boxmaker.core.model.rpc_endpoints import (
    POINTER,
    Endpoint,
    Network,
    RpcEndpointError,
    check_endpoints,
)
from boxmaker.core.runbook import Runbook
from boxmaker.loopd.config import LoopdConfig

SIOCGIFADDR = 0x8915
SIOCGIFNETMASK = 0x891B
IF_INET6 = Path("/proc/net/if_inet6")
CONNECT_TIMEOUT_S = 5.0
_registered: set[str] = set()


def interface_networks(name: str) -> list[Network]:
    """The networks of interface `name` on this machine (none when it has no address)."""
    networks: list[Network] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("256s", name.encode()[:15])
        try:
            address = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, request)[20:24]
            mask = fcntl.ioctl(probe.fileno(), SIOCGIFNETMASK, request)[20:24]
        except OSError:
            pass
        else:
            text = f"{socket.inet_ntoa(address)}/{socket.inet_ntoa(mask)}"
            networks.append(ipaddress.ip_network(text, strict=False))
    try:
        lines = IF_INET6.read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        fields = line.split()
        if len(fields) == 6 and fields[5] == name:
            hex_address, prefix = fields[0], int(fields[2], 16)
            address6 = ipaddress.IPv6Address(bytes.fromhex(hex_address))
            networks.append(ipaddress.ip_network(f"{address6}/{prefix}", strict=False))
    return networks


def checked_endpoints(config: LoopdConfig) -> tuple[Endpoint, ...]:
    """`[model] rpc_servers` by the rule; StartupError, one line, for one refused."""
    settings = config.model
    if not settings.rpc_servers:
        return ()
    networks = {name: interface_networks(name) for name in settings.rpc_tunnels}
    try:
        return check_endpoints(settings.rpc_servers, settings.rpc_tunnels, networks)
    except RpcEndpointError as exc:
        raise StartupError(str(exc)) from exc


def register_configured(config: LoopdConfig) -> tuple[str, ...]:
    """`[model] rpc_servers`, checked by the rule and registered; their text."""
    endpoints = tuple(str(endpoint) for endpoint in checked_endpoints(config))
    register(endpoints)
    return endpoints


def reachable(endpoint: str, timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
    """None when a TCP connection to `endpoint` opens; else why not, in a few words.
    (ggml's RPC client aborts the process on a server it cannot reach.)"""
    host, _, port = endpoint.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return None
    except OSError as exc:
        return exc.strerror or str(exc)


def register(endpoints: Sequence[str]) -> None:
    """Each endpoint's devices added to ggml's, once per process; StartupError when
    the build has no RPC backend or a server cannot be reached or added."""
    wanted = [e for e in endpoints if e not in _registered]
    if not wanted:
        return
    for endpoint in wanted:
        why = reachable(endpoint)
        if why is not None:
            raise StartupError(
                f"[model] rpc_servers: the rpc-server at {endpoint} could not be reached: "
                f"{why}; {Runbook.LOOPD_BACKEND_UNREACHABLE.pointer}"
            )
    import llama_cpp

    lib_dir = Path(llama_cpp.llama_cpp._base_path)
    ggml = ctypes.CDLL(str(lib_dir / "libggml.so"))
    base = ctypes.CDLL(str(lib_dir / "libggml-base.so"))
    ggml.ggml_backend_reg_by_name.argtypes = [ctypes.c_char_p]
    ggml.ggml_backend_reg_by_name.restype = ctypes.c_void_p
    base.ggml_backend_reg_get_proc_address.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    base.ggml_backend_reg_get_proc_address.restype = ctypes.c_void_p
    ggml.ggml_backend_register.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_register.restype = None
    rpc = ggml.ggml_backend_reg_by_name(b"RPC")
    if not rpc:
        raise StartupError(
            "[model] rpc_servers is set, but this llama-cpp-python build has no RPC backend: "
            f"rebuild it with scripts/build-llama-cpp; {POINTER}"
        )
    address = base.ggml_backend_reg_get_proc_address(rpc, b"ggml_backend_rpc_add_server")
    if not address:
        raise StartupError(f"this build's RPC backend cannot add a server; {POINTER}")
    add_server = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(address)
    for endpoint in wanted:
        added = add_server(endpoint.encode())
        if not added:
            raise StartupError(f"[model] rpc_servers: {endpoint} could not be added; {POINTER}")
        ggml.ggml_backend_register(added)
        _registered.add(endpoint)
