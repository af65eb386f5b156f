"""The first administrator of a deployed stack, and their API key.

    python -m batchgw.first_admin --stack BatchGw --name "Ada Lovelace" --email ada@example.com

(``make admin-key NAME=... EMAIL=...``). A new stack has no users, and every user and key is
made through the admin API, which only an administrator's key opens: this writes the first
administrator and their key with the deployer's AWS credentials, through the account store the
admin API writes with (the user and the key in one transaction), into the stack's control
table: its ``ControlTableName`` output (``--stack``, read from CloudFormation), or
``--control-table``, or ``BATCHGW_CONTROL_TABLE``. The key goes to stdout, once: only its
SHA-256 is kept. What was made goes to stderr.

Refused (exit 3) while an active administrator exists, so a second run makes no duplicate;
``--another`` makes one more anyway (the only admin key lost). A new administrator is usable
at once: keys are read by hash, and the API caches only keys it has found.

An entry point, like the handlers in ``functions/`` and ``python -m batchgw.config``: it
takes the ids and the key's shape from the admin API (``batchgw.api.accounts``).
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
from collections.abc import Sequence

import boto3

from batchgw.api.accounts import KEY_PREFIX, SECRET_PREFIX, USER_PREFIX, VISIBLE_PREFIX_CHARS
from batchgw.api.ids import new_id
from batchgw.domain.accounts import KeyRecord, UserRecord
from batchgw.domain.errors import StorageError
from batchgw.domain.principal import hash_key
from batchgw.storage.accounts import AccountStore
from batchgw.storage.aws import get_clients

CONTROL_TABLE_OUTPUT = "ControlTableName"  # infra/stack.py
CONTROL_TABLE_ENV = "BATCHGW_CONTROL_TABLE"
ADMIN = "admin"
KEY_NAME = "first admin"
REFUSED = 3


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m batchgw.first_admin",
        description="Create the first administrator of a deployed stack and print their API key once.",
    )
    parser.add_argument("--name", required=True, help="the administrator's name")
    parser.add_argument("--email", required=True, help="the administrator's email")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--stack", help="the deployed stack (its ControlTableName output)")
    where.add_argument("--control-table", help="the control table's name itself")
    parser.add_argument(
        "--another", action="store_true", help="make one even though an active administrator exists"
    )
    return parser


def stack_control_table(stack: str) -> str:
    """The control table named by ``stack``'s outputs (CloudFormation, your credentials)."""
    described = boto3.client("cloudformation").describe_stacks(StackName=stack)["Stacks"][0]
    for output in described.get("Outputs", []):
        if output["OutputKey"] == CONTROL_TABLE_OUTPUT:
            return str(output["OutputValue"])
    raise SystemExit(f"stack {stack} has no {CONTROL_TABLE_OUTPUT} output")


def active_admins(store: AccountStore) -> list[UserRecord]:
    return [user for user in store.users() if user.role == ADMIN and user.active]


def create_admin(store: AccountStore, name: str, email: str, now: float) -> tuple[UserRecord, KeyRecord, str]:
    """A new administrator and their key, stored at once; the key's secret (kept nowhere)."""
    user = UserRecord(id=new_id(USER_PREFIX, now), name=name, email=email, role=ADMIN, created_at=int(now))
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)  # as the admin API makes one
    key = KeyRecord(
        id=new_id(KEY_PREFIX, now),
        user_id=user.id,
        key_hash=hash_key(secret),
        prefix=secret[:VISIBLE_PREFIX_CHARS],
        name=KEY_NAME,
        created_at=int(now),
    )
    store.create(user, [key])
    return user, key, secret


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    name, email = args.name.strip(), args.email.strip()
    if not name or "@" not in email.strip("@"):
        print("error: give the administrator's name and email (NAME=... EMAIL=...)", file=sys.stderr)
        return 2
    if args.stack:
        table = stack_control_table(args.stack)
    else:
        table = str(args.control_table or os.environ.get(CONTROL_TABLE_ENV) or "")
        if not table:
            print(
                f"error: name the stack (--stack) or the table (--control-table, {CONTROL_TABLE_ENV})",
                file=sys.stderr,
            )
            return 2
    store = AccountStore(get_clients().dynamodb, table)
    existing = active_admins(store)
    if existing and not args.another:
        listed = ", ".join(f"{user.id} ({user.name} <{user.email}>)" for user in existing)
        print(
            f"refused: {table} has an active administrator already: {listed}. Make users and keys "
            "with their key (POST /admin/users, /admin/users/{id}/keys); --another makes one more.",
            file=sys.stderr,
        )
        return REFUSED
    try:
        user, key, secret = create_admin(store, name, email, time.time())
    except StorageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(
        f"created the administrator {user.id} ({user.name} <{user.email}>) and their key {key.id} in "
        f"{table}. The key, shown this once (use it as the API key: Authorization: Bearer ...):",
        file=sys.stderr,
    )
    print(secret)
    return 0


if __name__ == "__main__":
    sys.exit(main())
