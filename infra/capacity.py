"""How the tables pay for throughput: the operator's choice at deploy time (context
``tableCapacity``), read by the storage construct and priced by ``make cost``.

- ``on-demand`` (the default): billed per request unit; nothing to size, nothing throttled
  short of DynamoDB's own limits. The right choice while the load is unknown.
- ``provisioned``: billed per capacity unit-hour, each table and index auto scaled (target
  tracking) to keep ``target_utilization`` % of its capacity in use, between ``write_units``
  and ``read_units`` (minimum, maximum). A batch gateway's write rate is its own to bound (the
  models' caps over their latency, times the writes a request takes), so it suits a steady
  load well: at the default 70 % a unit costs less than half its on-demand price (``make
  cost`` prints both). A load
  beyond the maximum, or rising faster than scaling follows (minutes), is throttled: the SDK
  and the transactions try again, and work that still fails is retried as any other error.

``cdk deploy -c tableCapacity=provisioned`` takes the defaults; a JSON object sets the rest:
``-c 'tableCapacity={"mode": "provisioned", "targetUtilization": 80, "writeUnits": [50, 2000]}'``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final, Literal

Mode = Literal["on-demand", "provisioned"]
CONTEXT_KEY = "tableCapacity"
ON_DEMAND: Final = "on-demand"
PROVISIONED: Final = "provisioned"
# DynamoDB's target tracking accepts targets from 20 to 90 %.
TARGET_RANGE = (20, 90)
DEFAULT_TARGET = 70  # the console's default
DEFAULT_UNITS = (5, 4000)  # per table and per index: minimum, maximum
# DynamoDB auto scaling raises capacity after two minutes above the target, and lowers it only
# after fifteen minutes 20 points or more below it (AWS knowledge center, "DynamoDB auto
# scaling"): a load that eases leaves the utilization anywhere in that band.
SCALE_IN_BELOW_POINTS = 20

_FIELDS = {"mode", "targetUtilization", "writeUnits", "readUnits"}


@dataclass(frozen=True)
class TableCapacity:
    mode: Mode = ON_DEMAND
    target_utilization: int = DEFAULT_TARGET  # percent
    write_units: tuple[int, int] = DEFAULT_UNITS
    read_units: tuple[int, int] = DEFAULT_UNITS

    @property
    def provisioned(self) -> bool:
        return self.mode == PROVISIONED

    @classmethod
    def from_context(cls, value: Any) -> TableCapacity:
        """The context's value: absent, a mode's name, or a JSON object (or its text)."""
        if value is None:
            return cls()
        if isinstance(value, str) and value.lstrip().startswith("{"):
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise ValueError(f"invalid {CONTEXT_KEY}: not JSON ({exc})") from None
        if isinstance(value, str):
            value = {"mode": value}
        if not isinstance(value, dict):
            raise ValueError(f"invalid {CONTEXT_KEY}: expected a mode or an object, got {value!r}")
        unknown = set(value) - _FIELDS
        if unknown:
            raise ValueError(f"invalid {CONTEXT_KEY}: unknown fields {sorted(unknown)}")
        mode = value.get("mode", ON_DEMAND)
        if mode not in (ON_DEMAND, PROVISIONED):
            raise ValueError(
                f"invalid {CONTEXT_KEY}: mode must be {ON_DEMAND!r} or {PROVISIONED!r}, got {mode!r}"
            )
        target = value.get("targetUtilization", DEFAULT_TARGET)
        if (
            not isinstance(target, int)
            or isinstance(target, bool)
            or not TARGET_RANGE[0] <= target <= TARGET_RANGE[1]
        ):
            raise ValueError(
                f"invalid {CONTEXT_KEY}: targetUtilization must be a whole percent from "
                f"{TARGET_RANGE[0]} to {TARGET_RANGE[1]}, got {target!r}"
            )
        return cls(
            mode=mode,
            target_utilization=target,
            write_units=_bounds(value.get("writeUnits", DEFAULT_UNITS), "writeUnits"),
            read_units=_bounds(value.get("readUnits", DEFAULT_UNITS), "readUnits"),
        )


def _bounds(value: Any, name: str) -> tuple[int, int]:
    ok = (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        and 1 <= value[0] <= value[1]
    )
    if not ok:
        raise ValueError(
            f"invalid {CONTEXT_KEY}: {name} must be [minimum, maximum] units, 1 <= minimum <= maximum,"
            f" got {value!r}"
        )
    return int(value[0]), int(value[1])
