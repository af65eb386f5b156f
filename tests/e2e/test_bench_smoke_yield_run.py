"""``bench.yield_run``'s entry point at its tiny size, in a file of its own (``tests/e2e/bench_smoke.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.bench_smoke import assert_runs, own_name, smoke_timeout

pytestmark = pytest.mark.e2e


@smoke_timeout
def test_the_benchmark_runs_to_the_end_at_a_tiny_size(tmp_path: Path) -> None:
    assert_runs(own_name(__file__), tmp_path)
