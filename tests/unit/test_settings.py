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


@pytest.mark.parametrize(
    "name", ["BATCH_WORKER_TIMEOUT_SECONDS", "BATCH_LEASE_SECONDS", "BATCH_PREPARE_LEASE_SECONDS"]
)
def test_a_life_or_lease_longer_than_lambdas_longest_timeout_is_refused(name: str) -> None:
    """The workflow's waits for running work are sized on these bounds."""
    with pytest.raises(RuntimeError, match=name):
        Settings.from_env({name: "901"})
    assert Settings.from_env({name: "900"}).model_dump(by_alias=True)[name] == 900
