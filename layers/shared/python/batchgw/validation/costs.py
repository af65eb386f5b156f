"""What a batch's requests may cost, before it runs: per model, the requests, their input
tokens (estimated from their size, as a running request reserves them), the most output
they may ask for, and the cost between none of that output and all of it.

The bounds are the ones the owner's quota and budget are held to while the batch runs
(``domain.spend.reservation_tokens``): a request's input is estimated generously from its
JSON, its output is what it asks for at most (``max_tokens`` and its kin), else its
model's limit, else a default. A model with no price in the catalog costs nothing here
(``priced`` says so).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from batchgw.config.catalog import Catalog
from batchgw.domain import money
from batchgw.domain.spend import reservation_tokens


@dataclass
class ModelCost:
    model: str
    priced: bool
    requests: int = 0
    input_tokens: int = 0
    output_tokens_most: int = 0
    min_nano: int = 0
    max_nano: int = 0

    def shown(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "requests": self.requests,
            "input_tokens": self.input_tokens,
            "output_tokens_most": self.output_tokens_most,
            "priced": self.priced,
            "min_usd": money.usd_float(self.min_nano),
            "max_usd": money.usd_float(self.max_nano),
        }


class CostBounds:
    """The bounds of the requests ``add``-ed, per model."""

    def __init__(self, catalog: Catalog, endpoint: str) -> None:
        self._catalog = catalog
        self._endpoint = endpoint
        self.models: dict[str, ModelCost] = {}

    def add(self, model: str, body: Any) -> None:
        spec = self._catalog.models.get(model)
        price = None if spec is None else spec.price
        found = self.models.get(model)
        if found is None:
            found = self.models[model] = ModelCost(model, priced=price is not None)
        input_tokens, output_most = reservation_tokens(
            body, self._endpoint, model_max_output=None if spec is None else spec.max_output_tokens
        )
        found.requests += 1
        found.input_tokens += input_tokens
        found.output_tokens_most += output_most
        if price is not None:
            found.min_nano += price.cost_nano(input_tokens, 0)
            found.max_nano += price.cost_nano(input_tokens, output_most)

    def add_all(self, requests: Iterable[tuple[str, Any]]) -> CostBounds:
        for model, body in requests:
            self.add(model, body)
        return self

    @property
    def min_nano(self) -> int:
        return sum(m.min_nano for m in self.models.values())

    @property
    def max_nano(self) -> int:
        return sum(m.max_nano for m in self.models.values())

    def shown(self, room_nano: int | None) -> dict[str, Any]:
        """The bounds, and whether they fit ``room_nano``, what the caller's quotas and
        budgets leave (None: nothing limits them): ``yes`` (even the most), ``maybe`` (the
        least, not the most: the batch may pause for its owner's spend) or ``no`` (not even
        the least: it will)."""
        return {
            "models": [m.shown() for _, m in sorted(self.models.items())],
            "min_usd": money.usd_float(self.min_nano),
            "max_usd": money.usd_float(self.max_nano),
            "spend_left_usd": None if room_nano is None else money.usd_float(room_nano),
            "fits": _fits(self.min_nano, self.max_nano, room_nano),
        }


def _fits(least: int, most: int, room: int | None) -> str:
    if room is None or most <= room:
        return "yes"
    return "maybe" if least <= room else "no"
