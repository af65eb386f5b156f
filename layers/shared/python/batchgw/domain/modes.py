"""Where a batch runs: on the gateway's own chains (``gateway``, the primary spec's way) or
on its provider's batch service at the batch price (``provider``), as its creator asked
(``execution_mode``, or another gateway's ``omg_mode``) and its models allow.

``auto`` runs on the provider when every model of the batch has a route whose provider's
batch service runs its endpoint at a batch price (``eligible``), the window is 24 hours
(the providers' own), and that price is the cheaper; on the gateway otherwise. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Mode(StrEnum):
    GATEWAY = "gateway"
    PROVIDER = "provider"
    AUTO = "auto"


MODES = tuple(mode.value for mode in Mode)
PROVIDER_WINDOW = "24h"  # the one window the providers' batch services keep


class ModeReason(StrEnum):
    """Why a batch runs where it runs (the batch object's ``execution_mode_reason``)."""

    REQUESTED = "requested"  # its creator asked for it
    PROVIDER_CHEAPER = "provider_batch_price_cheaper"  # auto: the provider's batch price is lower
    NO_BATCH_ROUTE = "no_provider_batch_route"  # auto: a model has no route with a batch service and price
    WINDOW = "window_not_24h"  # auto: only a 24h window runs on a provider
    NOT_CHEAPER = "provider_batch_price_not_cheaper"  # auto: the batch price is no lower
    SUBMIT_FAILED = "provider_submit_failed"  # auto: the provider refused it, so it runs here
    # auto: an administrator forbade its provider batch route before all of it was submitted
    ROUTE_FORBIDDEN = "provider_batch_route_forbidden"
    PROVIDER_LOST = "provider_batch_lost"  # auto: the provider lost a batch of it, so the rest runs here


@dataclass(frozen=True, slots=True)
class ModeChoice:
    mode: Mode  # gateway or provider
    reason: ModeReason


def choose_mode(requested: Mode, *, eligible: bool, window: str, cheaper: bool) -> ModeChoice | None:
    """Where a batch runs; None when its creator asked for ``provider`` and it may not
    (``batch_not_supported``). ``eligible``: every model has a provider batch route;
    ``cheaper``: its batch price is below the price of running it here."""
    if requested is Mode.GATEWAY:
        return ModeChoice(Mode.GATEWAY, ModeReason.REQUESTED)
    if requested is Mode.PROVIDER:
        return (
            ModeChoice(Mode.PROVIDER, ModeReason.REQUESTED)
            if eligible and window == PROVIDER_WINDOW
            else None
        )
    if not eligible:
        return ModeChoice(Mode.GATEWAY, ModeReason.NO_BATCH_ROUTE)
    if window != PROVIDER_WINDOW:
        return ModeChoice(Mode.GATEWAY, ModeReason.WINDOW)
    if not cheaper:
        return ModeChoice(Mode.GATEWAY, ModeReason.NOT_CHEAPER)
    return ModeChoice(Mode.PROVIDER, ModeReason.PROVIDER_CHEAPER)
