"""The ``batchgw`` command: every command talks to the gateway's public API (``/v1``) with the
key in BATCHGW_API_KEY (or ``--api-key``), at BATCHGW_BASE_URL (or ``--base-url``; the local
stack by default). ``--json`` prints the API's objects for scripts; errors are one line on
stderr with the API's code, and exit 1 (2 for a command line typer refuses). ``batchgw smoke``
(``batchgw_cli.smoke``), for operators, drives the same API with the official OpenAI SDK and,
given an administrator's key, reads the admin totals too."""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn
from rich.table import Table

from batchgw_cli import explaining, smoke, submitting, watching
from batchgw_cli.client import DEFAULT_BASE_URL, Api, ApiFailure, CliError

app = typer.Typer(
    name="batchgw",
    help="Submit, watch and download batches of an LLM gateway's batch API.\n\n"
    "Example: batchgw submit requests.jsonl --name nightly --watch",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
webhook_app = typer.Typer(help="Your batch webhook: where batch ends are announced.", no_args_is_help=True)
app.add_typer(webhook_app, name="webhook")
app.command("smoke")(smoke.smoke)  # for an operator: a deployment checked end to end

INTERRUPTED = (
    "interrupted: what was sent is kept, and a batch made goes on; run the same command again to go on"
)
out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


class Context:
    def __init__(self, base_url: str, api_key: str | None, as_json: bool) -> None:
        self.base_url = base_url
        self.api_key = api_key
        self.as_json = as_json
        self._api: Api | None = None

    @property
    def api(self) -> Api:
        if self._api is None:
            if not self.api_key:
                raise CliError("no API key: set BATCHGW_API_KEY or pass --api-key", code="no_api_key")
            self._api = Api(self.base_url, self.api_key)
        return self._api


def _ctx(ctx: typer.Context) -> Context:
    found: Context = ctx.obj
    return found


@app.callback()
def main(
    ctx: typer.Context,
    base_url: Annotated[
        str, typer.Option(envvar="BATCHGW_BASE_URL", help="The API's base URL, /v1 included.")
    ] = DEFAULT_BASE_URL,
    api_key: Annotated[str | None, typer.Option(envvar="BATCHGW_API_KEY", help="Your API key.")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the API's objects as JSON, for scripts.")
    ] = False,
) -> None:
    ctx.obj = Context(base_url, api_key, as_json)


def _print(ctx: Context, value: Any, human: Callable[[], None]) -> None:
    if ctx.as_json:
        out.print_json(json.dumps(value)) if sys.stdout.isatty() else print(json.dumps(value))
    else:
        human()


# --- batches ----------------------------------------------------------------------------------


def _checked_complete_by(value: str | None) -> str | None:
    """``--complete-by`` refused on the command line (exit 2) when it is no time."""
    if value is not None:
        try:
            submitting.complete_by_of(value, time.time())
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    return value


@app.command()
def submit(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="A JSONL file of requests.")],
    endpoint: Annotated[
        str | None, typer.Option(help="The requests' endpoint (default: the first line's url).")
    ] = None,
    window: Annotated[str, typer.Option(help="The completion window: 24h, 48h, 72h or 168h.")] = "24h",
    name: Annotated[str | None, typer.Option(help="A name, kept in the batch's metadata.")] = None,
    metadata: Annotated[
        list[str] | None, typer.Option("--metadata", "-m", help="KEY=VALUE (repeatable).")
    ] = None,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Watch it until it ends.")] = False,
    priority: Annotated[
        int | None,
        typer.Option(help="Higher runs first: -10 to 10 (an administrator: -100 to 100). Default 0."),
    ] = None,
    complete_by: Annotated[
        str | None, typer.Option(help=submitting.COMPLETE_BY_HELP, callback=_checked_complete_by)
    ] = None,
) -> None:
    """Upload FILE and create its batch; prints the batch id.

    Running the same command again (after a crash, a dropped connection or Ctrl-C) resumes
    the upload or finds the batch instead of creating another.

    Example: batchgw submit requests.jsonl --window 24h --name nightly --priority 5 --complete-by +6h --watch
    """
    c = _ctx(ctx)
    options = submitting.Options(
        endpoint, window, name, _pairs(metadata or []), priority=priority, complete_by=complete_by
    )
    with _bytes_progress(c, f"uploading {file.name}") as progress:
        batch, _ = submitting.submit(c.api, file, options, progress=progress)
    if watch:
        _watch(c, batch["id"])
        return
    _print(c, batch, lambda: out.print(batch["id"]))


