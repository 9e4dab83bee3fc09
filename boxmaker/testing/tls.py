"""A throwaway certificate authority and a local HTTPS server, for the egress tests.

I/O: runs `openssl` to make a CA and a server certificate in a directory, and
serves HTTPS on 127.0.0.1 on a free port from a thread. The server answers
`hello from <Host>` and, for paths in `redirects`, a 302 to the given location.
Nothing here listens anywhere but loopback.
"""

from __future__ import annotations

import http.server
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from boxmaker.core.errors import BoxmakerError


class OpensslMissingError(BoxmakerError, RuntimeError):
    """openssl is not installed, so no test CA can be made."""


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_test_certs(folder: Path, names: Iterable[str]) -> Path:
    """In `folder`: ca.pem, and server.pem and server.key valid for `names`; returns it."""
    if shutil.which("openssl") is None:
        raise OpensslMissingError("openssl is not installed (needed to make the test CA)")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
             "-subj", "/CN=boxmaker test CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign", cwd=folder)  # fmt: skip
    _openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr",
             "-subj", "/CN=boxmaker test server", cwd=folder)  # fmt: skip
    sans = ",".join(f"DNS:{name}" for name in names)
    (folder / "ext.cnf").write_text(
        f"subjectAltName={sans}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
    )
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "server.pem", "-days", "1", "-extfile", "ext.cnf",
             cwd=folder)  # fmt: skip
    (folder / "ca.pem").chmod(0o644)
    return folder


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    accepted = 0
    context: ssl.SSLContext
    redirects: Mapping[str, str]

    def get_request(self) -> tuple[socket.socket, Any]:
        request, address = self.socket.accept()
        self.accepted += 1
        return request, address

    def finish_request(self, request: Any, client_address: Any) -> None:
        with self.context.wrap_socket(request, server_side=True) as tls:
            self.RequestHandlerClass(tls, client_address, self)  # type: ignore[arg-type]

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients refused or hanging up mid-handshake are part of the tests


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        location = self.server.redirects.get(self.path)
        if location is not None:
            self.send_response(302)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.send_header("Connection", "close")
            self.end_headers()
            return
        body = f"hello from {self.headers['Host']}".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class LocalHttps:
    """An HTTPS server on 127.0.0.1 with the certificates in `certs`; a context manager."""

    def __init__(self, certs: Path, redirects: Mapping[str, str] | None = None) -> None:
        self.ca = certs / "ca.pem"
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.redirects = dict(redirects or {})
        self._server.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._server.context.load_cert_chain(certs / "server.pem", certs / "server.key")
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )

    @property
    def accepted(self) -> int:
        """How many connections the server has accepted so far."""
        return self._server.accepted

    def __enter__(self) -> LocalHttps:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)
