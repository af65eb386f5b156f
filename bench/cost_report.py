"""What ``bench.cost`` prints and derives from the priced usage: the breakdown by service and
component, the same usage on provisioned tables, and the modes side by side."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from batchgw.config import resources

from bench import cost_model as m
from bench import prices
from bench.sched_rates import SCHEDULING_KINDS
from infra.capacity import SCALE_IN_BELOW_POINTS, TableCapacity

GOAL_USD = 5.0


def print_breakdown(breakdown: m.CostBreakdown, figures: Mapping[str, Any]) -> None:
    print(f"\n=== cost of one million requests on AWS ({prices.PRICES_NOTE}) ===")
    workload = figures.get("workload", {})
    if workload:
        print(
            "workload: {request_body_bytes} B request bodies, {response_bytes} B answers, "
            "{upstream_latency_ms} ms upstream, batches of {batch_size}, model cap {model_cap}".format(
                **workload
            )
        )
    total = breakdown.total
    print("\nby service (USD per million requests):")
    for service, usd in breakdown.by_service().items():
        print(f"  {service:<18} {usd:9.4f}  {usd / total:6.1%}")
    print("\nby component:")
    print(f"  {'service':<16} {'component':<58} {'units/M':>14} {'USD/M':>9}")
    for line in sorted(breakdown.lines, key=lambda line: -line.usd_per_million):
        if line.usd_per_million < 0.0005:
            continue
        units, dollars = f"{line.units_per_million:14,.1f}", f"{line.usd_per_million:9.4f}"
        print(f"  {line.service:<16} {line.component[:58]:<58} {units} {dollars}")
    verdict = "PASS" if total <= GOAL_USD else "FAIL"
    print(f"\ntotal: ${total:.3f} per million requests (goal <= ${GOAL_USD:g}: {verdict})")
    top = breakdown.dominant(3)
    print(
        "dominated by: "
        + "; ".join(f"{line.service} {line.component} ${line.usd_per_million:.3f}" for line in top)
    )
    lambda_figures = figures.get("lambda", {})
    if lambda_figures:
        print("  lambda, as measured in the run window (its status polls included):")
    for function, f in lambda_figures.items():
        print(
            f"  lambda {function}: {f['invocations_per_request']:.3f} invocations/request, "
            f"mean {f['mean_seconds'] * 1000:.0f} ms at {f['memory_mb']} MB, "
            f"{f['gb_seconds_per_request']:.4f} GB-s/request"
        )
    peak = figures.get("peak_rss_mb_by_role", {})
    if peak:
        print(
            "  peak resident memory of the local processes: "
            + ", ".join(f"{role} {mb:.0f} MB" for role, mb in sorted(peak.items()))
        )
    items = figures.get("dynamodb_items", {})
    if items:
        print("  dynamodb items (billed size: the larger of before and after), the most frequent:")
        for component, f in list(items.items())[:14]:
            print(
                f"    {component[:60]:<60} {f['per_request']:6.3f}/request  mean {f['mean_bytes']:5} B"
                f"  p90 {f['p90_bytes']:5} B  max {f['max_bytes']:5} B"
            )
    if "step_functions_transitions_per_batch" in figures:
        print(f"  step functions: {figures['step_functions_transitions_per_batch']} transitions per batch")


def scheduling_cost(usage: Sequence[m.UsageLine]) -> float:
    """USD per million requests of the DynamoDB reads and writes in scheduling's partitions
    (``bench.sched_rates.SCHEDULING_KINDS``: the components ``read|write <table> <kind> ...``)."""
    lines = [
        line
        for line in usage
        if line.service == "DynamoDB" and line.component.split(" ")[2:3] in ([k] for k in SCHEDULING_KINDS)
    ]
    return m.price(lines).total


def units_per_request(usage: Sequence[m.UsageLine], price: str) -> float:
    return sum(line.quantity for line in usage if line.price == price)


def provisioned_cost(usage: Sequence[m.UsageLine], capacity: TableCapacity | None = None) -> dict[str, Any]:
    """The same usage with the tables on provisioned capacity (``-c tableCapacity=provisioned``,
    its defaults unless ``capacity`` says otherwise): at the target utilization, and at the
    lowest utilization auto scaling lets stand (where it starts to lower the capacity)."""
    capacity = capacity or TableCapacity(mode="provisioned")
    target = capacity.target_utilization / 100
    scale_in = (capacity.target_utilization - SCALE_IN_BELOW_POINTS) / 100
    at_target, at_scale_in = (m.price(usage, m.provisioned_prices(u)) for u in (target, scale_in))
    on_demand_unit = prices.DYNAMODB_WRITE_UNIT.each
    scaled = sum(1 + len(spec.indexes) for spec in resources.TABLES)
    return {
        "target_utilization": target,
        "usd_per_million_at_target": at_target.total,
        "dynamodb_usd_per_million_at_target": at_target.by_service().get("DynamoDB", 0.0),
        "scale_in_utilization": scale_in,
        "usd_per_million_at_scale_in": at_scale_in.total,
        # where a provisioned unit used costs what an on-demand one does
        "break_even_utilization": prices.DYNAMODB_WRITE_CAPACITY_HOUR.each
        / (m.SECONDS_PER_HOUR * on_demand_unit),
        "write_units_per_request": units_per_request(usage, "dynamodb_wru"),
        "read_units_per_request": units_per_request(usage, "dynamodb_rru"),
        "tables_and_indexes": scaled,
        "monthly_floor_usd": m.provisioned_monthly_floor(
            (capacity.read_units[0], capacity.write_units[0]), scaled
        ),
    }


def print_provisioned(figures: Mapping[str, Any]) -> None:
    f = figures
    print(
        f"\nprovisioned tables (-c tableCapacity=provisioned, target {f['target_utilization']:.0%}):"
        f" ${f['usd_per_million_at_target']:.3f} per million requests at the target (DynamoDB"
        f" ${f['dynamodb_usd_per_million_at_target']:.3f}; goal <= ${GOAL_USD:g}:"
        f" {'PASS' if f['usd_per_million_at_target'] <= GOAL_USD else 'FAIL'}),"
        f" ${f['usd_per_million_at_scale_in']:.3f} at {f['scale_in_utilization']:.0%} (where auto scaling"
        " starts to lower the capacity)"
    )
    print(
        f"  cheaper than on demand above {f['break_even_utilization']:.0%} utilization; plus"
        f" ${f['monthly_floor_usd']:.2f} a month whatever the load ({f['tables_and_indexes']} tables and"
        " indexes at their minimum capacity, and the alarms target tracking makes)"
    )
    print(
        f"  sizing: {f['write_units_per_request']:.2f} write and {f['read_units_per_request']:.2f} read units"
        f" per request: R requests a second need R x {f['write_units_per_request']:.2f} /"
        f" {f['target_utilization']:.2f} write capacity units"
    )


def print_modes(by_mode: Mapping[str, Mapping[str, Any]]) -> None:
    print("\nper million requests, by where the batch ran (model cost at the price paid):")
    print(
        f"  {'mode':<16}{'AWS':>10}{'model':>12}{'total':>12}{'batch s':>9}"
        f"{'worker GB-s/req':>17}{'WRU/req':>9}{'RRU/req':>9}{'scheduling':>12}"
    )
    for mode, f in by_mode.items():
        print(
            f"  {mode:<16}{f['aws_per_million_usd']:>10.2f}{f['model_per_million_usd']:>12.2f}"
            f"{f['total_per_million_usd']:>12.2f}{f['batch_seconds']:>9.1f}"
            f"{f['worker_gb_seconds_per_request']:>17.4f}{f['dynamodb_write_units_per_request']:>9.2f}"
            f"{f['dynamodb_read_units_per_request']:>9.2f}{f.get('scheduling_per_million_usd', 0.0):>12.3f}"
        )
    print(
        "  (scheduling: the DynamoDB reads and writes of the interactive load, the adaptive limits,"
        " the slot maps and the live configuration, in USD per million requests)"
    )
