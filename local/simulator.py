"""The upstream simulator: a small HTTP server that speaks like the models the gateway calls.

It answers the OpenAI chat completions, embeddings and Responses shapes and Anthropic
Messages, so the gateway's real httpx path runs against it in the local stack, the e2e
tests and the benchmark. Standard library only.

Start it with ``python -m local.simulator [--port 8081] [--latency-ms 0]`` (or the
``BATCHGW_SIM_PORT`` / ``BATCHGW_SIM_LATENCY_MS`` environment variables), or in-process::

    sim = Simulator(port=0).start()   # port 0 picks a free port
    httpx.post(f"{sim.url}/v1/chat/completions", json={...})
    sim.stop()

A second listener (``--backup-port``, env ``BATCHGW_SIM_BACKUP_PORT``) serves the same
models as a second route: the local models config gives ``sim-chat`` a ``backup`` route
there. ``POST /_sim/listeners/backup`` with ``{"up": false}`` closes it (connections are
refused, as a route that is down refuses them) and ``{"up": true}`` opens it again; the
stats count each listener's requests under ``"routes"``.

Its parts, each a module: ``local.sim_protocol`` (the models, endpoints, replies and error
bodies), ``local.sim_directives`` (parsing ``[[sim ...]]``), ``local.sim_answers`` (each API
shape's answer), ``local.sim_stats`` (the counts), ``local.sim_core`` (what a request does,
apart from HTTP), ``local.sim_http`` (the listener), and ``local.sim_batches`` and
``local.sim_capacity`` (below); this module runs them as a server.

Provider batch APIs
    OpenAI's ``/v1/files`` and ``/v1/batches`` and Anthropic's ``/v1/messages/batches``, each
    line answered as the request alone would be, with controls to hold, advance, partly
    complete, fail or expire a batch and to make submits fail (``local.sim_batches``).

Models
    ``sim-chat`` (chat completions and Responses), ``sim-embed`` (embeddings),
    ``sim-claude`` (Anthropic Messages), ``sim-chat-only`` (chat completions only).
    An unknown model answers 404 ``model_not_found``; a known model on an endpoint it
    does not serve answers 400 ``unsupported_endpoint``.

Endpoints (POST, JSON)
    ``/v1/chat/completions``, ``/v1/embeddings``, ``/v1/responses``, ``/v1/messages``
    (the last one requires an ``anthropic-version`` header). No authentication is
    checked. Besides: ``GET /healthz``; ``GET /_sim/stats`` answers
    ``{"models": {"sim-chat": {"requests": N, "in_flight": K, "max_in_flight": M}, ...},
    "tags": {...}}`` (the same counts per ``tag=`` directive);
    ``"routes": {"primary": N, "backup": N}``;
    ``POST /_sim/reset`` zeroes the request counts and attempt counters, and sets
    ``max_in_flight`` to what is in flight now (``in_flight`` itself stays true).

Capacity (``local.sim_capacity``)
    Each model serves a limited number of sequences at once when told to (``--capacity N``,
    ``BATCHGW_SIM_CAPACITY``, or ``POST /_sim/capacity`` ``{"sim-chat": 16}``; 0 or null:
    no limit, the default): the rest wait in its queue, first come first served, so their
    latency grows with the load; ``POST /_sim/overflow`` ``{"sim-chat": 429}`` (or 503) makes a
    model refuse at once what it has no room for, as a server without a queue does (null:
    they wait again). ``/_sim/stats`` adds ``"queues": {MODEL: {"capacity",
    "running", "running_by_source": {"interactive", "batch"}, "waiting"}}`` and ``"latency":
    {MODEL: {"interactive"|"batch": {"count", "p50_ms", "p90_ms", "p99_ms", "answered"}}}`` of
    the recent requests, arrival to answer (``answered``: every one since the last reset; a
    request with ``x-batchgw-source: batch`` is the batch worker's, any other interactive).
    ``GET /metrics`` answers vLLM's ``vllm:num_requests_running`` and ``vllm:num_requests_waiting``
    gauges per ``model_name``.

Answers without directives are deterministic: the text ``"echo: "`` followed by the
last user message's text (content parts joined by a space). Usage counts
whitespace-separated words, at least 1: input over every text of the request
(messages, system, instructions, input), output over the answer. Chat honours ``stop``
and ``max_tokens``/``max_completion_tokens``; Messages honours ``stop_sequences`` and
``max_tokens``; Responses honours ``max_output_tokens`` (status ``incomplete``).
Embeddings are unit vectors derived from a SHA-256 of each input (8 dimensions unless
``dimensions`` says otherwise; ``encoding_format: "base64"`` gives little-endian float32).

Directives, written anywhere in the request's text (``[[sim key=value flag ...]]``;
several tokens per directive and several directives are allowed, later values win)
    ``status=N``       answer HTTP N with an OpenAI-style error body (Anthropic-style on
                       /v1/messages). A 2xx N answers the normal body with that status.
                       A 401 says what OpenAI says of a wrong key, quoting the first 8 and
                       the last 4 characters of the key it was sent (``Incorrect API key
                       provided: sk-sim-l*************-key. You can find...``); Anthropic's
                       is ``invalid x-api-key``.
    ``fail=N``         apply the failure directives (status, queued, garbage, nan, surrogate,
                       hang) to the
                       first N attempts of this same request only (same endpoint and same
                       canonical JSON body), then answer normally. Alone it means status=500.
    ``latency_ms=N``   wait N ms before answering (added to the server's base latency).
    ``trickle_ms=N``   send the answer's head at once, then its body in pieces of
                       ``TRICKLE_PIECE_BYTES`` (16) bytes, N ms apart: a server that keeps
                       the connection busy without ever being idle long enough for a read
                       timeout (stops when the client goes away). The request counts
                       as in flight until its last piece is sent.
    ``retry_after=S``  send ``Retry-After: S`` on error answers.
    ``queued``         answer 503 ``{"error": {"type": "service_unavailable",
                       "code": "model_queued", ...}}``.
    ``garbage``        answer 200 with a body that is not JSON.
    ``nan``            answer 200 with the normal body plus ``"x_sim_value": NaN`` (not JSON).
    ``surrogate``      answer 200 with the normal body plus a string holding a lone surrogate
                       escape (``"\ud800"``: JSON in form, but no UTF-8 text).
    ``bytes=N``        make the successful answer body exactly N bytes long, by padding
                       (or cutting) the answer text with spaces; answers without text
                       (embeddings, tool calls) get a top-level ``x_sim_padding`` string.
                       Usage still counts the unpadded answer. When N is smaller than the
                       answer with an empty text, that smallest answer is sent (longer than
                       N, but still valid JSON).
    ``chunked``        send the answer with ``Transfer-Encoding: chunked`` (pieces of
                       ``CHUNK_BYTES``, 64 KiB) instead of a ``Content-Length``: the client
                       learns its size only by reading it.
    ``hang``           never answer: hold the connection until the client goes away or
                       the server stops.
    ``cached=N``       report N of the answer's input tokens (at most all of them) as served
                       from a prompt cache, as each API says it: chat's
                       ``usage.prompt_tokens_details.cached_tokens``, Responses'
                       ``usage.input_tokens_details.cached_tokens``, Messages'
                       ``usage.cache_read_input_tokens`` (its ``input_tokens`` then the rest,
                       as Anthropic counts). Embeddings report none. Not for use with ``bytes``.
    ``tag=NAME``       count the request under NAME too: ``/_sim/stats`` then also answers
                       ``"tags": {NAME: {"requests", "in_flight", "max_in_flight"}}`` (how
                       many requests of one user, say, were ever in flight at once).
    ``tool``           (in the last user text, when the request has tools) answer with a
                       call of the first tool with ``{}`` arguments, unless the request
                       already ends with a tool result.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from collections.abc import Mapping
from types import TracebackType
from typing import Self

from local.sim_core import SimulatorCore
from local.sim_http import Server
from local.sim_protocol import BACKUP, PRIMARY, JsonObject

DEFAULT_PORT = 8081
DEFAULT_BACKUP_PORT = 8083
DEFAULT_HOST = "127.0.0.1"
STOP_POLL_SECONDS = 0.05  # how soon stop() is noticed by the accept loop


class Simulator:
    """The simulator server, run in background threads.

    ``Simulator(port=0).start()`` picks a free port; ``.port``, ``.url``
    (``http://127.0.0.1:PORT``) and ``.base_url`` (``.../v1``) say where it listens. With
    ``backup_port`` (0: a free one) it listens there too, as a model's second route
    (``.backup_port``); ``set_backup(False)`` closes that listener and ``True`` opens it
    again. Usable as a context manager.
    """

    def __init__(
        self,
        port: int = 0,
        *,
        host: str = DEFAULT_HOST,
        latency_ms: float = 0.0,
        backup_port: int | None = None,
        capacity: int = 0,
    ) -> None:
        self.host = host
        self.core = SimulatorCore(latency_ms=latency_ms, capacity=capacity)
        self._requested_port = port
        self._requested_backup = backup_port
        self._server: Server | None = None
        self._thread: threading.Thread | None = None
        self._backup: tuple[Server, threading.Thread] | None = None
        self._backup_port: int | None = None
        self._backup_lock = threading.Lock()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the simulator is not started")
        return self._server.server_port

    @property
    def backup_port(self) -> int | None:
        return self._backup_port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def _listen(self, port: int, route: str) -> tuple[Server, threading.Thread]:
        server = Server((self.host, port), self.core, route)
        thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": STOP_POLL_SECONDS},
            name=f"simulator:{route}:{server.server_port}",
            daemon=True,
        )
        thread.start()
        return server, thread

    def start(self) -> Self:
        if self._server is not None:
            raise RuntimeError("the simulator is already started")
        self.core.stopping.clear()
        self._server, self._thread = self._listen(self._requested_port, PRIMARY)
        if self._requested_backup is not None:
            self._backup_port = self._requested_backup
            self.set_backup(True)
            self.core.switch_backup = self.set_backup
        return self

    def set_backup(self, up: bool) -> None:
        """Open the backup listener, or close it (its port then refuses connections)."""
        with self._backup_lock:
            if up and self._backup is None:
                assert self._backup_port is not None
                self._backup = self._listen(self._backup_port, BACKUP)
                self._backup_port = self._backup[0].server_port
            elif not up and self._backup is not None:
                _close(*self._backup)
                self._backup = None

    def stop(self) -> None:
        """Stops accepting, releases hung and idle connections, and closes the sockets."""
        server, self._server = self._server, None
        if server is None:
            return
        self.core.stopping.set()
        self.core.switch_backup = None
        self.set_backup(False)
        assert self._thread is not None
        _close(server, self._thread)
        self._thread = None

    def stats(self) -> JsonObject:
        return self.core.snapshot()

    def reset(self) -> None:
        self.core.reset()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _close(server: Server, thread: threading.Thread) -> None:
    server.shutdown()
    server.close_connections()
    server.server_close()
    thread.join(timeout=5)


# --------------------------------------------------------------------------- command line


def parse_args(argv: list[str] | None = None, environ: Mapping[str, str] = os.environ) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m local.simulator", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--port",
        type=int,
        default=int(environ.get("BATCHGW_SIM_PORT") or DEFAULT_PORT),
        help="port to listen on (env BATCHGW_SIM_PORT, default 8081)",
    )
    parser.add_argument(
        "--backup-port",
        type=int,
        default=int(environ.get("BATCHGW_SIM_BACKUP_PORT") or DEFAULT_BACKUP_PORT),
        help="port of the second route's listener (env BATCHGW_SIM_BACKUP_PORT, default 8083)",
    )
    parser.add_argument("--host", default=DEFAULT_HOST, help="address to listen on (default 127.0.0.1)")
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=float(environ.get("BATCHGW_SIM_LATENCY_MS") or 0),
        help="base latency of every model request (env BATCHGW_SIM_LATENCY_MS, default 0)",
    )
    parser.add_argument(
        "--capacity",
        type=int,
        default=int(environ.get("BATCHGW_SIM_CAPACITY") or 0),
        help="sequences a model serves at once, the rest queue (env BATCHGW_SIM_CAPACITY, default 0: none)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    done = threading.Event()

    def stop_on(signum: int, _: object) -> None:
        # A stack whose simulator stopped shows its log's tail: it says whether it was told to.
        print(f"simulator stopping on {signal.Signals(signum).name}", flush=True)
        done.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop_on)
    simulator = Simulator(
        args.port,
        host=args.host,
        latency_ms=args.latency_ms,
        backup_port=args.backup_port,
        capacity=args.capacity,
    ).start()
    print(
        f"simulator listening on {simulator.url}, backup route on port {simulator.backup_port} "
        f"(base latency {args.latency_ms:g} ms)",
        flush=True,
    )
    try:
        done.wait()
    finally:
        simulator.stop()


if __name__ == "__main__":
    main()
