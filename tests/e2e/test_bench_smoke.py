"""Every benchmark's entry point still runs (``bench.smoke``, ``make bench-smoke``): each at a
tiny size, as ``make`` starts it, exits 0. The figures are not looked at: speed is the
benchmarks' business, never a test's."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.smoke import SMOKE, SMOKE_TIMEOUT_SECONDS, smoke

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(SMOKE_TIMEOUT_SECONDS + 60)
@pytest.mark.parametrize("name", list(SMOKE))
def test_the_benchmark_runs_to_the_end_at_a_tiny_size(name: str, tmp_path: Path) -> None:
    ran = smoke(name, tmp_path)
    assert ran.code == 0, ran.output
