"""Spend (``storage.spend``, moto): one item per charge, the key's, in its user's partition;
the user's spend adds up all of their keys' (a deleted key's too), a key's only its own."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from batchgw.storage import aws
from batchgw.storage.dynamo import Table
from batchgw.storage.spend import Payer

from local.simulator import Simulator
from tests.integration.conftest import make_deps
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

DEC_31 = datetime(2026, 12, 31, 12, tzinfo=UTC).timestamp()
JAN_1 = datetime(2027, 1, 1, 12, tzinfo=UTC).timestamp()


def test_a_users_spend_adds_up_every_key_and_a_keys_only_its_own(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock())
    table = Table(aws.get_clients().dynamodb, deps.settings.control_table)

    def charge(payer: Payer, nano: int, now: float, shard: int) -> None:
        table.transact(deps.spend.charge_actions(payer, nano, now=now, shard=shard), failure="charge")

    charge(Payer("u1", "k1"), 100, DEC_31, 0)
    charge(Payer("u1", "k1"), 20, DEC_31, 5)  # another shard of the same key
    charge(Payer("u1", "k2"), 3, DEC_31, 0)  # another key, later deleted: still the user's
    charge(Payer("u1", None), 4, DEC_31 - 86400, 1)  # no key, the day before
    charge(Payer("u2", "k9"), 5000, DEC_31, 0)  # another user
    charge(Payer("u1", "k1"), 7, JAN_1, 0)  # next month

    user, key = deps.spend.read(Payer("u1", "k1"), DEC_31)
    assert (user.today, user.month) == (123, 127)
    assert (key.today, key.month) == (120, 120)
    user, key = deps.spend.read(Payer("u1", None), DEC_31)
    assert (key.today, key.month) == (0, 4)
    user, key = deps.spend.read(Payer("u1", "k1"), JAN_1)
    assert (user.today, user.month, key.today, key.month) == (7, 7, 7, 7)


def test_a_charge_writes_one_item(sim: Simulator) -> None:
    deps = make_deps(sim, FakeClock())
    (action,) = deps.spend.charge_actions(Payer("u1", "k1"), 100, now=DEC_31, shard=3)
    assert action["Update"]["Key"] == {"pk": {"S": "spend#user#u1"}, "sk": {"S": "2026-12#k1#3"}}
    assert deps.spend.charge_actions(Payer("u1", "k1"), 0, now=DEC_31, shard=3) == []
