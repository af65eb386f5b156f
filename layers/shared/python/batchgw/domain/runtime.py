"""What administrators changed at runtime: setting overrides, model caps and the routes
batch work may use. Stored in the control table, read by every process (``batchgw.live_config``).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Overrides:
    settings: dict[str, str] = field(default_factory=dict)  # setting name: value as text
    caps: dict[str, int] = field(default_factory=dict)  # model id: its batch cap
    routes: dict[tuple[str, str], bool] = field(default_factory=dict)  # (model, route): allowed
    # Counts the changes administrators made to accounts (a key revoked or changed, a user
    # suspended, demoted or deleted): a process that sees it move forgets what it cached of
    # keys and owners, so a change reaches every process within a refresh of these overrides.
    accounts_version: int = 0
