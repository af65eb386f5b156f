"""Runtime overrides of the settings: which settings an administrator may change while the
gateway runs (``/admin/config``, read by every process through ``batchgw.live_config``),
how a value is checked and stored, and the rules of the deployment no override may break.

May import: ``domain``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from batchgw.config.settings import (
    WEBHOOK_FUNCTION_SECONDS,
    WEBHOOK_SPARE_SECONDS,
    WORKER_SPARE_SECONDS,
    Settings,
)

# Settings an administrator may change at runtime (``/admin/config``): every setting with a
# description. The resources and the worker's shape are fixed when the stack is deployed.
RUNTIME_SETTINGS: dict[str, str] = {
    field.alias: field_name
    for field_name, field in Settings.model_fields.items()
    if field.alias and field.description
}

# Names that once were settings. A value stored or set for one changes nothing; the stored
# row is kept (a rollback to a release that reads it finds it) until an administrator
# deletes it, and its presence is warned about once when a process starts.
RETIRED_SETTINGS: dict[str, str] = {
    "BATCH_EXPANSION_ENABLED": "controls nothing since file batches and every target became standard",
    "BATCH_USER_MAX_CONCURRENCY": "replaced by BATCH_ROLE_CONCURRENCY_<ROLE>",
}


class InvalidSetting(ValueError):
    """A value a setting does not accept, with the reason in words."""


def text_of(value: Any) -> str:
    """A setting's value as the environment would spell it (how overrides are stored)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    raise InvalidSetting("must be a string, a number or a boolean")


def with_overrides(base: Settings, overrides: Mapping[str, str]) -> tuple[Settings, dict[str, str]]:
    """``base`` with each override of a runtime setting applied, and the overrides refused
    (name: why). One that is invalid on its own, or not a runtime setting, is left out."""
    values = base.model_dump(by_alias=True)
    applied: dict[str, str] = {}
    refused: dict[str, str] = {}
    for name, text in overrides.items():
        if name not in RUNTIME_SETTINGS:
            refused[name] = "not a runtime setting"
            continue
        try:
            candidate = Settings.model_validate({**values, **applied, name: text})
        except ValidationError as exc:
            refused[name] = "; ".join(str(error["msg"]) for error in exc.errors())
            continue
        broken = [rule for rule in deployed_rules(candidate) if rule not in deployed_rules(base)]
        if broken:
            refused[name] = broken[0]
            continue
        applied[name] = text
    if not applied:
        return base, refused
    return Settings.model_validate({**values, **applied}), refused


def deployed_rules(settings: Settings) -> list[str]:
    """The rules ``settings`` break that hold the deployment together, in words: what the
    stack asserts when it is built (``infra``), checked again for every runtime override (an
    override may not break one; a deployment's own values are the stack's to check)."""
    broken = []
    spare = settings.batch_worker_timeout_seconds - settings.batch_upstream_timeout_seconds
    if spare < WORKER_SPARE_SECONDS:
        upstream, worker = settings.batch_upstream_timeout_seconds, settings.batch_worker_timeout_seconds
        broken.append(
            f"BATCH_UPSTREAM_TIMEOUT_SECONDS ({upstream:g}) must stay at least {WORKER_SPARE_SECONDS} s "
            f"below the worker's timeout ({worker:g} s): no request could start"
        )
    most = WEBHOOK_FUNCTION_SECONDS - WEBHOOK_SPARE_SECONDS
    if settings.batch_webhook_timeout_seconds > most:
        broken.append(
            f"BATCH_WEBHOOK_TIMEOUT_SECONDS must be at most {most} s: the webhook function lives "
            f"{WEBHOOK_FUNCTION_SECONDS} s and records each attempt after it"
        )
    return broken


def check_override(base: Settings, name: str, value: Any) -> str:
    """The stored text of ``value`` for runtime setting ``name``; InvalidSetting when the
    setting refuses it."""
    text = text_of(value)
    refused = with_overrides(base, {name: text})[1]
    if name in refused:
        raise InvalidSetting(refused[name])
    return text
