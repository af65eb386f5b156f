"""The stack's building blocks, one construct per concern; ``infra/stack.py`` composes them."""

from __future__ import annotations

from pathlib import Path

# Asset paths and ``batchgw.config.resources.WORKFLOW_ASL`` are relative to the repository root,
# wherever the app or the tests are started from.
REPO_ROOT = Path(__file__).resolve().parents[2]
