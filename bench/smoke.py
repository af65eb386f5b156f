"""``make bench-smoke`` (``python -m bench.smoke``): every benchmark's entry point at a tiny size.

Each runs as ``make`` runs it (``python -m bench.<name>``, a process of its own) with arguments
that make it a minute's work or less, writing its figures into a temporary folder (never
``bench/last.json``): the figures mean nothing, the run proves that the entry point still
starts its stacks, drives them and checks what it reads, and exits 0. ``make test`` runs each
(``tests/e2e/test_bench_smoke*.py``), so a benchmark that stopped running fails CI, not the next
change that quotes it.

``python -m bench.smoke [name ...]`` runs the named ones (all by default) and prints each one's
time and exit code; a failed one's output is printed in full.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from local.env import REPO_ROOT

# The arguments of each entry point's tiny run; "{out}" is a JSON file in a temporary folder.
SMOKE: dict[str, tuple[str, ...]] = {
    "run": (
        *("--n", "24", "--retry-n", "12", "--retry-base-seconds", "0.5", "--import-runs", "1"),
        *("--out", "{out}"),
        *("--skip-validation", "--skip-cost", "--skip-moto-cpu", "--skip-scale"),
    ),
    "yield_run": (
        *("--cycles", "1", "--burst-seconds", "4", "--quiet-seconds", "4", "--burst-rps", "4"),
        *("--quiet-rps", "1", "--batch", "60", "--capacity", "4", "--latency-ms", "200", "--out", "{out}"),
        *("--scheduling-calls", "--warm-up-seconds", "2", "--refresh-seconds", "1"),
    ),
    "cost": (
        *("--n", "20", "--burst-seconds", "2", "--latency-ms", "500", "--settle-seconds", "0.5"),
        *("--out", "{out}"),
    ),
    "validation": ("--lines", "500"),
    "moto_cpu": ("--rounds", "1", "--per-round", "20"),
    "checkpoint": ("--items", "200", "--rounds", "1"),
    "imports": ("--runs", "1"),
    "restart": ("--batches", "6", "--settle-seconds", "60"),
    "worker_memory": ("--smoke",),
    "sched_sim": ("--quick", "--out", "{out}"),
    "promise": (
        "--sizes",
        "20",
        "--capacity",
        "4",
        "--burst-seconds",
        "4",
        "--steady-seconds",
        "4",
        "--environments",
        "4",
        "--out",
        "{out}",
    ),
}
# The most one tiny run may take on a loaded 2-core machine before it counts as hung.
SMOKE_TIMEOUT_SECONDS = 420


@dataclass(frozen=True)
class Smoked:
    name: str
    code: int
    seconds: float
    output: str


def smoke(name: str, folder: Path) -> Smoked:
    """Run benchmark ``name`` at its tiny size, its figures written under ``folder``."""
    args = [arg.replace("{out}", str(folder / f"{name}.json")) for arg in SMOKE[name]]
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", f"bench.{name}", *args],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=SMOKE_TIMEOUT_SECONDS,
        )
        code, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        code, output = -1, f"timed out after {SMOKE_TIMEOUT_SECONDS} s\n{exc.stdout or ''}{exc.stderr or ''}"
    return Smoked(name, code, time.monotonic() - started, output)


def main(argv: list[str] | None = None) -> int:
    names = (sys.argv[1:] if argv is None else argv) or list(SMOKE)
    unknown = [name for name in names if name not in SMOKE]
    if unknown:
        print(f"unknown benchmark(s) {unknown}; known: {', '.join(SMOKE)}")
        return 2
    failed = []
    with tempfile.TemporaryDirectory(prefix="bench-smoke-") as folder:
        for name in names:
            ran = smoke(name, Path(folder))
            print(f"bench.{name:<14} exit {ran.code:>3}  {ran.seconds:6.1f} s", flush=True)
            if ran.code != 0:
                failed.append(name)
                print(ran.output)
    print("every benchmark ran" if not failed else f"FAILED: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