@app.command()
def watch(
    ctx: typer.Context,
    batch_id: str,
    interval: Annotated[float, typer.Option(help="Seconds between reads at first.")] = 1.0,
) -> None:
    """Show a batch's progress until it ends.

    Exit codes: 0 completed (every request succeeded), 3 completed with failed requests,
    4 failed, 5 expired, 6 cancelled, 1 an error, 130 interrupted (the batch goes on).
    """
    _watch(_ctx(ctx), batch_id, interval)


def _watch(c: Context, batch_id: str, interval: float = 1.0) -> None:
    def read() -> dict[str, Any]:
        return dict(c.api.json("GET", f"/batches/{batch_id}"))

    if c.as_json:
        batch = read()
        while batch["status"] not in watching.FINAL:
            time.sleep(interval)
            batch = read()
        _print(c, batch, lambda: None)
    else:
        err.print(f"watching {batch_id} (Ctrl-C stops watching; the batch goes on)")
        batch = watching.watch(read, out, interval=interval)
        out.print(f"{batch_id} {batch['status']}: {watching.summary(batch)}")
        _explain(batch)
    raise typer.Exit(watching.exit_code(batch))


@app.command()
def download(
    ctx: typer.Context,
    batch_id: str,
    output: Annotated[Path, typer.Option("-o", "--output", help="The directory to write to.")] = Path("."),
    merged: Annotated[
        bool, typer.Option(help="A retry's results with those of the batches it retries.")
    ] = False,
) -> None:
    """Download an ended batch's results, resumably, each file checked.

    Its output and error files (a batch of direct requests: its output.jsonl), each checked
    against the SHA-256 the server names; a rerun goes on from where the last one stopped.
    """
    c = _ctx(ctx)
    batch = c.api.json("GET", f"/batches/{batch_id}")
    if batch["status"] not in watching.FINAL:
        raise CliError(
            f"{batch_id} has not ended yet ({batch['status']}): batchgw watch {batch_id}", code="not_ended"
        )
    missing = None if merged else explaining.no_results(batch)
    if missing is not None:  # nothing written: an empty file would read as a batch with no results
        raise CliError(missing, code="no_results")
    output.mkdir(parents=True, exist_ok=True)
    wanted: list[tuple[str, Path]] = []
    if merged:
        wanted.append((f"/batches/{batch_id}/output.jsonl?merged=true", output / f"{batch_id}.merged.jsonl"))
    elif batch.get("output_file_id") or batch.get("error_file_id"):
        for kind in ("output", "error"):
            file_id = batch.get(f"{kind}_file_id")
            if file_id:
                wanted.append((f"/files/{file_id}/content", output / f"{batch_id}.{kind}.jsonl"))
    else:
        wanted.append((f"/batches/{batch_id}/output.jsonl", output / f"{batch_id}.output.jsonl"))
    written = [_fetch(c, path, target) for path, target in wanted]

    def human() -> None:
        for path in written:
            out.print(str(path))

    _print(c, {"batch_id": batch_id, "files": [str(p) for p in written]}, human)


