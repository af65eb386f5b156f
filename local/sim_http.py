"""The simulator's HTTP listener: a threading server that reads each request (chunked
bodies included), hands it to ``SimulatorCore`` and writes its reply at once, chunked or
trickled; it keeps its connections so that stopping releases idle and hung ones.
"""

from __future__ import annotations

import select
import socket
import sys
import threading
from contextlib import suppress
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import TCPServer
from typing import Any

from local.sim_core import SimulatorCore
from local.sim_protocol import Reply, error_reply

TRICKLE_PIECE_BYTES = 16
CHUNK_BYTES = 64 * 1024


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: Server

    def setup(self) -> None:
        super().setup()
        self.server.connection_opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.connection_closed(self.connection)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: a log line per request would cost more than the simulated model."""

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _dispatch(self, method: str) -> None:
        try:
            raw = self._read_body()
        except ValueError:
            self.close_connection = True
            self._write(error_reply(400, "bad request body framing"))
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        reply = self.server.core.handle(method, self.path, headers, raw, self._client_gone, self.server.route)
        if reply is None:
            self.close_connection = True
            return
        self._write(reply)

    def _write(self, reply: Reply) -> None:
        try:
            phrase = HTTPStatus(reply.status).phrase
        except ValueError:
            phrase = "Status"
        lines = [
            f"HTTP/1.1 {reply.status} {phrase}",
            f"Content-Type: {reply.content_type}",
            "Transfer-Encoding: chunked" if reply.chunked else f"Content-Length: {len(reply.body)}",
        ]
        lines += [f"{name}: {value}" for name, value in reply.headers]
        if self.close_connection:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        if reply.chunked and not reply.trickle_ms:
            self.wfile.write(head)
            for start in range(0, len(reply.body), CHUNK_BYTES):
                self.wfile.write(_chunk(reply.body[start : start + CHUNK_BYTES]))
            self.wfile.write(_chunk(b""))
            return
        if reply.trickle_ms > 0:
            try:
                self._trickle(head, reply.body, reply.trickle_ms / 1000, chunked=reply.chunked)
            finally:
                if reply.sent is not None:
                    reply.sent()
            return
        self.wfile.write(head + reply.body)  # one write: no Nagle/delayed-ACK stall between parts

    def _trickle(self, head: bytes, body: bytes, pause: float, *, chunked: bool) -> None:
        """The head at once, then the body in small pieces ``pause`` seconds apart (until the
        client goes away: a write then fails, which the server ignores)."""
        self.wfile.write(head)
        for start in range(0, len(body), TRICKLE_PIECE_BYTES):
            if self.server.core.stopping.wait(pause):
                self.close_connection = True
                return
            piece = body[start : start + TRICKLE_PIECE_BYTES]
            self.wfile.write(_chunk(piece) if chunked else piece)
        if chunked:
            self.wfile.write(_chunk(b""))


def _chunk(data: bytes) -> bytes:
    """One chunk of a chunked body (an empty one ends it)."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


class Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # stop() releases every handler itself
    request_queue_size = 1024  # a burst of 64+ new connections must not overflow the backlog

    allow_reuse_address = True  # the backup listener opens again on its port at once

    def __init__(self, address: tuple[str, int], core: SimulatorCore, route: str = "primary") -> None:
        self.core = core
        self.route = route
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        TCPServer.server_bind(self)  # skips HTTPServer's reverse DNS lookup of the host
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def connection_opened(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._connections.add(connection)

    def connection_closed(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._connections.discard(connection)

    def close_connections(self) -> None:
        """Wakes every handler blocked on an idle keep-alive connection."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # a client that went away is not the simulator's problem
        super().handle_error(request, client_address)
