"""Keep-alive connections for the local moto server (local only; written against werkzeug 3.1).

werkzeug's development server answers every request with ``Connection: close``, because
``http.server`` cannot tell where an unread request body ends and the next request line
begins. So each AWS call the stack makes costs a new TCP connection in the caller (botocore
pools connections, but a closed one is of no use) and, in moto, an accepted socket and a new
thread. Under load that was a tenth of moto's CPU.

``KeepAliveRequestHandler`` keeps the connection when it can find the body's end: a request
with a ``Content-Length`` (or without a body) is read whole before the application runs, and
the application reads it from memory, so nothing of the next request is ever read as its
body. A chunked request, one that expects ``100 Continue`` (botocore's S3 uploads) and one
the client asks to close are left to werkzeug as before, and close.

werkzeug's handler ends every request by draining what the client sent beyond the body,
waiting up to 10 ms for it: on a closed connection the client's close ends that wait at once,
on a kept one nothing would, and every call would take 10 ms longer. So for a kept
connection the drain reads the body's copy in memory (never the next request) and waits on
a socket already at end of file (``_AT_EOF``), which ends it at once.

``BATCHGW_MOTO_KEEP_ALIVE=0`` serves as werkzeug does, to measure the stack without this.

``client_gone`` tells a request's handler whether its client has closed the connection (a
killed worker's open long poll: ``local.moto_server``'s receive then takes no message).
"""

from __future__ import annotations

import io
import os
import select
import socket
import threading
from importlib.metadata import version
from typing import Any

from moto.moto_server import threaded_moto_server
from moto.moto_server.werkzeug_app import MotoRequestHandler

KEEP_ALIVE_ENV = "BATCHGW_MOTO_KEEP_ALIVE"
WERKZEUG_MAJOR = "3."  # its request handler's run_wsgi, as this relies on it
# One end of a pair whose other end is closed: always readable, and at end of file.
_AT_EOF, _closed = socket.socketpair()
_closed.close()
_serving = threading.local()  # the client's socket, for the request this thread serves


def client_gone() -> bool:
    """Whether the client of the request this thread serves has closed its connection (or
    reset it). A client waiting for its answer sends nothing, so a readable socket is one at
    its end; False off a request, or when this handler is not installed."""
    sock = getattr(_serving, "connection", None)
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):  # reset, or already closed here
        return True


class KeepAliveRequestHandler(MotoRequestHandler):
    """moto's request handler, keeping the connection open between requests it can delimit."""

    kept = False  # whether the connection outlives the current request
    # A response is written in two parts (headers, then body): with Nagle's algorithm the
    # second waits for the client's delayed ACK of the first, about 40 ms, on a kept
    # connection (a closed one flushes at once).
    disable_nagle_algorithm = True

    def run_wsgi(self) -> None:
        chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
        # A client that waits for "100 Continue" before sending its body gets it from
        # werkzeug, which reads the body as it comes: such requests close as before.
        expects = bool(self.headers.get("Expect"))
        self.kept = not (chunked or expects or self.close_connection)
        _serving.connection = self.connection
        try:
            self._run_wsgi()
        finally:
            _serving.connection = None

    def _run_wsgi(self) -> None:
        if not self.kept:
            super().run_wsgi()
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        if len(body) < length:  # the client went away mid-body
            self.close_connection = True
            return
        stream, connection = self.rfile, self.connection
        self.rfile, self.connection = io.BytesIO(body), _AT_EOF
        try:
            super().run_wsgi()
        finally:
            self.rfile, self.connection = stream, connection

    def send_header(self, keyword: str, value: Any) -> None:
        if self.kept and keyword.lower() == "connection" and str(value).lower() == "close":
            return  # werkzeug's blanket close: this connection can serve the next request
        super().send_header(keyword, value)


def install() -> bool:
    """Make ``ThreadedMotoServer`` serve with ``KeepAliveRequestHandler``, unless
    ``BATCHGW_MOTO_KEEP_ALIVE=0`` or werkzeug is not the 3.x this was written against (then
    connections close, as werkzeug has them). Whether it was installed."""
    if os.environ.get(KEEP_ALIVE_ENV, "1") == "0" or not version("werkzeug").startswith(WERKZEUG_MAJOR):
        return False
    threaded_moto_server.MotoRequestHandler = KeepAliveRequestHandler  # type: ignore[misc]
    return True
