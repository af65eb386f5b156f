"""Runtime settings from a command line: ``python -m batchgw.config show|set|reset``.

It changes the same stored overrides as ``/admin/config``, with the same validation, in
the control table named by ``BATCHGW_CONTROL_TABLE`` — or, with ``--stack NAME``, in the
deployed stack's (its ``ControlTableName`` output, read with your AWS credentials). Every
gateway process sees a change within ``BATCHGW_RUNTIME_REFRESH_SECONDS``. Against the
local stack, use ``make config ARGS="set BATCH_ENABLED false"``.

An entry point, like the handlers in ``functions/``: it may import ``batchgw.live_config``.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import time
from collections.abc import Sequence

import boto3

from batchgw.config.settings import Settings
from batchgw.domain.errors import ApiError
from batchgw.live_config import LiveConfig
from batchgw.storage.aws import get_clients
from batchgw.storage.runtime import RuntimeStore

CONTROL_TABLE_OUTPUT = "ControlTableName"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m batchgw.config", description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", help="the deployed stack whose control table to use")
    commands = parser.add_subparsers(dest="command", required=True)
    show = commands.add_parser("show", help="every runtime setting, or one")
    show.add_argument("name", nargs="?")
    set_ = commands.add_parser("set", help="override a setting")
    set_.add_argument("name")
    set_.add_argument("value")
    reset = commands.add_parser("reset", help="drop a setting's override: it takes its default again")
    reset.add_argument("name")
    return parser


def _stack_table(stack: str) -> str:
    described = boto3.client("cloudformation").describe_stacks(StackName=stack)["Stacks"][0]
    for output in described.get("Outputs", []):
        if output["OutputKey"] == CONTROL_TABLE_OUTPUT:
            return str(output["OutputValue"])
    raise SystemExit(f"stack {stack} has no {CONTROL_TABLE_OUTPUT} output")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    settings = Settings.from_env()
    table = _stack_table(args.stack) if args.stack else settings.control_table
    live = LiveConfig(settings, RuntimeStore(get_clients().dynamodb, table))
    live.refresh(force=True)
    by = f"cli:{getpass.getuser()}"
    try:
        if args.command == "show":
            shown = live.describe_one(args.name) if args.name else live.describe()
        elif args.command == "set":
            shown = live.set_setting(args.name, args.value, by=by, now=time.time())
        else:
            shown = live.reset_setting(args.name, by=by)
    except ApiError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    print(json.dumps(shown, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
