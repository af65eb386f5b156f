"""How long the local stack takes to come back on a saved state (``local.state``, ``local.resume``).

``python -m bench.restart [--batches 1000] [--unfinished 0.1]`` starts a stack with its state
kept in a temporary folder, creates that many small inline batches (one request each; a share
of them made to stay unfinished: their one request fails once and its retry waits 10 minutes),
waits a while for the others to end, stops the stack cleanly (its state saved), then starts it
again on that state and prints:

- ``first_answer_seconds``: from the start of the second stack to the first answered API
  request (``GET /v1/batches?limit=1``);
- ``all_resumed_seconds``: until every unfinished batch's workflow was started again (that
  goes on in the background while the stack serves);
- the phases of that start (``LocalStack.timings``): moto ready (its state restored), the
  bootstrap, the other processes serving, the workflows started again (``resume``);
- ``restore_seconds``: the moto process's own restore of the snapshot (its log's
  ``state restored`` line);
- that every batch is still listed after the restart.

``--batches 20`` is a smoke run. Figures from a shared machine are noisy: run it twice.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from local.run import LocalStack

KEY = "sk-local-alice"
ENV = {
    # An unfinished batch's request fails once ([[sim status=500 fail=1]]) and waits its retry.
    "BATCH_RETRY_BASE_SECONDS": "600",
    "BATCH_RETRY_MAX_SECONDS": "600",
    "BATCH_MODEL_PAUSE_AFTER_FAILURES": "1000000",
    "BATCH_MODEL_CONCURRENCY": "16",
    "BATCH_API_RATE_PER_KEY": "0",
    "BATCH_MAX_ACTIVE_PER_USER": "100000",
}
FINAL = ("completed", "failed", "expired", "cancelled")


def _client(stack: LocalStack) -> httpx.Client:
    return httpx.Client(base_url=stack.api_url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)


def _create(stack: LocalStack, count: int, unfinished_every: int) -> list[str]:
    def one(index: int) -> str:
        directive = " [[sim status=500 fail=1]]" if unfinished_every and index % unfinished_every == 0 else ""
        body = {
            "requests": [
                {
                    "custom_id": f"r-{index}",
                    "body": {
                        "model": "sim-chat",
                        "messages": [{"role": "user", "content": f"hi {index}{directive}"}],
                    },
                }
            ]
        }
        with _client(stack) as http:
            answer = http.post("/batches", json=body)
            answer.raise_for_status()
            return str(answer.json()["id"])

    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(one, range(count)))


def _statuses(stack: LocalStack) -> dict[str, str]:
    """Every batch of the key's user: id -> status."""
    out: dict[str, str] = {}
    after = None
    with _client(stack) as http:
        while True:
            page = http.get("/batches", params={"limit": 100, **({"after": after} if after else {})})
            page.raise_for_status()
            data = page.json()
            out.update({b["id"]: b["status"] for b in data["data"]})
            if not data["has_more"]:
                return out
            after = data["last_id"]


def _settle(stack: LocalStack, ids: list[str], expected_final: int, timeout: float) -> int:
    """Wait until ``expected_final`` batches ended (or the time is up); how many ended."""
    deadline = time.monotonic() + timeout
    ended = 0
    while time.monotonic() < deadline:
        statuses = _statuses(stack)
        ended = sum(1 for b in ids if statuses.get(b) in FINAL)
        if ended >= expected_final:
            break
        time.sleep(2)
    return ended


def _first_answer(stack: LocalStack, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    with _client(stack) as http:
        while True:
            try:
                if http.get("/batches", params={"limit": 1}).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the restarted stack never answered")
            time.sleep(0.05)


def _restore_seconds(log_dir: Path) -> float | None:
    for line in (log_dir / "moto.log").read_text(errors="replace").splitlines():
        if "state restored" in line and (found := re.search(r"\bseconds=([0-9.]+)", line)):
            return float(found.group(1))
    return None


def _stack(root: Path, name: str, ports: list[int]) -> LocalStack:
    return LocalStack(
        api_port=ports[0],
        sim_port=ports[1],
        moto_port=ports[2],
        env_overrides=ENV,
        workers=2,
        log_dir=root / f"logs-{name}",
        state_dir=root / "state",
        startup_timeout=600,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=1000)
    parser.add_argument("--unfinished", type=float, default=0.1, help="share of batches left unfinished")
    parser.add_argument("--settle-seconds", type=float, default=300, help="most to wait for the rest to end")
    parser.add_argument("--ports", default="0,0,0", help="api,simulator,moto ports (0: free ones)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (state, logs)")
    parser.add_argument(
        "--saved", type=Path, default=None, help="restart on a copy of this state folder (a --keep run's)"
    )
    args = parser.parse_args(argv)
    ports = [int(p) for p in args.ports.split(",")]
    every = round(1 / args.unfinished) if args.unfinished > 0 else 0
    unfinished = sum(1 for i in range(args.batches) if every and i % every == 0)
    root = Path(tempfile.mkdtemp(prefix="bench-restart-"))
    figures: dict[str, Any] = {"batches": args.batches, "unfinished_made": unfinished}

    if args.saved is not None:  # the first half done already: restart on its state
        shutil.copytree(args.saved, root / "state", ignore=shutil.ignore_patterns("stack.lock"))
        figures = {"saved": str(args.saved)}
    else:
        with _stack(root, "first", ports) as first:
            started = time.monotonic()
            ids = _create(first, args.batches, every)
            figures["create_seconds"] = round(time.monotonic() - started, 1)
            figures["ended_before_stop"] = _settle(first, ids, args.batches - unfinished, args.settle_seconds)
            stopping = time.monotonic()
        figures["stop_seconds"] = round(time.monotonic() - stopping, 1)

    second = _stack(root, "second", ports)
    started = time.monotonic()
    try:
        second.start()
        _first_answer(second)
        figures["first_answer_seconds"] = round(time.monotonic() - started, 2)
        second.wait_resumed(600)
        figures["all_resumed_seconds"] = round(time.monotonic() - started, 2)
        figures["start_phases"] = {k: round(v, 2) for k, v in second.timings.items()}
        figures["restore_seconds"] = _restore_seconds(root / "logs-second")
        figures["resumed"] = second.resumed
        statuses = _statuses(second)
        if args.saved is not None:
            ids = list(statuses)
            args.batches = len(ids)
        figures["listed_after_restart"] = sum(1 for b in ids if b in statuses)
    finally:
        stopping = time.monotonic()
        second.stop()
        figures["second_stop_seconds"] = round(time.monotonic() - stopping, 1)
    figures["snapshot_mib"] = round((root / "state" / "moto-state.pickle").stat().st_size / 2**20, 1)
    if args.keep:
        figures["kept"] = str(root)
    else:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(figures, indent=2))
    return 0 if figures["listed_after_restart"] == args.batches else 1


if __name__ == "__main__":
    raise SystemExit(main())
