"""What administrators changed at runtime: setting overrides, model caps and the routes
batch work may use. Stored in the control table, read by every process (``batchgw.runtime``).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Overrides:
    settings: dict[str, str] = field(default_factory=dict)  # setting name: value as text
    caps: dict[str, int] = field(default_factory=dict)  # model id: its batch cap
    routes: dict[tuple[str, str], bool] = field(default_factory=dict)  # (model, route): allowed
