"""What ``test_bench_smoke*.py`` share: every benchmark's entry point at its tiny size
(``bench.smoke``). The slow ones run from a file each, ``test_bench_smoke_<name>.py``, so
``--dist loadfile`` can give them to both test processes; ``test_bench_smoke.py`` runs the rest
and checks that every benchmark runs from exactly one file."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.smoke import SMOKE, SMOKE_TIMEOUT_SECONDS, smoke

# The entry points that take a minute or more on a loaded 2-core machine.
OWN_FILE = ("run", "cost", "yield_run", "promise", "restart")
OWN_FILE_PREFIX = "test_bench_smoke_"
REST = [name for name in SMOKE if name not in OWN_FILE]
smoke_timeout = pytest.mark.timeout(SMOKE_TIMEOUT_SECONDS + 60)


def own_name(test_file: str) -> str:
    """The benchmark a ``test_bench_smoke_<name>.py`` runs: the one its name says."""
    return Path(test_file).stem.removeprefix(OWN_FILE_PREFIX)


def assert_runs(name: str, folder: Path) -> None:
    ran = smoke(name, folder)
    assert ran.code == 0, ran.output
