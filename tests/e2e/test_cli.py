"""The ``batchgw`` console script against a local stack of its own, as a user runs it (a
subprocess; nothing of the API mocked): submit, watch and download a 2,000-line file; the
same submission found again, with its state file or without; a priority and a complete_by
given; an interrupted upload resumed;
each exit code; ``--json`` parsed; a preflight's problems by line and its cost bounds;
retry; the webhook; one-line errors. A terminal capture (a pseudo-terminal read by the pyte
emulator) shows the progress bar as a user sees it; ``fixtures/cli_watch_screen.txt`` keeps
such a screen."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyte
import pytest

from local.run import LocalStack
from tests.e2e.conftest import STACK_ENV, stack_for
from tests.support import GateProxy, Receiver

pytestmark = pytest.mark.e2e
SCRIPT = str(Path(sys.executable).parent / "batchgw")
FIXTURE = Path(__file__).parent / "fixtures" / "cli_watch_screen.txt"
CHAT_URL = "/v1/chat/completions"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    env = {**STACK_ENV, "BATCH_MODEL_CONCURRENCY": "32", "BATCH_WEBHOOK_ALLOW_PRIVATE_TARGETS": "true"}
    with stack_for(tmp_path_factory, "cli", env) as running:
        yield running


@pytest.fixture
def env(stack: LocalStack, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "BATCHGW_BASE_URL": stack.api_url,
        "BATCHGW_API_KEY": "sk-local-alice",
        "BATCHGW_CLI_STATE_DIR": str(tmp_path / "state"),
        "NO_COLOR": "1",
        "COLUMNS": "120",
    }


def cli(env: dict[str, str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCRIPT, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def write_jsonl(path: Path, n: int, text: str = "hello", *, prefix: str = "r") -> Path:
    with path.open("w") as out:
        for i in range(n):
            body = {
                "model": "sim-chat",
                "messages": [{"role": "user", "content": f"{text} {i}"}],
                "max_tokens": 16,
            }
            out.write(
                json.dumps({"custom_id": f"{prefix}{i}", "method": "POST", "url": CHAT_URL, "body": body})
                + "\n"
            )
    return path


def test_submit_watch_and_download_a_2000_line_file(env: dict[str, str], tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "requests.jsonl", 2000)
    made = cli(env, "submit", str(source), "--name", "big", "--window", "24h")
    assert made.returncode == 0, made.stderr
    batch_id = made.stdout.strip()
    assert batch_id.startswith("batch_")

    watched = cli(env, "watch", batch_id)
    assert watched.returncode == 0, watched.stderr  # completed, every request succeeded
    assert f"{batch_id} completed" in watched.stdout and "2,000 succeeded" in watched.stdout

    downloaded = cli(env, "download", batch_id, "-o", str(tmp_path / "out"))
    assert downloaded.returncode == 0, downloaded.stderr
    output = tmp_path / "out" / f"{batch_id}.output.jsonl"
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(lines) == 2000 and {line["custom_id"] for line in lines} == {f"r{i}" for i in range(2000)}
    # Again: the file is there and matches its checksum; nothing is written twice.
    mtime = output.stat().st_mtime_ns
    assert cli(env, "download", batch_id, "-o", str(tmp_path / "out")).returncode == 0
    assert output.stat().st_mtime_ns == mtime

    shown = json.loads(cli(env, "--json", "get", batch_id).stdout)
    assert shown["metadata"]["name"] == "big" and shown["request_counts"]["completed"] == 2000
    listed = json.loads(cli(env, "--json", "list", "--limit", "5").stdout)
    assert batch_id in [b["id"] for b in listed["data"]]


def test_submit_takes_a_priority_and_a_complete_by_and_get_shows_them(
    env: dict[str, str], tmp_path: Path
) -> None:
    source = write_jsonl(tmp_path / "urgent.jsonl", 3, prefix="u")
    made = cli(env, "--json", "submit", str(source), "--priority", "5", "--complete-by", "+2h")
    assert made.returncode == 0, made.stderr
    batch = json.loads(made.stdout)
    assert batch["priority"] == 5 and abs(batch["complete_by"] - (time.time() + 7200)) < 120
    shown = cli(env, "get", batch["id"])
    assert "priority 5 · complete by " in shown.stdout, shown.stdout
    refused = cli(env, "submit", str(source), "--complete-by", "soon")
    assert refused.returncode == 2 and "ISO 8601" in refused.stderr
    too_high = cli(env, "submit", str(source), "--name", "too high", "--priority", "11")
    assert too_high.returncode == 1 and "-10 to 10" in too_high.stderr, too_high.stderr


def test_the_same_submission_finds_the_same_batch_with_or_without_its_state(
    env: dict[str, str], tmp_path: Path
) -> None:
    source = write_jsonl(tmp_path / "same.jsonl", 20, prefix="s")
    first = cli(env, "submit", str(source), "--name", "same")
    assert first.returncode == 0, first.stderr
    again = cli(env, "submit", str(source), "--name", "same")
    assert again.returncode == 0 and again.stdout == first.stdout
    # The state file lost: the file is uploaded again, the create's key finds the batch,
    # and the upload it did not need is deleted.
    lost = {**env, "BATCHGW_CLI_STATE_DIR": str(tmp_path / "other-state")}
    files_before = json.loads(cli(env, "--json", "list").stdout)
    found = cli(lost, "submit", str(source), "--name", "same")
    assert found.returncode == 0, found.stderr
    assert found.stdout == first.stdout
    assert json.loads(cli(env, "--json", "list").stdout)["data"][0]["id"] == files_before["data"][0]["id"]
    # Other options are another submission.
    other = cli(env, "submit", str(source), "--name", "different")
    assert other.returncode == 0 and other.stdout != first.stdout


def _ctrl_c_as_at_a_terminal() -> None:
    """In the child before it runs the CLI: SIGINT neither ignored nor blocked, whatever the
    test process did with it (a child inherits both, and the CLI then never sees Ctrl-C: in
    a two-process suite run it never did)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_an_interrupted_upload_resumes_where_its_parts_stopped(
    stack: LocalStack, env: dict[str, str], tmp_path: Path
) -> None:
    # ~640 KB in ~10 parts, through a proxy that holds the 4th part: the interrupt comes
    # while parts are going up, however fast the machine runs the upload.
    source = write_jsonl(tmp_path / "parts.jsonl", 3000, text="x" * 200, prefix="p")
    total = -(-source.stat().st_size // (64 * 1024))
    gate = GateProxy(stack.api_url.removesuffix("/v1"), "/parts", open_for=3)
    slow = {**env, "BATCHGW_PART_BYTES": str(64 * 1024), "BATCHGW_BASE_URL": f"{gate.url}/v1"}
    states = Path(env["BATCHGW_CLI_STATE_DIR"]) / "submits"
    earlier = set(states.glob("*.json")) if states.exists() else set()  # other tests' submissions
    try:
        running = subprocess.Popen(
            [SCRIPT, "submit", str(source)],
            env=slow,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_ctrl_c_as_at_a_terminal,
        )
        assert gate.held.wait(60), "the upload never reached its 4th part"
        # How the CLI's process takes SIGINT, said if it does not stop.
        masks = [
            line for line in Path(f"/proc/{running.pid}/status").read_text().splitlines() if "Sig" in line
        ]
        running.send_signal(signal.SIGINT)
        try:
            _, stderr = running.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            running.kill()
            raise AssertionError(f"the CLI did not stop on SIGINT: {masks}") from None
        assert running.returncode == 130 and "run the same command again" in stderr
        (saved,) = [path for path in states.glob("*.json") if path not in earlier]
        before = json.loads(saved.read_text())
        assert before["upload_id"] and len(before["parts"]) == 3 and before["batch_id"] is None

        gate.release()  # the same command again, through the same address
        resumed = cli(slow, "submit", str(source))
    finally:
        gate.stop()
    assert resumed.returncode == 0, resumed.stderr
    after = json.loads(saved.read_text())
    assert after["upload_id"] == before["upload_id"] and after["parts"][:3] == before["parts"]
    assert len(after["parts"]) == total
    assert after["batch_id"] == resumed.stdout.strip()
    # Its requests are not this test's business: left running, they would take the model's
    # slots from the next tests' batches.
    assert cli(env, "cancel", after["batch_id"]).returncode == 0


def test_each_end_exits_with_its_own_code(env: dict[str, str], tmp_path: Path) -> None:
    lines = write_jsonl(tmp_path / "mixed.jsonl", 3, prefix="m")
    with lines.open("a") as out:
        body = {"model": "sim-chat", "messages": [{"role": "user", "content": "[[sim status=400]]"}]}
        out.write(json.dumps({"custom_id": "bad", "method": "POST", "url": CHAT_URL, "body": body}) + "\n")
    some_failed = cli(env, "submit", str(lines), "--watch")
    assert some_failed.returncode == 3, some_failed.stdout + some_failed.stderr
    assert "1 failed" in some_failed.stdout

    invalid = tmp_path / "invalid.jsonl"
    invalid.write_text('{"custom_id": "x", "method": "POST", "url": "/v1/chat/completions"}\n')
    assert cli(env, "submit", str(invalid), "--watch").returncode == 4  # the batch failed

    slow = write_jsonl(tmp_path / "slow.jsonl", 50, text="[[sim latency_ms=2000]]", prefix="c")
    batch_id = cli(env, "submit", str(slow)).stdout.strip()
    assert cli(env, "cancel", batch_id).returncode == 0
    assert cli(env, "watch", batch_id).returncode == 6  # cancelled


def test_json_output_and_one_line_errors(env: dict[str, str], tmp_path: Path) -> None:
    missing = cli(env, "get", "batch_nope")
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.strip().startswith("error: HTTP 404") and "Traceback" not in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    keyless = cli({k: v for k, v in env.items() if k != "BATCHGW_API_KEY"}, "list")
    assert keyless.returncode == 1 and "BATCHGW_API_KEY" in keyless.stderr
    wrong = cli({**env, "BATCHGW_API_KEY": "sk-nope"}, "list")
    assert wrong.returncode == 1 and "HTTP 401" in wrong.stderr
    assert cli(env, "submit", str(tmp_path / "absent.jsonl")).returncode == 1
    assert cli(env, "watch").returncode == 2  # a command line typer refuses
    assert "Example: batchgw submit" in cli(env, "--help").stdout


def test_preflight_reports_problems_by_line_and_the_cost_bounds(env: dict[str, str], tmp_path: Path) -> None:
    good = write_jsonl(tmp_path / "good.jsonl", 4, prefix="g")
    checked = cli(env, "--json", "preflight", str(good))
    assert checked.returncode == 0, checked.stderr
    answer = json.loads(checked.stdout)
    (model,) = answer["cost"]["models"]
    assert answer["valid"] and model["requests"] == 4 and model["output_tokens_most"] == 64
    assert 0 < answer["cost"]["min_usd"] < answer["cost"]["max_usd"] and answer["cost"]["fits"] == "yes"
    human = cli(env, "preflight", str(good))
    assert "valid: 4 requests" in human.stdout and "fits: yes" in human.stdout

    bad = tmp_path / "bad.jsonl"
    bad.write_text(good.read_text() + '{"custom_id": "g0", "body": {"model": "sim-chat", "messages": []}}\n')
    refused = cli(env, "--json", "preflight", str(bad))
    assert refused.returncode == 1
    problems = json.loads(refused.stdout)["problems"]
    assert problems and all(p["line"] == 5 for p in problems)
    assert "5" in cli(env, "preflight", str(bad)).stdout


def test_preflight_of_a_messages_or_responses_file_checks_its_requests_as_a_create_would(
    env: dict[str, str], tmp_path: Path
) -> None:
    messages = tmp_path / "messages.jsonl"
    line = {
        "custom_id": "m0",
        "method": "POST",
        "url": "/v1/messages",
        "body": {"model": "sim-claude", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]},
    }
    messages.write_text(json.dumps(line) + "\n")
    checked = cli(env, "--json", "preflight", str(messages))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    cost = json.loads(checked.stdout)["cost"]
    assert [(m["model"], m["output_tokens_most"]) for m in cost["models"]] == [("sim-claude", 50)]
    responses = tmp_path / "responses.jsonl"
    bad = {"custom_id": "r0", "method": "POST", "url": "/v1/responses", "body": {"model": "sim-chat"}}
    responses.write_text(json.dumps(bad) + "\n")
    refused = cli(env, "--json", "preflight", str(responses))
    assert refused.returncode == 1 and json.loads(refused.stdout)["problems"], refused.stdout