def _fetch(c: Context, path: str, target: Path) -> Path:
    """``path``'s bytes into ``target``, through ``target.part`` (a rerun goes on from where
    it stopped), checked against the SHA-256 the answer names."""
    answer = c.api.call("GET", path, follow_redirects=False)
    digest = (answer.headers.get("x-content-sha256") or answer.headers.get("etag", "")).strip('"') or None
    if target.exists() and digest and "-" not in digest and _sha256(target) == digest:
        return target  # downloaded already
    partial = target.with_name(target.name + ".part")
    if answer.status_code in (301, 302, 303, 307):
        _fetch_url(answer.headers["location"], partial)
    else:
        partial.write_bytes(answer.content)
    if digest and "-" not in digest and _sha256(partial) != digest:
        partial.unlink()
        raise CliError(
            f"{target.name}: its SHA-256 does not match the server's; run the command again", code="checksum"
        )
    partial.replace(target)
    return target


def _fetch_url(url: str, partial: Path) -> None:
    """A presigned URL's bytes (no API key sent), from where ``partial`` stopped."""
    have = partial.stat().st_size if partial.exists() else 0
    headers = {"Range": f"bytes={have}-"} if have else {}
    with httpx.stream("GET", url, headers=headers, timeout=120) as answer:
        if answer.status_code == 416:
            return  # it was whole already
        if answer.status_code >= 400:
            raise CliError(f"the download failed: HTTP {answer.status_code}", code="download_failed")
        mode = "ab" if answer.status_code == 206 else "wb"
        with partial.open(mode) as stream:
            for chunk in answer.iter_bytes():
                stream.write(chunk)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(1024 * 1024):
            digest.update(chunk)
    return digest.hexdigest()


@app.command("list")
def list_batches(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option(help="How many, newest first.")] = 20,
    status: Annotated[
        list[str] | None, typer.Option(help="Only batches in this status (repeatable).")
    ] = None,
) -> None:
    """Your batches, newest first."""
    c = _ctx(ctx)
    page = c.api.json(
        "GET", "/batches", params={"limit": limit, **({"status": ",".join(status)} if status else {})}
    )

    def human() -> None:
        table = Table("id", "status", "endpoint", "requests", "name", "created")
        for b in page["data"]:
            table.add_row(
                b["id"],
                b["status"],
                b["endpoint"],
                watching.summary(b),
                (b.get("metadata") or {}).get("name", ""),
                time.strftime("%Y-%m-%d %H:%M", time.gmtime(b["created_at"])),
            )
        out.print(table)

    _print(c, page, human)


@app.command()
def get(ctx: typer.Context, batch_id: str) -> None:
    """One batch."""
    c = _ctx(ctx)
    batch = c.api.json("GET", f"/batches/{batch_id}")
    _print(c, batch, lambda: _show_batch(batch))


def _show_batch(batch: dict[str, Any]) -> None:
    out.print(f"[bold]{batch['id']}[/] {batch['status']} · {batch['endpoint']}")
    out.print(watching.summary(batch))
    if watching.scheduling(batch):
        out.print(watching.scheduling(batch))
    for note in watching.notes(batch):
        out.print(f"[yellow]{note}")
    _explain(batch)
    if batch.get("parent_batch_id"):
        out.print(f"retries {batch['parent_batch_id']}")
    if batch.get("retry_batch_ids"):
        out.print(f"retried by {', '.join(batch['retry_batch_ids'])}")


def _explain(batch: dict[str, Any]) -> None:
    """Why an ended batch did not succeed, and what to do next (its own words: no markup)."""
    for line in explaining.reasons(batch):
        out.print(line, markup=False, soft_wrap=True)


@app.command()
def cancel(ctx: typer.Context, batch_id: str) -> None:
    """Cancel a batch: its unstarted requests end, running ones finish."""
    c = _ctx(ctx)
    batch = c.api.json("POST", f"/batches/{batch_id}/cancel")
    _print(c, batch, lambda: out.print(f"{batch_id} {batch['status']}"))


@app.command()
def delete(ctx: typer.Context, batch_id: str) -> None:
    """Delete a batch, its requests and its results."""
    c = _ctx(ctx)
    answer = c.api.json("DELETE", f"/batches/{batch_id}")
    _print(c, answer, lambda: out.print(f"{batch_id} deleted"))


