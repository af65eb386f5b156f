"""``batchgw smoke`` against the session's local stack, as an operator runs it: ``python -m
batchgw_cli smoke`` in a subprocess, the official OpenAI SDK inside it, nothing mocked. It
passes with every step printed and leaves nothing of its own, touching nothing of anyone
else's; and when the model answers errors it fails naming the step, the HTTP status and the
gateway's message, and leaves nothing running."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from local.run import LocalStack
from tests.e2e.conftest import FINAL, Api, chat

pytestmark = pytest.mark.e2e
# This checkout's command, whichever checkout the venv installed as batchgw_cli.
CLI = Path(__file__).resolve().parents[2] / "cli"
STEPS = (
    "models",
    "summary before",
    "inline create",
    "file create",
    "cancel",
    "inline results",
    "file results",
    "cancel ends",
    "summary after",
    "cleanup",
)
BATCH_ID = re.compile(r"batch_[0-9a-f]{32}")


def smoke(stack: LocalStack, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHGW_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CLI), os.environ.get("PYTHONPATH")) if p)
    command = [sys.executable, "-m", "batchgw_cli", "smoke", "--base-url", stack.api_url]
    return subprocess.run(
        [*command, "--api-key", "sk-local-alice", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def test_the_smoke_passes_on_a_healthy_stack_printing_every_step_and_deletes_only_its_own(
    stack: LocalStack, alice: Api
) -> None:
    """Every step passes and prints one line with its duration; the batches it made are gone
    after it, and a batch of the same user it did not make is untouched."""
    theirs = alice.create([chat("mine", "not the smoke's")]).raise_for_status().json()["id"]

    done = smoke(stack, "--admin-key", "sk-local-admin", "--timeout", "60")

    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("batchgw smoke smoke-") and lines[-1].startswith("smoke passed in ")
    printed = [m.group(1) for line in lines[1:-1] if (m := re.match(r"ok\s+(.+?)\s+\d+\.\d\ds  ", line))]
    assert printed == list(STEPS), done.stdout
    assert "3 of 3 succeeded" in done.stdout and "+3 batches" in done.stdout
    made = set(BATCH_ID.findall(done.stdout))
    assert len(made) == 3
    for batch_id in made:
        assert alice.http.get(f"/batches/{batch_id}").status_code == 404
    assert alice.wait_final(theirs)["request_counts"]["completed"] == 1  # still there, and ran


@pytest.mark.parametrize(
    ("directive", "timeout", "why"),
    [
        pytest.param(
            "[[sim status=400]]",
            "60",
            r"batch batch_\w+ completed but requests failed: 3 of 3; first: inline-0: "
            r"HTTP 400 invalid_request: simulated error 400",
            id="400-fails-at-once",
        ),
        pytest.param(
            "[[sim status=500]]",
            "4",
            r"batch batch_\w+ still in_progress after 4 s; its requests' last errors: "
            r"inline-0: HTTP 500 upstream_error: simulated error 500",
            id="500-retried-until-the-deadline",
        ),
    ],
)
def test_the_smoke_fails_at_the_first_failing_step_with_the_status_and_the_gateways_message(
    stack: LocalStack, alice: Api, directive: str, timeout: str, why: str
) -> None:
    """A model that answers errors fails the smoke at "inline results", exit 1, one line
    naming the status and the gateway's message, no traceback. A 400 fails a request at once
    (spec 000: any other 4xx), so the batch completes with its requests failed; a 500 is
    retried until the batch's window closes (24h), so the smoke's own deadline (--timeout)
    ends it, naming the requests' last errors, and it cancels its batches still running."""
    done = smoke(stack, "--prompt", f"{directive} smoke", "--timeout", timeout)

    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 1 and re.match(r"FAIL\s+inline results\s+\d+\.\d\ds  ", failed[0]), done.stdout
    assert re.search(why, failed[0]), failed[0]
    assert "smoke failed at step 'inline results'; left for you to look at: batch_" in done.stdout
    for batch_id in set(BATCH_ID.findall(done.stdout)):  # none left running for a day
        assert alice.wait_final(batch_id, timeout=30)["status"] in FINAL