def test_retry_runs_what_failed_as_a_child_and_downloads_merged_results(
    env: dict[str, str], tmp_path: Path
) -> None:
    lines = write_jsonl(tmp_path / "flaky.jsonl", 3, prefix="f")
    with lines.open("a") as out:
        body = {"model": "sim-chat", "messages": [{"role": "user", "content": "[[sim status=400 fail=1]]"}]}
        out.write(json.dumps({"custom_id": "flaky", "method": "POST", "url": CHAT_URL, "body": body}) + "\n")
    parent = cli(env, "--json", "submit", str(lines), "--watch")
    assert parent.returncode == 3
    parent_id = json.loads(parent.stdout)["id"]
    child = cli(env, "retry", parent_id, "--watch")
    assert child.returncode == 0, child.stdout + child.stderr  # the flaky request succeeds now
    again = cli(env, "--json", "retry", parent_id)
    child_id = json.loads(again.stdout)["id"]
    assert json.loads(again.stdout)["parent_batch_id"] == parent_id
    assert json.loads(cli(env, "--json", "get", parent_id).stdout)["retry_batch_ids"] == [child_id]
    merged = cli(env, "download", child_id, "--merged", "-o", str(tmp_path / "m"))
    assert merged.returncode == 0, merged.stderr
    rows = [json.loads(x) for x in (tmp_path / "m" / f"{child_id}.merged.jsonl").read_text().splitlines()]
    assert [r["custom_id"] for r in rows] == ["f0", "f1", "f2", "flaky"] and all(
        r["error"] is None for r in rows
    )


