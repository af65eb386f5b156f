"""Every benchmark's entry point still runs (``bench.smoke``, ``make bench-smoke``): each at a
tiny size, as ``make`` starts it, exits 0. The figures are not looked at: speed is the
benchmarks' business, never a test's. The slow ones run from files of their own
(``tests/e2e/bench_smoke.py``); this one runs the rest."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.smoke import SMOKE
from tests.e2e.bench_smoke import OWN_FILE, OWN_FILE_PREFIX, REST, assert_runs, own_name, smoke_timeout

pytestmark = pytest.mark.e2e


@smoke_timeout
@pytest.mark.parametrize("name", REST)
def test_the_benchmark_runs_to_the_end_at_a_tiny_size(name: str, tmp_path: Path) -> None:
    assert_runs(name, tmp_path)


def test_every_benchmark_runs_from_exactly_one_file() -> None:
    files = sorted(own_name(str(path)) for path in Path(__file__).parent.glob(f"{OWN_FILE_PREFIX}*.py"))
    assert files == sorted(OWN_FILE)
    assert set(OWN_FILE) <= set(SMOKE)
    assert sorted([*REST, *OWN_FILE]) == sorted(SMOKE)
