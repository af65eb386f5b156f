"""What the simulator does with a request, apart from HTTP: the control endpoints
(``/_sim/...``, ``/metrics``), the provider batch APIs handed to ``local.sim_batches``, and
each model request: its capacity queue, directives applied (latency, failures, sizes), then
its answer (``local.sim_answers``).
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import replace
from typing import Any

from local.sim_answers import ANSWERS, collect_texts, count_words, fit_to_size, with_cached
from local.sim_batches import ProviderBatches
from local.sim_capacity import ADMITTED, Capacity, Latencies, prometheus, source_of
from local.sim_directives import BROKEN, Directives, parse_directives
from local.sim_protocol import (
    BACKUP,
    MODELS,
    PRIMARY,
    Endpoint,
    JsonObject,
    Reply,
    RequestError,
    error_reply,
    json_reply,
)
from local.sim_stats import Attempts, Stats

PROVIDER_BATCH_ROUTE = "provider_batch"  # the route a provider batch's lines count under
GARBAGE_BODY = b"\xff\xfenot json{"
HANG_POLL_SECONDS = 0.2
PROMETHEUS_TEXT = "text/plain; version=0.0.4"
OVERFLOW_STATUSES = (429, 503, None)  # what a model may answer past its capacity (None: queue)


def _tag_of(body: JsonObject) -> str | None:
    """The request's ``tag=`` directive, if it has one (a bad directive is answered later)."""
    try:
        return parse_directives(collect_texts(body)).tag
    except RequestError:
        return None


def _trickled(reply: Reply | None, directives: Directives) -> Reply | None:
    """The reply, sent as the directives say: trickled, chunked, or at once."""
    if reply is None or not (directives.trickle_ms or "chunked" in directives.flags):
        return reply
    return replace(reply, trickle_ms=directives.trickle_ms, chunked="chunked" in directives.flags)


def _overflow_reply(status: int, *, anthropic: bool) -> Reply:
    """A model with no room refusing a request at once, as its server says so."""
    if status == 429:
        return error_reply(
            429,
            "Rate limit reached: the model is serving all it can. Please try again later.",
            anthropic=anthropic,
            type_="rate_limit_error" if anthropic else "requests",
            code="rate_limit_exceeded",
        )
    return error_reply(503, "The server is overloaded or not ready yet.", anthropic=anthropic)


def wrong_key_message(headers: Mapping[str, str], anthropic: bool) -> str:
    """What the provider says of a key it refuses: OpenAI quotes the key, partly masked."""
    if anthropic:
        return "invalid x-api-key"
    authorization = headers.get("authorization", "")
    key = authorization[7:].strip() if authorization.lower().startswith("bearer ") else ""
    if not key:
        return (
            "You didn't provide an API key. You need to provide your API key in an Authorization "
            "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
        )
    shown = key[:8] + "*" * (len(key) - 12) + key[-4:] if len(key) > 12 else key
    return (
        f"Incorrect API key provided: {shown}. You can find your API key at "
        "https://platform.openai.com/account/api-keys."
    )