def test_the_webhook_commands(env: dict[str, str]) -> None:
    receiver = Receiver()
    try:
        bob = {**env, "BATCHGW_API_KEY": "sk-local-bob"}
        made = cli(bob, "webhook", "set", receiver.url("/cli"), "--event", "batch.completed")
        assert made.returncode == 0 and "signing secret (shown once): whsec_" in made.stdout
        assert json.loads(cli(bob, "--json", "webhook", "show").stdout)["event_types"] == ["batch.completed"]
        tested = cli(bob, "webhook", "test")
        assert tested.returncode == 0 and "answered 200" in tested.stdout
        assert len(receiver.at("/cli")) == 1
        rotated = cli(bob, "--json", "webhook", "rotate", "--keep-old")
        assert json.loads(rotated.stdout)["signing_secret"].startswith("whsec_")
        assert cli(bob, "webhook", "deliveries").returncode == 0
        assert cli(bob, "webhook", "delete").returncode == 0
        gone = cli(bob, "webhook", "show")
        assert gone.returncode == 1 and "webhook_not_found" in gone.stderr
    finally:
        receiver.stop()


# --- what a user sees -------------------------------------------------------------------------


def screen_of(args: list[str], env: dict[str, str], *, until: str, timeout: float = 60) -> list[str]:
    """The screen a terminal of 100x12 shows while ``batchgw args`` runs, once ``until`` is on
    it (read through a pseudo-terminal by the pyte emulator)."""
    screen = pyte.Screen(100, 12)
    stream = pyte.ByteStream(screen)
    pid, fd = pty.fork()
    if pid == 0:  # the child: the command, on the terminal
        os.execve(SCRIPT, [SCRIPT, *args], {**env, "COLUMNS": "100", "LINES": "12", "TERM": "xterm"})
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    stream.feed(os.read(fd, 65536))
                except OSError:
                    break  # the command ended
            if any(until in line for line in screen.display):
                return [line.rstrip() for line in screen.display]
        raise AssertionError(f"never shown: {until!r}\n" + "\n".join(screen.display))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)


