"""Settings: defaults, and the limits the platform sets."""

from __future__ import annotations

import pytest
from batchgw.config.settings import Settings


def test_the_request_body_limit_defaults_to_what_api_gateway_and_lambda_take() -> None:
    assert Settings.model_validate({}).batch_max_body_mb == 4


def test_a_request_body_limit_the_platform_cannot_carry_is_refused_with_where_to_go_instead() -> None:
    with pytest.raises(RuntimeError, match="Uploads API or a presigned upload"):
        Settings.from_env({"BATCH_MAX_BODY_MB": "32"})
    assert Settings.from_env({"BATCH_MAX_BODY_MB": "4.5"}).batch_max_body_mb == 4.5
