"""The short form of the seeded chaos run (``make chaos`` runs it long): see ``chaos.py``."""

from __future__ import annotations

import pytest

from tests.e2e.chaos import STARTUP_SECONDS, Chaos, chaos_stack
from tests.e2e.chaos_report import ChaosConfig

# Its latency goals hold on a machine it has to itself: ``make test`` runs it after the rest.
pytestmark = [pytest.mark.e2e, pytest.mark.serial]
BUDGET_SECONDS = 240.0  # the run's, the drain included: it reports before pytest would stop it


@pytest.mark.timeout(BUDGET_SECONDS + STARTUP_SECONDS + 60)
@pytest.mark.parametrize("seed", [11])
def test_every_batch_ends_fast_with_one_outcome_per_request_whatever_fails(
    tmp_path_factory: pytest.TempPathFactory, seed: int
) -> None:
    config = ChaosConfig(
        seed=seed,
        batches=6,
        requests=25,
        kills=4,
        duplicates=6,
        cancels=2,
        window_seconds=40,
        task_crash_rate=0.03,
        throttle_rate=0.05,
        reporters=2,
        provider_batches=2,
        responses=8,
        timeout=BUDGET_SECONDS,
    )
    with chaos_stack(tmp_path_factory.mktemp("chaos-logs"), config) as stack:
        report = Chaos(stack, config).run()
        replaced = len(stack.replaced)
    print("\n".join(report.lines()))
    assert report.violations == []
    assert report.kills == replaced == config.kills  # every crashed worker was replaced
    assert report.task_deaths > 0  # workflow tasks died at AWS calls and were retried
    assert report.throttled > 0  # DynamoDB refused calls for throughput, and they were tried again
    assert report.reporters == 2 and report.reports > 0  # interactive load came and its reporters died
    assert report.statuses["cancelled"] >= 1 and report.lost_attempts >= 0
    assert report.cancel_latency or report.cancel_latency_killed  # measured (the goals are violations)
    assert len(report.final_latency) == config.batches
    assert report.provider_batches == 2
    assert sum(report.response_statuses.values()) == config.responses  # each ended once, checked
    assert report.response_cancels == 2