def test_a_terminal_shows_the_progress_bar_updating(env: dict[str, str], tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "watched.jsonl", 300, text="[[sim latency_ms=300]]", prefix="w")
    batch_id = cli(env, "submit", str(source)).stdout.strip()
    plain = {k: v for k, v in env.items() if k != "NO_COLOR"}
    running = screen_of(["watch", batch_id], plain, until="running or queued")
    bar = next(line for line in running if "/300" in line)
    assert "in_progress" in bar or "validating" in bar
    assert "━" in bar  # the bar itself
    done = screen_of(["watch", batch_id], plain, until=f"{batch_id} completed", timeout=120)
    assert any("300/300" in line for line in done) and any("300 succeeded" in line for line in done)
    # What a user sees, kept as a fixture: the same lines, the batch's own figures aside.
    shown = "\n".join(line.replace(batch_id, "batch_<id>") for line in done if line).rstrip() + "\n"
    expected = FIXTURE.read_text()
    assert _shape(shown) == _shape(expected), shown


def _shape(text: str) -> list[str]:
    """A screen's lines with numbers and rates taken out: what stays the same run to run (the
    estimate too: shown while the batch runs, so only when the watch began before its end)."""
    return [
        re.sub(r"[\d.,]+", "#", re.sub(r"\s+", " ", re.sub(r" · estimated done [^·]*UTC", "", line))).strip()
        for line in text.splitlines()
        if line.strip()
    ]


