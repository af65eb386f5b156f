"""Interactive load reports (administrators' keys: the gateway processes that serve
interactive traffic report with one).

``PUT /admin/interactive-load/{reporter_id}`` with ``{"models": {"sim-chat": 3}, "ttl_seconds": 10}``
stores the interactive requests that reporter has in flight on each model now: absolute
counts, replacing its last report, and counting only until ``ttl_seconds`` have passed, so
a reporter that dies takes its load with it. A reporter reports again well within its ttl
(every few seconds), and ``DELETE`` drops its report when it stops cleanly.
``GET /admin/interactive-load`` lists the live reports and their sums per model.

Workers give way to the summed load (``domain.interactive``): see ``GET /admin/batch/models``.
"""

from __future__ import annotations

import math
from typing import Any

from batchgw.api.accounts import require_admin
from batchgw.deps import Deps
from batchgw.domain.errors import BadRequest, NotFound, ServiceUnavailable, StorageError
from batchgw.domain.interactive import (
    DEFAULT_TTL_SECONDS,
    MAX_IN_FLIGHT,
    MAX_REPORT_MODELS,
    MAX_TTL_SECONDS,
    MIN_TTL_SECONDS,
    REPORTER_ID,
    InteractiveLoad,
    LoadReport,
)
from batchgw.domain.principal import Principal

MAX_MODEL_ID_CHARS = 256


def report(deps: Deps, principal: Principal, reporter: str, body: Any) -> dict[str, Any]:
    require_admin(principal)
    _check_reporter(reporter)
    if not isinstance(body, dict) or not set(body) <= {"models", "ttl_seconds"} or "models" not in body:
        shape = '{"models": {"<model>": <requests in flight>, ...}, "ttl_seconds": <1-3600>}'
        raise BadRequest(f"Send {shape}.", param="models")
    models = _models(body["models"])
    ttl = body.get("ttl_seconds", DEFAULT_TTL_SECONDS)
    if (
        isinstance(ttl, bool)
        or not isinstance(ttl, int | float)
        or not math.isfinite(ttl)
        or not MIN_TTL_SECONDS <= ttl <= MAX_TTL_SECONDS
    ):
        raise BadRequest(
            f"ttl_seconds must be a number from {MIN_TTL_SECONDS} to {MAX_TTL_SECONDS}.", param="ttl_seconds"
        )
    stored = deps.interactive.report(reporter, models, now=deps.clock(), ttl_seconds=float(ttl))
    deps.shares.forget()
    return _report_object(stored)


def remove(deps: Deps, principal: Principal, reporter: str) -> dict[str, Any]:
    require_admin(principal)
    _check_reporter(reporter)
    if not deps.interactive.remove(reporter):
        raise NotFound(f"No interactive load reported by '{reporter}'.", code="reporter_not_found")
    deps.shares.forget()
    return {"id": reporter, "object": "interactive_load.report", "deleted": True}


def list_reports(deps: Deps, principal: Principal) -> dict[str, Any]:
    require_admin(principal)
    now = deps.clock()
    try:
        stored = deps.interactive.reports()
    except StorageError as exc:  # the same failure stops new batch requests (fail closed)
        raise ServiceUnavailable(
            "The interactive load reports cannot be read now; no new batch request starts while "
            "BATCH_SHARED_INTERACTIVE_LOAD is on.",
            code="interactive_load_unreadable",
        ) from exc
    reports = sorted((r for r in stored if r.live(now)), key=lambda r: r.reporter)
    load = InteractiveLoad.of(reports, now)
    return {
        "object": "list",
        "data": [_report_object(r) for r in reports],
        "in_flight": dict(sorted(load.shared.items())),
    }


def _report_object(report: LoadReport) -> dict[str, Any]:
    return {
        "id": report.reporter,
        "object": "interactive_load.report",
        "models": dict(sorted(report.models.items())),
        "source": report.source,
        "reported_at": int(report.reported_at),
        "expires_at": math.ceil(report.expires_at),
    }


def _check_reporter(reporter: str) -> None:
    if not REPORTER_ID.match(reporter):
        raise BadRequest(
            "A reporter id is 1 to 128 letters, digits and . _ : - (the reporting process's name).",
            param="reporter_id",
        )


def _models(models: Any) -> dict[str, int]:
    if not isinstance(models, dict):
        raise BadRequest("models must be an object of model ids to requests in flight.", param="models")
    if len(models) > MAX_REPORT_MODELS:
        raise BadRequest(f"A report names at most {MAX_REPORT_MODELS} models.", param="models")
    counted: dict[str, int] = {}
    for model, n in models.items():
        if not model or len(model) > MAX_MODEL_ID_CHARS or not model.isprintable():
            raise BadRequest(
                f"A model id is 1 to {MAX_MODEL_ID_CHARS} printable characters.", param=f"models.{model[:64]}"
            )
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_IN_FLIGHT:
            raise BadRequest(
                f"Requests in flight on {model[:64]} must be a whole number from 0 to {MAX_IN_FLIGHT}.",
                param=f"models.{model[:64]}",
            )
        if n:
            counted[model] = n
    return counted
