from __future__ import annotations

import pytest

from tests.infra.bundled import Bundled, bundle


@pytest.fixture(scope="session")
def bundled(tmp_path_factory: pytest.TempPathFactory) -> Bundled:
    """The app bundled once for the session, through the CDK CLI (``tests/infra/bundled.py``)."""
    return bundle(tmp_path_factory.mktemp("bundled") / "cdk.out")