def test_get_and_watch_say_why_a_batch_failed_and_download_writes_nothing(
    env: dict[str, str], tmp_path: Path
) -> None:
    refused = write_jsonl(tmp_path / "refused.jsonl", 2, prefix="v")
    with refused.open("a") as out:
        out.write(json.dumps({"custom_id": "no-body", "method": "POST", "url": CHAT_URL}) + "\n")
        out.write("not json\n")
    watched = cli(env, "submit", str(refused), "--watch")
    assert watched.returncode == 4, watched.stdout + watched.stderr  # failed
    found = re.search(r"(batch_\w+) failed", watched.stdout)
    assert found, watched.stdout
    batch_id = found[1]
    for shown in (watched, cli(env, "get", batch_id)):
        text = shown.stdout
        assert "reason: The input file has 2 problems" in text and "(invalid_batch_input)" in text
        assert "line 3: " in text and "line 4: " in text
        assert "next: fix these lines in your file and submit it again" in text
        assert not re.search(r"[A-Z][a-z]+(Error|Exception)\b", text)

    out_dir = tmp_path / "out"
    download = cli(env, "download", batch_id, "-o", str(out_dir))
    assert download.returncode == 1, download.stdout + download.stderr
    assert (
        "(no_results)" in download.stderr
        and f"{batch_id} failed without results to download" in download.stderr
    )
    assert "fix these lines" in download.stderr and len(download.stderr.strip().splitlines()) == 1
    assert not out_dir.exists() or not any(out_dir.iterdir())  # no empty file

    slow = write_jsonl(tmp_path / "slow.jsonl", 20, text="[[sim latency_ms=2000]]", prefix="s")
    running = cli(env, "submit", str(slow)).stdout.strip()
    early = cli(env, "download", running, "-o", str(out_dir))
    assert early.returncode == 1 and "has not ended yet" in early.stderr
    assert not out_dir.exists() or not any(out_dir.iterdir())
    assert cli(env, "cancel", running).returncode == 0
