"""One batch through the gateway's public API, timed from create to the last result page read."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.workload import Workload

API_KEY = "sk-local-alice"
FINAL_STATUSES = ("completed", "failed", "expired", "cancelled")
RESULTS_PAGE_LIMIT = 1000


@dataclass
class GatewayRun:
    """Times are seconds after ``t0`` (just before the create POST was sent)."""

    batch_id: str
    t0: float  # time.monotonic()
    create_seconds: float  # the create call's own latency
    in_progress_seconds: float | None
    first_result_seconds: float | None
    final_seconds: float  # the status poll that first saw a final status
    total_seconds: float  # after the last result page was read
    status: str
    request_counts: dict[str, int]
    status_polls: int
    result_pages: int
    results: int
    problems: list[str] = field(default_factory=list)

    @property
    def results_read_seconds(self) -> float:
        return self.total_seconds - self.final_seconds


def api_client(api_url: str, timeout: float = 60.0) -> httpx.Client:
    return httpx.Client(base_url=api_url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=timeout)


class Stalled(RuntimeError):
    """The batch made no progress for too long (a lost chain, a workflow never woken...)."""


def run_batch(
    api: httpx.Client, workload: Workload, *, poll_interval: float = 0.05, stall_seconds: float = 120.0
) -> GatewayRun:
    """Create the batch, poll it until final, read every result page and check every result.

    Raises Stalled when neither its status nor its counts change for ``stall_seconds``.
    """
    payload = json.dumps({"requests": workload.batch_lines()}, separators=(",", ":")).encode()
    headers = {"content-type": "application/json"}
    t0 = time.monotonic()
    created = api.post("/batches", content=payload, headers=headers)
    create_seconds = time.monotonic() - t0
    if created.status_code != 200:
        raise RuntimeError(f"create answered {created.status_code}: {created.text[:500]}")
    batch_id = str(created.json()["id"])

    in_progress = first_result = None
    polls = 0
    progress: tuple[Any, ...] = ()
    progressed_at = 0.0
    next_poll = time.monotonic()
    poll_errors: list[str] = []
    while True:
        polls += 1
        try:
            batch = api.get(f"/batches/{batch_id}").raise_for_status().json()
        except httpx.HTTPError as exc:  # counted as a problem; the stall check still applies
            poll_errors.append(f"status poll failed: {exc}")
            batch = None
        now = time.monotonic() - t0
        if batch is None:
            if now - progressed_at > stall_seconds:
                raise Stalled(
                    f"{batch_id}: status polls failing for {stall_seconds:.0f} s: {poll_errors[-1]}"
                )
            next_poll += poll_interval
            time.sleep(max(0.0, next_poll - time.monotonic()))
            continue
        if in_progress is None and batch["status"] != "validating":
            in_progress = now
        if first_result is None and int(batch["request_counts"]["completed"]) >= 1:
            first_result = now
        if batch["status"] in FINAL_STATUSES:
            final = now
            break
        state = (batch["status"], *sorted(batch["request_counts"].items()))
        if state != progress:
            progress, progressed_at = state, now
        elif now - progressed_at > stall_seconds:
            raise Stalled(
                f"{batch_id} made no progress for {stall_seconds:.0f} s (at {now:.0f} s after create): "
                f"status {batch['status']}, request_counts {batch['request_counts']}"
            )
        next_poll += poll_interval
        time.sleep(max(0.0, next_poll - time.monotonic()))

    results: list[dict[str, Any]] = []
    pages = 0
    after: str | None = None
    while True:
        params: dict[str, str | int] = {"limit": RESULTS_PAGE_LIMIT}
        if after:
            params["after"] = after
        page = api.get(f"/batches/{batch_id}/results", params=params).raise_for_status().json()
        pages += 1
        results.extend(page["data"])
        if not page["has_more"]:
            break
        after = page["last_id"]
    total = time.monotonic() - t0

    counts = {k: int(v) for k, v in batch["request_counts"].items()}
    run = GatewayRun(
        batch_id=batch_id,
        t0=t0,
        create_seconds=create_seconds,
        in_progress_seconds=in_progress,
        first_result_seconds=first_result,
        final_seconds=final,
        total_seconds=total,
        status=str(batch["status"]),
        request_counts=counts,
        status_polls=polls,
        result_pages=pages,
        results=len(results),
    )
    run.problems = check_results(workload, batch, results)
    if poll_errors:
        run.problems.append(f"{len(poll_errors)} status polls failed, e.g. {poll_errors[0]}")
    return run


def check_results(workload: Workload, batch: dict[str, Any], results: list[dict[str, Any]]) -> list[str]:
    """Every request has exactly one result, completed, with the simulator's echo; [] when so."""
    problems: list[str] = []
    n = workload.n
    if batch["status"] != "completed":
        problems.append(f"batch status {batch['status']!r}, not 'completed'")
    counts = {k: int(v) for k, v in batch["request_counts"].items()}
    # every request completed: any other count the answer carries (failed, expired, cancelled) is 0
    expected_counts = {**dict.fromkeys(counts, 0), "total": n, "completed": n, "failed": 0}
    if counts != expected_counts:
        problems.append(f"request_counts {counts}, expected {expected_counts}")

    seen: dict[str, int] = {}
    for result in results:
        seen[str(result.get("custom_id"))] = seen.get(str(result.get("custom_id")), 0) + 1
    expected_ids = [workload.custom_id(i) for i in range(n)]
    missing = [cid for cid in expected_ids if cid not in seen]
    duplicated = [cid for cid, times in seen.items() if times > 1]
    unknown = sorted(set(seen) - set(expected_ids))
    result_ids = [str(r.get("id")) for r in results]
    if missing:
        problems.append(f"{len(missing)} results lost, e.g. {missing[:5]}")
    if duplicated:
        problems.append(f"{len(duplicated)} results duplicated, e.g. {duplicated[:5]}")
    if unknown:
        problems.append(f"{len(unknown)} results for unknown custom_ids, e.g. {unknown[:5]}")
    if len(set(result_ids)) != len(result_ids):
        problems.append("result ids are not unique")
    if not (missing or duplicated or unknown) and [r["custom_id"] for r in results] != expected_ids:
        problems.append("results are not in request order")

    wrong = []
    index = {cid: i for i, cid in enumerate(expected_ids)}
    for result in results:
        i = index.get(str(result.get("custom_id")))
        if i is None:
            continue
        try:
            ok = (
                result["status"] == "completed"
                and result["error"] is None
                and result["response"]["status_code"] == 200
                and result["response"]["body"]["choices"][0]["message"]["content"]
                == workload.expected_content(i)
            )
        except (KeyError, IndexError, TypeError):
            ok = False
        if not ok:
            wrong.append(workload.custom_id(i))
    if wrong:
        problems.append(f"{len(wrong)} results not completed with the expected echo, e.g. {wrong[:5]}")
    return problems
