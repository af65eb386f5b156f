"""An administrator's read of another user's content (their prompts, and the answers beside
them), whichever route makes it: the Prompts view (``GET /admin/batch/jobs/{id}/requests``),
a file's content (``GET /v1/files/{id}/content``) and a batch's results
(``GET /v1/batches/{id}/results``, ``/output.jsonl``, merged or not). One rule for all:
refused with 403 where the gateway keeps no prompts (DB_STORE_FULL_CONTENT off), and
recorded as ``batch.requests.read`` against the owner before it is answered
(``storage.audit``), one entry per read call."""

from __future__ import annotations

from batchgw.deps import Deps
from batchgw.domain.errors import Forbidden
from batchgw.domain.principal import Principal
from batchgw.storage.audit import AuditEntry

PROMPTS_READ = "batch.requests.read"


def require_kept(deps: Deps) -> None:
    """403 ``prompts_not_stored`` where administrators may not read users' content."""
    if not deps.settings.db_store_full_content:
        raise Forbidden(
            "Prompts are not kept on this gateway (DB_STORE_FULL_CONTENT is off).", code="prompts_not_stored"
        )


def record_read(deps: Deps, principal: Principal, owner: str, *, target: str, detail: str) -> None:
    """Keep the audit entry of ``principal``'s read of ``owner``'s ``target`` (``detail``: what
    of it). Called before the content is answered: a read that is not recorded is not answered
    (the store's error ends the call)."""
    deps.audit.record(
        owner,
        AuditEntry(
            action=PROMPTS_READ,
            actor=principal.user_id,
            key_id=principal.key_id,
            target=target,
            detail=detail,
            at=deps.clock(),
        ),
    )
