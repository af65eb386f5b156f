"""Every metric the code counts or measures has a unit (``observability.UNITS``), and one that
had none would be left out of a flush, not fail the work that counted it."""

from __future__ import annotations

import re
from pathlib import Path

from batchgw import observability
from batchgw.observability import UNITS, MetricsBuffer

SOURCE = Path(observability.__file__).resolve().parent
_NAMED = re.compile(r"metrics\.(?:count|value)\(\s*\"([A-Za-z]+)\"")


def test_every_metric_named_in_the_code_has_a_unit() -> None:
    named = {m for path in SOURCE.rglob("*.py") for m in _NAMED.findall(path.read_text())}
    assert named  # the pattern finds the code's metrics
    assert named - set(UNITS) == set()


def test_a_metric_without_a_unit_is_left_out_and_the_others_are_written() -> None:
    lines: list[str] = []
    buffer = MetricsBuffer(emit=lines.append)
    buffer.count("NoSuchMetric", model="m")
    buffer.count("RequestsStarted", model="m")
    [document] = buffer.flush()
    assert document["RequestsStarted"] == [1.0] and "NoSuchMetric" not in document
