"""The first administrator of a new stack (``make admin-key``, ``python -m batchgw.first_admin``),
run as the README says against the local stack's AWS endpoint (its moto, ``AWS_ENDPOINT_URL``),
with the control table found from a CloudFormation stack's ``ControlTableName`` output as a
deploy leaves it; then the key it prints opens the admin API of the running gateway.

A stack of its own: its seeded accounts are removed first, so its control table holds no user,
as a freshly deployed stack's does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from batchgw.storage.accounts import account_items
from batchgw.storage.dynamo import to_item

from local.keys import local_accounts
from local.run import LocalStack
from tests.e2e.conftest import STACK_ENV, root, stack_for
from tests.support import REPO_ROOT

STACK_NAME = "BatchGwFirstAdmin"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with stack_for(tmp_path_factory, "first-admin", STACK_ENV) as running:
        yield running


def _aws_env(stack: LocalStack) -> dict[str, str]:
    names = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_REGION")
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "BATCHGW_CONTROL_TABLE"},
        **{name: stack.env[name] for name in names if name in stack.env},
        "AWS_ENDPOINT_URL": stack.moto_url,
    }


def _client(stack: LocalStack, service: str) -> Any:
    env = _aws_env(stack)
    return boto3.client(
        service,  # type: ignore[call-overload]
        endpoint_url=stack.moto_url,
        region_name=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
        aws_access_key_id=env.get("AWS_ACCESS_KEY_ID", "testing"),
        aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY", "testing"),
    )


@pytest.fixture(scope="module")
def fresh(stack: LocalStack) -> str:
    """The stack as a deploy leaves it: no users in its control table, and a CloudFormation
    stack whose outputs name that table. Returns the table's name."""
    table = stack.env["BATCHGW_CONTROL_TABLE"]
    dynamodb = _client(stack, "dynamodb")
    for user, key in local_accounts():
        for item in account_items(user, [key]):
            dynamodb.delete_item(TableName=table, Key=to_item({"pk": item["pk"], "sk": item["sk"]}))
    template = {
        "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
        "Outputs": {"ControlTableName": {"Value": table}},
    }
    _client(stack, "cloudformation").create_stack(StackName=STACK_NAME, TemplateBody=json.dumps(template))
    return table


def documented_command(name: str, email: str) -> list[str]:
    """What ``make admin-key STACK=... NAME=... EMAIL=...`` runs (its last line, ``make -n``),
    with this interpreter."""
    shown = (
        subprocess.run(
            ["make", "-n", "-s", "admin-key", f"STACK={STACK_NAME}", f"NAME={name}", f"EMAIL={email}"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    expected = (
        f'.venv/bin/python -m batchgw.first_admin --stack "{STACK_NAME}" --name "{name}" --email "{email}"'
    )
    assert shown.strip() == expected
    return [
        sys.executable,
        "-m",
        "batchgw.first_admin",
        "--stack",
        STACK_NAME,
        "--name",
        name,
        "--email",
        email,
    ]


def run(stack: LocalStack, command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=REPO_ROOT, env=_aws_env(stack), capture_output=True, text=True, timeout=120, check=False
    )


def test_the_documented_command_makes_the_first_admin_whose_key_opens_the_admin_api(
    stack: LocalStack, fresh: str
) -> None:
    nobody = root(stack, "sk-local-admin").get("/admin/users")
    assert nobody.status_code == 401  # the seeded admin is gone: no key opens the admin API

    made = run(stack, documented_command("Ada Lovelace", "ada@example.com"))
    assert made.returncode == 0, made.stderr
    (key,) = made.stdout.split()  # the key alone on stdout
    assert key.startswith("sk-") and fresh in made.stderr

    admin = root(stack, key)
    users = admin.get("/admin/users")
    assert users.status_code == 200, users.text
    (ada,) = users.json()["data"]
    assert (ada["name"], ada["email"], ada["role"]) == ("Ada Lovelace", "ada@example.com", "admin")
    # and it makes the next users and their keys
    bob = admin.post("/admin/users", json={"name": "Bob", "email": "bob@example.com", "role": "internal"})
    assert bob.status_code == 200, bob.text
    bobs_key = admin.post(f"/admin/users/{bob.json()['id']}/keys", json={})
    assert bobs_key.status_code == 200, bobs_key.text

    again = run(stack, documented_command("Ada Again", "ada2@example.com"))
    assert again.returncode == 3 and again.stdout == ""
    assert "refused" in again.stderr and ada["id"] in again.stderr
    admins = [u for u in admin.get("/admin/users").json()["data"] if u["role"] == "admin"]
    assert [u["id"] for u in admins] == [ada["id"]]  # no second administrator

    another = run(stack, [*documented_command("Grace", "grace@example.com"), "--another"])
    assert another.returncode == 0, another.stderr
    assert root(stack, another.stdout.strip()).get("/admin/users").status_code == 200


def test_an_unknown_stack_or_a_missing_email_makes_nothing(stack: LocalStack, fresh: str) -> None:
    missing = run(
        stack,
        [
            sys.executable,
            "-m",
            "batchgw.first_admin",
            "--stack",
            "NoSuchStack",
            "--name",
            "X",
            "--email",
            "x@example.com",
        ],
    )
    assert missing.returncode != 0 and "NoSuchStack" in missing.stderr and missing.stdout == ""
    bad = run(
        stack,
        [
            sys.executable,
            "-m",
            "batchgw.first_admin",
            "--control-table",
            fresh,
            "--name",
            "X",
            "--email",
            "nope",
        ],
    )
    assert bad.returncode == 2 and bad.stdout == ""
