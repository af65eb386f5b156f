"""``GET /user/batch-capabilities``: what the console shows of Batch for the caller.

- ``status``: ``enabled``; ``disabled`` (``BATCH_ENABLED`` off: no link, and the page says
  Batch is not available); ``unavailable`` while the batch store is not ready (its table
  does not exist yet).
- ``min_role`` (``BATCH_MIN_ROLE``) and ``role_may_submit``: the caller's role alone reaches
  it (quotas and keys play no part).
- ``has_history``: the caller has batches or a webhook of their own; null when that could
  not be checked (a read failed), and the link then stays: the rest still answers.
- ``show_entry``: the side navigation links to the Batches page: enabled, and the role may
  submit or the caller has (or may have) batches or a webhook to manage.

Answered with BATCH_ENABLED off too: that is what the console asks to know it.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from batchgw.deps import Deps
from batchgw.domain.errors import StorageError, StoreNotReady
from batchgw.domain.principal import Principal
from batchgw.observability import logger


def capabilities(deps: Deps, principal: Principal) -> dict[str, Any]:
    settings = deps.settings
    min_role = settings.batch_min_role
    may_submit = principal.at_least(min_role)
    has_history: bool | None = None
    status = "disabled"
    if settings.batch_enabled:
        status = "enabled"
        try:
            batches, _ = deps.batches.list_for_owner(principal.user_id, limit=1)
            has_history = bool(batches) or deps.webhooks.get(principal.user_id) is not None
        except StoreNotReady:
            logger.warning("batch store not ready for the capabilities", exc_info=True)
            status = "unavailable"
        except (StorageError, ClientError, BotoCoreError):
            logger.warning("batch history could not be checked; the link stays", exc_info=True)
    return {
        "object": "user.batch_capabilities",
        "status": status,
        "min_role": min_role,
        "role_may_submit": may_submit,
        "has_history": has_history,
        "show_entry": status == "enabled" and (may_submit or has_history is not False),
    }