@app.command()
def retry(
    ctx: typer.Context,
    batch_id: str,
    error_code: Annotated[
        list[str] | None,
        typer.Option("--error-code", help="Only requests that ended with this code (repeatable)."),
    ] = None,
    window: Annotated[str | None, typer.Option(help="Its completion window (default: the batch's).")] = None,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Watch it until it ends.")] = False,
) -> None:
    """Run an ended batch's unsuccessful requests again, as a new batch; prints its id.

    Its failed, expired and cancelled requests (--error-code: only those). The same command
    again finds the same retry.

    Example: batchgw retry batch_abc --error-code rate_limited --watch
    """
    c = _ctx(ctx)
    body: dict[str, Any] = {}
    if error_code:
        body["error_codes"] = sorted(set(error_code))
    if window:
        body["completion_window"] = window
    material = json.dumps([c.base_url, batch_id, body], sort_keys=True)
    key = "cli-retry-" + hashlib.sha256(material.encode()).hexdigest()[:40]
    child = c.api.json("POST", f"/batches/{batch_id}/retry", json=body, headers={"Idempotency-Key": key})
    if watch:
        _watch(c, child["id"])
        return
    _print(c, child, lambda: out.print(child["id"]))


@app.command()
def preflight(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="A JSONL file of requests.")],
    endpoint: Annotated[
        str | None, typer.Option(help="The requests' endpoint, when no line names it.")
    ] = None,
    model: Annotated[str | None, typer.Option(help="One model for every request.")] = None,
    keep_file: Annotated[bool, typer.Option(help="Keep the uploaded file (its id is printed).")] = False,
    anthropic_version: Annotated[
        str, typer.Option(help="The anthropic-version a Messages file is checked under.")
    ] = "2023-06-01",
) -> None:
    """Check FILE on the server: its problems by line, and what it may cost.

    Nothing runs or is billed; the file is uploaded for the check and deleted after it
    (--keep-file keeps it). Exit code 1 when the file has problems.
    """
    c = _ctx(ctx)
    if not file.is_file():
        raise CliError(f"no such file: {file}", code="file_not_found")
    target = endpoint or _endpoint_or_none(file)
    if target in DIRECT_CHECKED:
        # The server's file check covers Chat and Embeddings; other targets are checked as
        # direct requests, as a create takes them.
        answer = _preflight_direct(c, file, target, anthropic_version)
        _print(c, answer, lambda: _show_preflight(answer, None))
        if not answer["valid"]:
            raise typer.Exit(1)
        return
    made = c.api.json(
        "POST", "/files", files={"file": (file.name, file.read_bytes())}, data={"purpose": "batch"}
    )
    try:
        body = {
            "input_file_id": made["id"],
            **({"endpoint": endpoint} if endpoint else {}),
            **({"model": model} if model else {}),
        }
        answer = c.api.json("POST", "/batches/preflight", json=body)
    finally:
        if not keep_file:
            c.api.call("DELETE", f"/files/{made['id']}")
    _print(c, answer, lambda: _show_preflight(answer, made["id"] if keep_file else None))
    if not answer["valid"]:
        raise typer.Exit(1)


DIRECT_CHECKED = ("/v1/responses", "/v1/messages")


def _endpoint_or_none(file: Path) -> str | None:
    try:
        return submitting.endpoint_of(file)
    except CliError:
        return None


def _preflight_direct(c: Context, file: Path, target: str, anthropic_version: str) -> dict[str, Any]:
    """A Responses or Messages file checked as the direct requests of a create (up to the
    API's body limit): the first problem, and the cost bounds."""
    requests = []
    for number, raw in enumerate(file.read_bytes().splitlines(), 1):
        if not raw.strip():
            continue
        try:
            requests.append(json.loads(raw))
        except ValueError:
            raise CliError(f"line {number} is not JSON", code="invalid_json") from None
    headers = {"anthropic-version": anthropic_version} if target == "/v1/messages" else {}
    return dict(c.api.json("POST", "/batches/preflight", json={"requests": requests}, headers=headers))


