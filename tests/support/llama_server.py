"""A real llama-server for the tests of loopd's served backend (issue 41).

`server_binaries` runs `scripts/build-llama-cpp --servers` (llama-server and
rpc-server built from the pinned llama-cpp-python's own vendored llama.cpp, with the
wheel's portable flags; tox builds them before the tests, so here it only prints
their folder) and returns the folder of the programs. `running_server` starts
llama-server on 127.0.0.1 on a free port with the arguments given and waits until
its `/health` says it is ready. `RecordingProxy` stands between loopd and the server
and keeps every request body, so a test can read what crossed the link.
"""

from __future__ import annotations

import http.client
import http.server
import json
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from support.skips import skip_or_fail

BUILD = Path(__file__).resolve().parents[2] / "scripts" / "build-llama-cpp"
READY_S = 120.0


def server_binaries() -> Path:
    """The folder holding bin/llama-server and bin/rpc-server."""
    done = subprocess.run(
        [str(BUILD), "--servers", "--gpu", "none"],
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    if done.returncode != 0:
        skip_or_fail(
            "scripts/build-llama-cpp --servers failed, so llama-server cannot run: "
            f"{done.stderr.strip()[-500:]}"
        )
    return Path(done.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def running_server(model: Path, *arguments: str, log: Path) -> Iterator[str]:
    """llama-server serving `model` on 127.0.0.1 with `arguments`; its base URL."""
    binary = server_binaries() / "bin" / "llama-server"
    port = free_port()
    argv: Sequence[str] = [
        str(binary),
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-webui",
        *arguments,
    ]
    with _running(argv, log, lambda: _healthy(port)):
        yield f"http://127.0.0.1:{port}"


@contextmanager
def running_rpc_server(log: Path, threads: int = 1) -> Iterator[str]:
    """rpc-server on 127.0.0.1 on a free port (its CPU device); its endpoint, once it
    accepts connections."""
    binary = server_binaries() / "bin" / "rpc-server"
    port = free_port()
    argv = [str(binary), "--host", "127.0.0.1", "--port", str(port), "--threads", str(threads)]
    with _running(argv, log, lambda: _accepts(port)):
        yield f"127.0.0.1:{port}"


@contextmanager
def _running(argv: Sequence[str], log: Path, ready: Callable[[], bool]) -> Iterator[None]:
    """`argv` running, its output in `log`, once `ready()`; stopped after."""
    name = Path(argv[0]).name
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + READY_S
        while not ready():
            if process.poll() is not None:
                raise AssertionError(
                    f"{name} exited {process.returncode}: {log.read_text()[-2000:]}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} not ready in {READY_S} s: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _healthy(port: int) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        connection.request("GET", "/health")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


class RecordingProxy:
    """An HTTP proxy to `upstream` that keeps each request's path and JSON body and
    passes the answer back as it streams. `cut`: the next streamed completion breaks
    off after its first event, as when the server goes away mid-reply (then `cut` is
    False again)."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        self.requests: list[tuple[str, Any]] = []
        self.cut = False
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                del format, args

            def do_GET(self) -> None:
                self._forward(None)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                self._forward(self.rfile.read(length))

            def _forward(self, body: bytes | None) -> None:
                proxy.requests.append((self.path, json.loads(body) if body else None))
                upstream_link = http.client.HTTPConnection(host, int(port), timeout=120)
                headers = {"Content-Type": "application/json"} if body else {}
                upstream_link.request(self.command, self.path, body=body, headers=headers)
                answer = upstream_link.getresponse()
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in ("transfer-encoding", "content-length", "connection"):
                        self.send_header(name, value)
                self.send_header("Connection", "close")
                self.end_headers()
                breaking = proxy.cut and bool(body) and b'"stream":true' in (body or b"")
                try:
                    while chunk := answer.read1(65536):
                        self.wfile.write(chunk)
                        self.wfile.flush()
                        if breaking and b"data:" in chunk:
                            proxy.cut = False
                            self.connection.shutdown(socket.SHUT_RDWR)
                            break
                except OSError:
                    pass  # the client left: so does the proxy, and the server sees it
                finally:
                    upstream_link.close()
                    self.close_connection = True

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
