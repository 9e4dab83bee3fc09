"""The HTTP link to a model server (issue 41): JSON requests and a streamed completion.

I/O: `http.client` over TCP, TLS for an `https://` address with the system's trust
store (or the `ca_file` given), the server's certificate and name verified, never
skipped. One connection a request, closed when its answer is read, or when the
reader stops early: llama-server stops a streamed completion whose client left, so a
stop token seen here ends the server's work on it too.
"""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from boxmaker.core.display.escape import escape_arguments
from boxmaker.core.errors import UnavailableError

USER_AGENT = "boxmaker-loopd"
ANSWER_LIMIT = 16 * 1024 * 1024  # bytes of a whole JSON answer read at most
LINE_LIMIT = 1024 * 1024  # bytes of one streamed line


class ServerUnreachableError(UnavailableError):
    """The server could not be reached, or broke off, or answered with an HTTP error."""


@dataclass(frozen=True)
class ServerAddress:
    scheme: str  # http or https
    host: str
    port: int
    base: str  # the path the server's endpoints are under ("" for /)

    @classmethod
    def parse(cls, url: str) -> ServerAddress:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"a server address is http:// or https:// and a host, not {url!r}")
        if parts.query or parts.fragment or parts.username or parts.password:
            raise ValueError(
                f"a server address has no query, fragment or credentials: {url!r} "
                "(an API key goes in a secret, never in the address)"
            )
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))

    def __str__(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}{self.base}"


class ServerLink:
    """Requests to one server."""

    def __init__(self, url: str, *, timeout_s: float, ca_file: Path | None = None) -> None:
        self.address = ServerAddress.parse(url)
        self._timeout = timeout_s
        self._tls: ssl.SSLContext | None = None
        if self.address.scheme == "https":
            self._tls = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)

    def get(self, path: str) -> Any:
        """GET `path`: its JSON answer."""
        return self._json("GET", path, None)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        """POST `body` to `path`: its JSON answer."""
        return self._json("POST", path, body)

    def stream(self, path: str, body: dict[str, Any]) -> Generator[str, None, None]:
        """POST `body` to `path` and yield each line of the answer as it comes (without
        its line end). Closing the iterator (or leaving a `for` over it) closes the
        connection."""
        connection, response = self._send("POST", path, body)
        try:
            while True:
                line = response.readline(LINE_LIMIT + 1)
                if not line:
                    return
                if len(line) > LINE_LIMIT:
                    raise ServerUnreachableError(
                        f"the server at {self.address} sent a line over {LINE_LIMIT} bytes"
                    )
                yield line.decode("utf-8", errors="replace").rstrip("\r\n")
        except (OSError, http.client.HTTPException) as exc:
            raise self._broken(exc) from exc
        finally:
            connection.close()

    def _json(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        connection, response = self._send(method, path, body)
        try:
            data = response.read(ANSWER_LIMIT + 1)
        except (OSError, http.client.HTTPException) as exc:
            raise self._broken(exc) from exc
        finally:
            connection.close()
        if len(data) > ANSWER_LIMIT:
            raise ServerUnreachableError(
                f"the server at {self.address} answered {path} with over {ANSWER_LIMIT} bytes"
            )
        try:
            return json.loads(data)
        except ValueError as exc:
            raise ServerUnreachableError(
                f"the server at {self.address} answered {path} with something not JSON"
            ) from exc

    def _send(
        self, method: str, path: str, body: dict[str, Any] | None
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        address = self.address
        connection: http.client.HTTPConnection
        if self._tls is not None:
            connection = http.client.HTTPSConnection(
                address.host, address.port, timeout=self._timeout, context=self._tls
            )
        else:
            connection = http.client.HTTPConnection(
                address.host, address.port, timeout=self._timeout
            )
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json, text/event-stream"}
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json"
        try:
            connection.request(method, address.base + path, body=data, headers=headers)
            response = connection.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            raise self._broken(exc) from exc
        if response.status != 200:
            said = response.read(300).decode("utf-8", errors="replace")
            connection.close()
            raise ServerUnreachableError(
                f"the server at {address} answered {method} {path} with HTTP "
                f"{response.status}: {escape_arguments(said)}"
            )
        return connection, response

    def _broken(self, exc: BaseException) -> ServerUnreachableError:
        what = escape_arguments(str(exc) or type(exc).__name__)
        return ServerUnreachableError(f"the server at {self.address} could not be reached: {what}")
