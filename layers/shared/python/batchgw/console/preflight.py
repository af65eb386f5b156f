"""``POST /v1/batches/preflight``: check a batch input file as the console would submit it,
running and billing nothing (``validation.strict`` has the rules).

The body names an uploaded file of the caller (``input_file_id``, purpose ``batch``) and
the create page's choices: ``endpoint`` (when no line says), ``model`` (one for every
request), and Chat's ``temperature`` and ``max_tokens``. The answer says whether the file
is ``valid``, lists its ``problems`` (line, custom_id, field, code, message; never content),
and for a valid file the batch it makes: the ``endpoint`` and what said it, the canonical
``model``, ``requests``, the first stored requests, the window, how it is billed and how long
its results are kept. ``check`` digests the file, the key, the type, the model and the
choices: a submission that carries it is refused once any of them changed.

``?format=csv`` or ``?format=jsonl`` answers the problems alone, as a file to download.
Checking costs nothing: no quota, budget or rate of batches is spent.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from batchgw.api.capacity import estimate
from batchgw.api.files import batch_input_file
from batchgw.api.params import Params, last
from batchgw.deps import Deps
from batchgw.domain.errors import BadRequest
from batchgw.domain.files import file_key
from batchgw.domain.principal import Principal
from batchgw.storage.spend import Payer, room_after_holds
from batchgw.validation import is_int, is_number
from batchgw.validation.costs import CostBounds
from batchgw.validation.create import validate_create
from batchgw.validation.file import split_lines
from batchgw.validation.strict import FIRST_SHOWN, Choices, Limits, Report, check

FORMATS = ("json", "csv", "jsonl")
BODY_KEYS = frozenset({"input_file_id", "endpoint", "model", "temperature", "max_tokens"})
PROBLEM_COLUMNS = ("line", "custom_id", "field", "code", "message")


def preflight(
    deps: Deps, principal: Principal, body: Any, params: Params, *, anthropic_version: str | None = None
) -> tuple[str, Any]:
    """The check of the file the body names, or of the direct ``requests`` it holds (as a
    create would take them, with the ``anthropic-version`` header of a Messages batch):
    ``("json", answer)``, or the problems as ``("csv" | "jsonl", text)`` when ``?format=``
    asks for a download."""
    fmt = last(params, "format") or "json"
    if fmt not in FORMATS:
        raise BadRequest(f"'format' must be one of {', '.join(FORMATS)}.", param="format")
    if not isinstance(body, dict):
        raise BadRequest("The body must be a JSON object.")
    if "requests" in body:
        answer = _inline(deps, principal, body, anthropic_version)
        if fmt == "csv":
            return fmt, problems_csv(answer["problems"])
        if fmt == "jsonl":
            return fmt, "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in answer["problems"])
        return fmt, answer
    unknown = sorted(body.keys() - BODY_KEYS)
    if unknown:
        raise BadRequest(
            f"Unknown field '{unknown[0]}'; a preflight takes {', '.join(sorted(BODY_KEYS))}.",
            param=unknown[0],
        )
    done = checked(deps, principal, body)
    if fmt == "csv":
        return fmt, problems_csv(done.report.problems)
    if fmt == "jsonl":
        return fmt, "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in done.report.problems)
    return fmt, _answer(deps, principal, done)


@dataclass(frozen=True)
class Checked:
    """A file checked with the create page's choices: the report, the way to read its lines
    again (for the stored requests), and the digest a submission must match (None: invalid)."""

    file_id: str
    choices: Choices
    report: Report
    limits: Limits
    lines: Callable[[], Iterable[bytes]]
    digest: str | None


def checked(deps: Deps, principal: Principal, body: dict[str, Any]) -> Checked:
    """Check the file ``body`` names (``input_file_id``) with its choices."""
    choices = _choices(body)
    file = batch_input_file(deps, principal, body.get("input_file_id"))
    file_id = file.id
    settings = deps.settings
    limits = Limits(
        max_requests=settings.batch_max_requests,
        max_line_bytes=settings.batch_max_line_kb * 1024,
        max_stored_bytes=settings.max_file_bytes,
    )

    def lines() -> Iterable[bytes]:
        return split_lines(deps.blobs.iter_chunks(file_key(file_id)), max_line_bytes=limits.max_line_bytes)

    report = check(lines, choices, catalog=deps.catalog, role=principal.role, limits=limits)
    digest = (
        check_digest(
            file_sha256=file.sha256,
            key_id=principal.key_id,
            endpoint=report.endpoint,
            model=report.model,
            choices=choices,
        )
        if report.valid
        else None
    )
    return Checked(file_id, choices, report, limits, lines, digest)


def _choices(body: dict[str, Any]) -> Choices:
    endpoint, model = body.get("endpoint"), body.get("model")
    temperature, max_tokens = body.get("temperature"), body.get("max_tokens")
    if endpoint is not None and not isinstance(endpoint, str):
        raise BadRequest("'endpoint' must be a string.", param="endpoint")
    if model is not None and (not isinstance(model, str) or not model):
        raise BadRequest("'model' must be a model's name.", param="model")
    if temperature is not None and (not is_number(temperature) or isinstance(temperature, bool)):
        raise BadRequest("'temperature' must be a number.", param="temperature")
    if max_tokens is not None and not is_int(max_tokens):
        raise BadRequest("'max_tokens' must be an integer.", param="max_tokens")
    try:
        degrees = None if temperature is None else float(temperature)
    except OverflowError:  # an integer past any float: out of range, as the check says
        degrees = math.inf
    return Choices(endpoint, model, degrees, max_tokens)


def check_digest(
    *, file_sha256: str | None, key_id: str, endpoint: str | None, model: str | None, choices: Choices
) -> str:
    """What a submission must match: the file's bytes, the key, the type, the canonical model
    and the choices, as they were checked."""
    material = json.dumps(
        [file_sha256, key_id, endpoint, model, choices.model, choices.temperature, choices.max_tokens],
        separators=(",", ":"),
    )
    return hashlib.sha256(material.encode()).hexdigest()[:32]


def _answer(deps: Deps, principal: Principal, done: Checked) -> dict[str, Any]:
    settings = deps.settings
    report = done.report
    spec = deps.catalog.models.get(report.model) if report.model else None
    price = None if spec is None or spec.price is None else spec.price
    window = settings.completion_window_seconds
    return {
        "object": "batch.preflight",
        "input_file_id": done.file_id,
        "valid": report.valid,
        "endpoint": report.endpoint,
        "endpoint_from": report.endpoint_from,
        "model": report.model,
        "models_named": report.models_named,
        "requests": report.requests if report.valid else None,
        "problems": report.problems,
        "problems_truncated": report.truncated,
        "problems_unlisted": report.unlisted,  # found past the listed ones (validation.strict)
        "first_requests": report.first,
        "stored_bytes": report.stored_bytes if report.valid else None,
        "completion_window": None if window is None else f"{settings.batch_completion_window_hours:g}h",
        "billing": None
        if price is None
        else {
            "model": report.model,
            "input_per_mtok_usd": str(price.input_per_mtok),
            "output_per_mtok_usd": str(price.output_per_mtok),
            "how": "each request is billed once it runs, at the model's price, as an interactive "
            "request; nothing is billed for checking",
        },
        "results_retention_days": settings.batch_retention_days,
        "key_id": principal.key_id,
        "check": done.digest,
        "cost": _cost(deps, principal, report.costs if report.valid else None),
        # When the batch would end, created now (``api.capacity``; null: no estimate).
        "estimated_completion_at": estimate(deps, principal, {report.model: report.requests})
        if report.valid and report.model
        else None,
    }


def _inline(
    deps: Deps, principal: Principal, body: dict[str, Any], anthropic_version: str | None
) -> dict[str, Any]:
    """The check of direct requests: the create's own (its first problem, if any), and what
    they may cost."""
    settings = deps.settings
    try:
        plan = validate_create(
            body,
            settings=settings,
            catalog=deps.catalog,
            role=principal.role,
            anthropic_version=anthropic_version,
        )
    except BadRequest as exc:
        problem = {
            "line": None,
            "custom_id": None,
            "field": exc.param,
            "code": exc.code,
            "message": exc.message,
        }
        plan, problems = None, [problem]
    else:
        problems = []
    models = sorted({r.model for r in plan.requests}) if plan is not None else []
    costs = None
    if plan is not None:
        costs = CostBounds(deps.catalog, plan.endpoint).add_all((r.model, r.body) for r in plan.requests)
    window = settings.completion_window_seconds
    return {
        "object": "batch.preflight",
        "input_file_id": None,
        "valid": plan is not None,
        "endpoint": None if plan is None else plan.endpoint,
        "endpoint_from": None if plan is None else "url",
        "model": models[0] if len(models) == 1 else None,
        "models_named": sorted({r.body.get("model") for r in plan.requests}) if plan is not None else [],
        "requests": None if plan is None else len(plan.requests),
        "problems": problems,
        "problems_truncated": False,
        "problems_unlisted": 0,
        "first_requests": []
        if plan is None
        else [
            {"custom_id": r.custom_id, "method": r.method, "url": r.url, "body": r.body}
            for r in plan.requests[:FIRST_SHOWN]
        ],
        "stored_bytes": None,
        "completion_window": None if window is None else f"{settings.batch_completion_window_hours:g}h",
        "billing": None,
        "results_retention_days": settings.batch_retention_days,
        "key_id": principal.key_id,
        "check": None,
        "cost": _cost(deps, principal, costs),
        "estimated_completion_at": None
        if plan is None
        else estimate(deps, principal, Counter(r.model for r in plan.requests)),
    }


def _cost(deps: Deps, principal: Principal, costs: CostBounds | None) -> dict[str, Any] | None:
    """What the checked requests may cost, and whether the caller's quotas and budgets
    leave room for it beside what their running requests and accepted provider batches may
    still cost, as a create would count it (None: the check found problems)."""
    if costs is None:
        return None
    stores = (deps.accounts, deps.spend, deps.user_slots, deps.batches)
    payer = Payer(principal.user_id, principal.key_id)
    return costs.shown(room_after_holds(*stores, payer, deps.clock()).room)


def problems_csv(problems: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=PROBLEM_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for problem in problems:
        writer.writerow({k: "" if problem[k] is None else problem[k] for k in PROBLEM_COLUMNS})
    return out.getvalue()
