"""Money in integer nano-dollars (billionths of a dollar), so counters add up exactly.

DynamoDB's ADD on numbers in exponent form misbehaves on moto, and binary floats do not
add up; every cost is an int of nano-dollars until it is shown.
"""

from __future__ import annotations

from decimal import Decimal

NANO_PER_USD = 1_000_000_000


def usd(nano: int) -> Decimal:
    """Nano-dollars as an exact dollar amount."""
    return Decimal(nano) / NANO_PER_USD


def usd_float(nano: int) -> float:
    """Nano-dollars as the float the API shows (rounded to ten places)."""
    return round(float(usd(nano)), 10)


def cost_nano(
    input_per_mtok: Decimal, output_per_mtok: Decimal, input_tokens: int, output_tokens: int
) -> int:
    """What ``input_tokens`` and ``output_tokens`` cost at per-million-token prices."""
    dollars = (input_per_mtok * input_tokens + output_per_mtok * output_tokens) / 1_000_000
    return int((dollars * NANO_PER_USD).to_integral_value())