def _show_preflight(answer: dict[str, Any], file_id: str | None) -> None:
    if not answer["valid"]:
        table = Table("line", "custom_id", "field", "code", "message")
        for p in answer["problems"]:
            table.add_row(
                *(
                    str(p[k] if p[k] is not None else "")
                    for k in ("line", "custom_id", "field", "code", "message")
                )
            )
        out.print(table)
        more = " (and more)" if answer.get("problems_truncated") else ""
        out.print(f"[red]{len(answer['problems'])} problem(s){more}")
        return
    out.print(f"valid: {answer['requests']:,} requests · {answer['endpoint']} · {answer['model']}")
    cost = answer.get("cost") or {}
    for m in cost.get("models", []):
        out.print(
            f"  {m['model']}: {m['requests']:,} requests, ~{m['input_tokens']:,} input tokens, "
            f"${m['min_usd']:.6f} to ${m['max_usd']:.6f}"
        )
    left = cost.get("spend_left_usd")
    out.print(
        f"cost ${cost.get('min_usd', 0):.6f} to ${cost.get('max_usd', 0):.6f}; "
        + ("no quota limits you" if left is None else f"${left:.6f} left to spend")
        + f"; fits: {cost.get('fits')}"
    )
    if file_id:
        out.print(f"file kept: {file_id}")


# --- the webhook --------------------------------------------------------------------------------


def _endpoint(c: Context) -> dict[str, Any] | None:
    found = c.api.json("GET", "/webhook_endpoints")["data"]
    return found[0] if found else None


def _own_endpoint(c: Context) -> dict[str, Any]:
    found = _endpoint(c)
    if found is None:
        raise CliError("you have no webhook: batchgw webhook set URL", code="webhook_not_found")
    return found


@webhook_app.command("set")
def webhook_set(
    ctx: typer.Context,
    url: str,
    event: Annotated[
        list[str] | None,
        typer.Option("--event", help="An event type to send (repeatable; default: all four)."),
    ] = None,
    name: Annotated[str, typer.Option(help="Its name.")] = "batch webhook",
) -> None:
    """Set up your webhook, or change its URL or events.

    A new webhook's signing secret is printed once.
    """
    c = _ctx(ctx)
    events = event or ["batch.completed", "batch.failed", "batch.expired", "batch.cancelled"]
    found = _endpoint(c)
    body = {"url": url, "name": name, "event_types": events}
    if found is None:
        shown = c.api.json("POST", "/webhook_endpoints", json=body)
    else:
        shown = c.api.json("POST", f"/webhook_endpoints/{found['id']}", json=body)
    _print(c, shown, lambda: _show_endpoint(shown))


def _show_endpoint(shown: dict[str, Any]) -> None:
    out.print(f"{shown['id']} {shown['url']} · {', '.join(shown['event_types'])}")
    if not shown.get("enabled", True):
        out.print(f"[yellow]disabled: {shown.get('disabled_reason')}")
    if shown.get("signing_secret"):
        out.print(f"signing secret (shown once): {shown['signing_secret']}")


@webhook_app.command("show")
def webhook_show(ctx: typer.Context) -> None:
    """Your webhook (never its secret)."""
    c = _ctx(ctx)
    shown = _own_endpoint(c)
    _print(c, shown, lambda: _show_endpoint(shown))


@webhook_app.command("rotate")
def webhook_rotate(
    ctx: typer.Context,
    keep_old: Annotated[bool, typer.Option(help="Keep the old secret signing for 24 hours.")] = False,
) -> None:
    """A new signing secret, printed once."""
    c = _ctx(ctx)
    found = _own_endpoint(c)
    body = {"keep_old_secret_active_for_24_hours": keep_old}
    shown = c.api.json("POST", f"/webhook_endpoints/{found['id']}/rotate_secret", json=body)
    _print(c, shown, lambda: _show_endpoint(shown))


