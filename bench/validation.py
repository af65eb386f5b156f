"""Validating a 50,000-line input file, against one ``json.loads`` per line (issue 4).

Both run in this process, one after the other, on the same lines, in one run: the ratio
is what matters on a shared, noisy machine. Peak memory is traced (tracemalloc, in a
second, untimed pass) while the validator streams the file from disk in chunks, as the
workflow streams it from S3, and is reported against the file's size.

    python -m bench.validation [--lines 50000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from batchgw.config.catalog import load_catalog
from batchgw.config.settings import Settings
from batchgw.validation.file import split_lines, validate_file

from tests.support import REPO_ROOT

CHUNK = 256 * 1024


def write_file(path: Path, lines: int) -> None:
    with path.open("w") as out:
        for i in range(lines):
            body = {
                "model": "sim-chat",
                "max_tokens": 64,
                "messages": [
                    {"role": "system", "content": "You are terse."},
                    {"role": "user", "content": f"Summarize item {i} of the benchmark corpus."},
                ],
            }
            out.write(
                json.dumps(
                    {"custom_id": f"req-{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}
                )
                + "\n"
            )


def chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as stream:
        while block := stream.read(CHUNK):
            yield block


def measure(lines: int) -> dict[str, Any]:
    settings = Settings.model_validate({})
    catalog = load_catalog(REPO_ROOT / "config" / "models.local.json")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "input.jsonl"
        write_file(path, lines)
        size = path.stat().st_size
        max_line = settings.batch_max_line_kb * 1024

        started = time.perf_counter()
        for line in split_lines(chunks(path), max_line_bytes=max_line):
            json.loads(line)
        baseline = time.perf_counter() - started

        def validate() -> Any:
            return validate_file(
                split_lines(chunks(path), max_line_bytes=max_line),
                endpoint="/v1/chat/completions",
                settings=settings,
                catalog=catalog,
                role="internal",
            )

        started = time.perf_counter()
        report = validate()
        elapsed = time.perf_counter() - started

        # Peak memory in a second pass, untimed: tracing every allocation slows the run
        # several times over, so a traced run's time says little about the validator's.
        tracemalloc.start()
        traced = validate()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert report.ok and report.total == lines, report.errors[:3]
    assert traced.total == report.total
    return {
        "validation_lines": lines,
        "validation_file_bytes": size,
        "validation_seconds": elapsed,
        "json_loads_seconds": baseline,
        "validation_ratio": elapsed / baseline,
        "validation_peak_bytes": peak,
        "validation_peak_over_file": peak / size,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lines", type=int, default=50_000)
    figures = measure(parser.parse_args().lines)
    print(f"validation: {figures['validation_lines']} lines, {figures['validation_file_bytes'] / 1e6:.1f} MB")
    print(
        f"  validator {figures['validation_seconds']:.2f} s, json.loads per line "
        f"{figures['json_loads_seconds']:.2f} s, ratio {figures['validation_ratio']:.2f}"
    )
    print(
        f"  peak traced memory {figures['validation_peak_bytes'] / 1e6:.1f} MB "
        f"({figures['validation_peak_over_file']:.1%} of the file)"
    )


if __name__ == "__main__":
    main()