class SimulatorCore:
    """Everything the simulator does, apart from HTTP parsing and socket writes.

    ``handle`` returns the reply to send, or None when the connection must be closed
    without an answer (a hang that ended, or a server stopping mid-wait).
    """

    def __init__(self, latency_ms: float = 0.0, capacity: int = 0) -> None:
        self.latency_ms = latency_ms
        self.stats = Stats(MODELS)
        self.capacity = Capacity(MODELS, capacity)
        self.latencies = Latencies(MODELS)
        self.attempts = Attempts()
        self.stopping = threading.Event()
        # Set by ``Simulator`` when it has a backup listener: open (True) or close it.
        self.switch_backup: Callable[[bool], None] | None = None
        self.provider_batches = ProviderBatches(self._line_answer)

    def reset(self) -> None:
        self.stats.reset()
        self.attempts.clear()
        self.latencies.clear()
        self.provider_batches.reset()

    def _line_answer(self, url: str, body: JsonObject, headers: Mapping[str, str]) -> tuple[int, Any] | None:
        """A provider batch's line, answered as the same request sent alone would be, without
        its latency (a batch's lines are answered when it is processed, in the read that finds
        it due: how long the provider took is ``auto_seconds``); a hang gives up at once:
        nobody waits on the line."""
        anthropic = url == Endpoint.MESSAGES.value
        model = body.get("model")
        if not isinstance(model, str) or model not in MODELS:
            return 404, json.loads(
                error_reply(404, f"the model {model!r} does not exist", anthropic=anthropic).body
            )
        # Counted as the model's requests are (under the route ``provider_batch``): the
        # provider ran it, as it runs one sent alone.
        with self.stats.track(model, _tag_of(body), PROVIDER_BATCH_ROUTE):
            reply = self._model_request(Endpoint(url), model, body, headers, lambda: True, delayed=False)
        if reply is None:
            return None
        try:
            return reply.status, json.loads(reply.body)
        except ValueError:
            return 502, {"error": {"message": "the answer was not JSON"}}

    def snapshot(self) -> JsonObject:
        """``/_sim/stats``: the counts, and per model its queue and latencies by source."""
        shown = self.stats.snapshot()
        shown["queues"] = self.capacity.snapshot()
        shown["latency"] = {model: self.latencies.snapshot(model) for model in MODELS}
        return shown

    def handle(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        raw: bytes,
        client_gone: Callable[[], bool] = lambda: False,
        route: str = PRIMARY,
    ) -> Reply | None:
        """Answers one request (that came to the ``route`` listener); ``headers`` has
        lower-case names."""
        path = path.split("?", 1)[0]
        if path == "/healthz":
            return json_reply(200, {"status": "ok"})
        if path == "/_sim/stats":
            return json_reply(200, self.snapshot())
        if path == "/metrics":
            return Reply(200, prometheus(self.capacity.snapshot()), content_type=PROMETHEUS_TEXT)
        if path == "/_sim/capacity":
            return self._set_capacity(method, raw)
        if path == "/_sim/overflow":
            return self._set_overflow(method, raw)
        if path == "/_sim/reset":
            if method != "POST":
                return error_reply(405, "use POST /_sim/reset")
            self.reset()
            return json_reply(200, {"status": "ok"})
        if path == f"/_sim/listeners/{BACKUP}":
            return self._switch_backup(method, raw)
        provided = self.provider_batches.handle(method, path, headers, raw)
        if provided is not None:
            status, answer, extra = provided
            if isinstance(answer, bytes):
                return Reply(status, answer, extra, content_type="application/jsonl")
            return json_reply(status, answer, extra)
        try:
            endpoint = Endpoint(path)
        except ValueError:
            return error_reply(404, f"unknown path {path}", code="unknown_url")
        anthropic = endpoint is Endpoint.MESSAGES
        if method != "POST":
            return error_reply(405, f"use POST {path}", anthropic=anthropic)
        try:
            body = json.loads(raw)
        except ValueError:
            return error_reply(400, "the body is not valid JSON", anthropic=anthropic)
        if not isinstance(body, dict):
            return error_reply(400, "the body must be a JSON object", anthropic=anthropic)
        model = body.get("model")
        if not isinstance(model, str):
            return error_reply(400, "model is required", anthropic=anthropic)
        if model not in MODELS:
            return error_reply(
                404,
                f"the model {model!r} does not exist",
                anthropic=anthropic,
                type_="not_found_error",
                code="model_not_found",
            )
        arrived = self.latencies.clock()
        source = source_of(headers)
        tracked = ExitStack()
        tracked.enter_context(self.stats.track(model, _tag_of(body), route))
        try:
            entered = self.capacity.enter(model, lambda: self.stopping.is_set() or client_gone(), source)
            if entered is None:
                tracked.close()
                return None  # it waited in the queue until its client (or the server) gave up
            if entered != ADMITTED:  # no room, and this server refuses rather than queues
                tracked.close()
                return _overflow_reply(entered, anthropic=anthropic)
            try:
                reply = self._model_request(endpoint, model, body, headers, client_gone)
            finally:
                self.capacity.release(model, source)
        except BaseException:
            tracked.close()
            raise
        if reply is not None:
            self.latencies.add(model, source, self.latencies.clock() - arrived)
        if reply is None or not reply.trickle_ms:
            tracked.close()
            return reply
        # A trickled answer stays in flight until its last piece is written (``sent``).
        return replace(reply, sent=tracked.close)

    def _set_capacity(self, method: str, raw: bytes) -> Reply:
        """``GET``: each model's sequences at once (0: no limit); ``POST {"sim-chat": 16}``
        sets them (``null`` or 0 lifts a limit)."""
        if method == "POST":
            try:
                limits = json.loads(raw or b"{}")
            except ValueError:
                limits = None
            if not isinstance(limits, dict) or not all(
                model in MODELS and (n is None or (type(n) is int and n >= 0)) for model, n in limits.items()
            ):
                return error_reply(400, 'send {"<model>": <sequences at once, 0 or null for no limit>, ...}')
            self.capacity.set_limits({model: n or 0 for model, n in limits.items()})
        elif method != "GET":
            return error_reply(405, "use GET or POST /_sim/capacity")
        return json_reply(200, {"models": self.capacity.limits()})

    def _set_overflow(self, method: str, raw: bytes) -> Reply:
        """``GET``: what each model answers past its capacity (null: its requests wait their
        turn); ``POST {"sim-chat": 429}`` makes it refuse them at once with 429 or 503 (null:
        wait again), as a server without a queue does."""
        if method == "POST":
            try:
                statuses = json.loads(raw or b"{}")
            except ValueError:
                statuses = None
            if not isinstance(statuses, dict) or not all(
                model in MODELS and (status is None or type(status) is int) and status in OVERFLOW_STATUSES
                for model, status in statuses.items()
            ):
                return error_reply(400, 'send {"<model>": 429, 503 or null, ...}')
            self.capacity.set_overflows(statuses)
        elif method != "GET":
            return error_reply(405, "use GET or POST /_sim/overflow")
        return json_reply(200, {"models": self.capacity.overflows()})

    def _switch_backup(self, method: str, raw: bytes) -> Reply:
        if method != "POST":
            return error_reply(405, f"use POST /_sim/listeners/{BACKUP}")
        try:
            up = json.loads(raw or b"{}").get("up")
        except (ValueError, AttributeError):
            up = None
        if not isinstance(up, bool):
            return error_reply(400, 'send {"up": true} or {"up": false}')
        if self.switch_backup is None:
            return error_reply(404, "this simulator has no backup listener")
        self.switch_backup(up)
        return json_reply(200, {"listener": BACKUP, "up": up})

    def _model_request(
        self,
        endpoint: Endpoint,
        model: str,
        body: JsonObject,
        headers: Mapping[str, str],
        client_gone: Callable[[], bool],
        *,
        delayed: bool = True,
    ) -> Reply | None:
        anthropic = endpoint is Endpoint.MESSAGES
        if anthropic and not headers.get("anthropic-version"):
            return error_reply(400, "anthropic-version header is required", anthropic=True)
        if endpoint not in MODELS[model]:
            return error_reply(
                400,
                f"the model {model!r} does not support {endpoint.value}",
                anthropic=anthropic,
                code="unsupported_endpoint",
            )
        texts = list(collect_texts(body))
        try:
            directives = parse_directives(texts)
        except RequestError as exc:
            return error_reply(400, str(exc), anthropic=anthropic)

        delay = self.latency_ms + directives.latency_ms if delayed else 0
        if delay > 0 and self.stopping.wait(delay / 1000):
            return None
        if directives.fail is not None:
            failing = self.attempts.next(Attempts.identity(endpoint, body)) <= directives.fail
        else:
            failing = directives.has_failure
        if failing and not directives.flags & BROKEN:
            return _trickled(self._failure(directives, anthropic, client_gone, headers), directives)

        try:
            draft = ANSWERS[endpoint](model, body, count_words(texts))
        except RequestError as exc:
            return error_reply(400, str(exc), anthropic=anthropic)
        status = directives.status if directives.status is not None and directives.status < 300 else 200
        answer = fit_to_size(draft, directives.bytes)
        if directives.cached is not None:
            answer = with_cached(answer, endpoint, directives.cached)
        if failing:  # the normal answer, usage and all, broken on purpose
            broken = json.loads(answer)
            if "nan" in directives.flags:
                broken["x_sim_value"] = math.nan
            if "surrogate" in directives.flags:
                broken["x_sim_text"] = "\ud800"
            answer = json.dumps(broken).encode()
        return _trickled(Reply(status, answer), directives)

    def _failure(
        self,
        directives: Directives,
        anthropic: bool,
        client_gone: Callable[[], bool],
        headers: Mapping[str, str],
    ) -> Reply | None:
        """The failing answer the directives ask for; None for a hang (after it ends)."""
        if "hang" in directives.flags:
            while not self.stopping.wait(HANG_POLL_SECONDS):
                if client_gone():
                    break
            return None
        if "queued" in directives.flags:
            return error_reply(
                503,
                "the model is queued; retry later",
                anthropic=anthropic,
                type_="service_unavailable",
                code="model_queued",
                retry_after=directives.retry_after,
            )
        if "garbage" in directives.flags:
            return Reply(200, GARBAGE_BODY)
        status = directives.status if directives.status is not None and directives.status >= 400 else 500
        if status == 401:
            code = None if anthropic else "invalid_api_key"
            return error_reply(401, wrong_key_message(headers, anthropic), anthropic=anthropic, code=code)
        return error_reply(
            status,
            f"simulated error {status}",
            anthropic=anthropic,
            code="rate_limit_exceeded" if status == 429 and not anthropic else None,
            retry_after=directives.retry_after,
        )