@webhook_app.command("test")
def webhook_test(
    ctx: typer.Context,
    event: Annotated[str, typer.Option(help="The event type to send.")] = "batch.completed",
) -> None:
    """Send your webhook one sample event now; prints the status it answered."""
    c = _ctx(ctx)
    found = _own_endpoint(c)
    result = c.api.json("POST", f"/webhook_endpoints/{found['id']}/test", json={"event_type": event})
    _print(c, result, lambda: out.print(f"{event}: your endpoint answered {result['status_code']}"))


@webhook_app.command("deliveries")
def webhook_deliveries(ctx: typer.Context) -> None:
    """The last week's deliveries, newest first."""
    c = _ctx(ctx)
    page = c.api.json("GET", "/batch_webhook/events")

    def human() -> None:
        table = Table("event", "type", "batch", "attempts", "status", "delivered")
        for d in page["data"]:
            table.add_row(
                d["id"],
                d["type"],
                d["batch_id"],
                str(d["attempts"]),
                str(d["last_status"] or d["last_error"] or ""),
                "yes" if d["delivered_at"] else "no",
            )
        out.print(table)

    _print(c, page, human)


@webhook_app.command("delete")
def webhook_delete(ctx: typer.Context) -> None:
    """Remove your webhook."""
    c = _ctx(ctx)
    found = _own_endpoint(c)
    answer = c.api.json("DELETE", f"/webhook_endpoints/{found['id']}")
    _print(c, answer, lambda: out.print(f"{found['id']} deleted"))


# --- running ------------------------------------------------------------------------------------


def _pairs(values: list[str]) -> dict[str, str]:
    pairs = {}
    for value in values:
        key, sep, text = value.partition("=")
        if not sep or not key:
            raise CliError(f"metadata must be KEY=VALUE, not {value!r}", code="bad_metadata")
        pairs[key] = text
    return pairs


@contextmanager
def _bytes_progress(c: Context, what: str) -> Iterator[Callable[[int, int], None]]:
    """A byte progress bar (on stderr, only on a terminal and without --json)."""
    if c.as_json or not err.is_terminal:
        yield lambda done, total: None
        return
    with Progress(
        TextColumn(what), BarColumn(), DownloadColumn(), TransferSpeedColumn(), console=err, transient=True
    ) as progress:
        task = progress.add_task(what, total=None)

        def update(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        yield update


def run() -> None:
    """The console script: any failure is one line on stderr, never a traceback."""
    try:
        code = app(standalone_mode=False)
    except KeyboardInterrupt:
        err.print(INTERRUPTED)
        sys.exit(watching.EXIT_INTERRUPTED)
    except ApiFailure as failure:
        code = f" ({failure.code})" if failure.code else ""
        err.print(f"error: HTTP {failure.status}{code}: {failure.message}", markup=False, soft_wrap=True)
        sys.exit(failure.exit_code)
    except CliError as failure:
        code = f" ({failure.code})" if failure.code else ""
        err.print(f"error{code}: {failure.message}", markup=False, soft_wrap=True)  # one line
        sys.exit(failure.exit_code)
    except typer.Abort:  # Ctrl-C where the command line library saw it first
        err.print(INTERRUPTED)
        sys.exit(watching.EXIT_INTERRUPTED)
    except Exception as refused:
        # A command line the library refused (a usage error): its own message and usage.
        show, status = getattr(refused, "show", None), getattr(refused, "exit_code", None)
        if show is None or not isinstance(status, int):
            raise
        show()
        sys.exit(status)
    code = code if isinstance(code, int) else 0
    if code == watching.EXIT_INTERRUPTED:  # Ctrl-C, as the command line library ended it
        err.print(INTERRUPTED)
    sys.exit(code)
