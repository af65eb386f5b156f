"""``batchgw smoke``: does a running batchgw work end to end, as a client sees it?

It drives the deployment with the official OpenAI Python SDK only (nothing of the gateway's
code): lists the models, runs a batch of direct requests and a batch from an uploaded file,
cancels a third batch, checks every answer came back, and with an administrator's key checks
the admin totals counted them. One line per step with its duration; the first failure ends
it with the step, the HTTP status and the gateway's own message, and exit code 1.

The SDK is imported when the command runs, not with this module: the other commands do not
need it, and a missing SDK is then one clear line instead of a failing ``batchgw``.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

if TYPE_CHECKING:
    import openai

FINAL = ("completed", "failed", "expired", "cancelled")
CHAT: Final = "/v1/chat/completions"
EXIT_FAILED = 1
EXIT_NO_SDK = 2
NO_SDK = "batchgw smoke needs the OpenAI Python SDK: pip install openai (make install puts it in the venv)"
# Polling a batch: the first reads come fast (a small batch ends in seconds), then ease off.
POLL_FIRST_SECONDS = 0.5
POLL_MOST_SECONDS = 5.0
RESULTS_PAGE = 100
CALL_TIMEOUT_SECONDS = 60.0  # one API call (the SDK tries a failed call twice more)
ERRORS_SHOWN = 3  # of a stuck batch's requests: the last errors named in the failure


class StepFailed(Exception):
    """A step's check failed; the message says what, in an operator's words."""


@dataclass(frozen=True)
class Options:
    base_url: str  # the API base, ending in /v1, as the SDK takes it
    api_key: str
    admin_key: str | None
    model: str
    prompt: str
    requests: int  # in each of the inline and the file batch
    cancel_requests: int
    timeout: float  # seconds each batch may take to end
    keep: bool

    @property
    def admin_base_url(self) -> str:
        """Where the admin routes live: the API base without its /v1."""
        return self.base_url.rstrip("/").removesuffix("/v1")


@dataclass
class Made:
    """What this run created: the only things it may cancel or delete."""

    batches: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Expected:
    """A batch the smoke waits for, and what counts as its success."""

    label: str  # "inline", "file"
    batch_id: str
    custom_ids: tuple[str, ...]


class Smoke:
    """One run against one deployment. ``run`` prints each step and answers whether all passed."""

    def __init__(
        self,
        sdk: ModuleType,
        options: Options,
        *,
        out: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.sdk = sdk
        self.options = options
        self.out = out
        self.clock = clock
        self.sleep = sleep
        self.client: openai.OpenAI = sdk.OpenAI(
            base_url=options.base_url, api_key=options.api_key, timeout=CALL_TIMEOUT_SECONDS
        )
        self.run_id = f"smoke-{uuid.uuid4().hex[:12]}"
        self.made = Made()
        self.inline: Expected | None = None
        self.file: Expected | None = None
        self.cancelled: str | None = None
        self.user_id: str | None = None
        self.summary_before: dict[str, Any] | None = None
        self.succeeded = 0  # requests of this run's batches that succeeded

    # --- the run ----------------------------------------------------------------------------

    def steps(self) -> Iterator[tuple[str, Callable[[], str]]]:
        yield "models", self.list_models
        if self.options.admin_key:
            yield "summary before", self.read_summary_before
        yield "inline create", self.create_inline
        yield "file create", self.create_from_file
        yield "cancel", self.create_and_cancel
        yield "inline results", self.check_inline
        yield "file results", self.check_file
        yield "cancel ends", self.wait_cancelled
        if self.options.admin_key:
            yield "summary after", self.check_summary

    def run(self) -> bool:
        started = self.clock()
        self.out(f"batchgw smoke {self.run_id}: {self.options.base_url}, model {self.options.model}")
        for name, step in self.steps():
            began = self.clock()
            try:
                detail = step()
            except StepFailed as failed:
                self._failed(name, began, str(failed))
                return False
            except self.sdk.APIStatusError as refused:
                self._failed(name, began, self.describe(refused))
                return False
            except self.sdk.APIConnectionError as unreachable:
                self._failed(name, began, f"could not reach {self.options.base_url}: {unreachable}")
                return False
            self.out(_line("ok", name, self.clock() - began, detail))
        if not self.options.keep:
            began = self.clock()
            cleaned = self.clean_up()
            self.out(_line("ok", "cleanup", self.clock() - began, cleaned))
        self.out(f"smoke passed in {self.clock() - started:.1f}s")
        return True

    def _failed(self, name: str, began: float, why: str) -> None:
        self.out(_line("FAIL", name, self.clock() - began, why))
        stopped = self.stop_running()
        left = ", ".join(self.made.batches + self.made.files) or "nothing"
        note = f"; cancelled what was still running: {', '.join(stopped)}" if stopped else ""
        self.out(f"smoke failed at step '{name}'; left for you to look at: {left}{note}")

    # --- the steps --------------------------------------------------------------------------

    def list_models(self) -> str:
        """The key's models, with ours among them (or, on a gateway without /v1/models, its batches)."""
        try:
            page = self.client.models.list()
        except self.sdk.NotFoundError:
            self.client.batches.list(limit=1)
            return "GET /v1/models answered 404 (a gateway without it); GET /v1/batches answered"
        ids = [model.id for model in page.data]
        model = self.options.model
        if model not in ids:
            try:  # an alias is not listed, but reads as its model
                self.client.models.retrieve(model)
            except self.sdk.NotFoundError:
                shown = ", ".join(ids[:10]) + (", …" if len(ids) > 10 else "")
                raise StepFailed(
                    f"model '{model}' is not among the {len(ids)} models this key may use "
                    f"({shown or 'none'}): choose one with --model"
                ) from None
        return f"GET /v1/models: {len(ids)} models, {model} usable"

    def read_summary_before(self) -> str:
        """The key's owner (GET /v1/me) and their admin totals before this run adds to them."""
        me = self.client.get("/me", cast_to=object)
        self.user_id = str(_field(me, "id"))
        self.summary_before = self.summary()
        return f"GET /admin/batch/summary: {self.user_id} has {self.summary_before['batches']} batches"

    def create_inline(self) -> str:
        custom_ids = tuple(f"inline-{i}" for i in range(self.options.requests))
        batch = self.client.post(
            "/batches",
            body={"requests": [self._request(c) for c in custom_ids], "metadata": self._metadata()},
            cast_to=self.sdk.types.Batch,
        )
        self.made.batches.append(batch.id)
        self.inline = Expected("inline", batch.id, custom_ids)
        return f"POST /v1/batches: {batch.id} ({len(custom_ids)} requests) {batch.status}"

    def create_from_file(self) -> str:
        custom_ids = tuple(f"file-{i}" for i in range(self.options.requests))
        lines = [json.dumps({**self._request(c), "method": "POST", "url": CHAT}) for c in custom_ids]
        content = ("\n".join(lines) + "\n").encode()
        upload = self.client.files.create(file=(f"batchgw-{self.run_id}.jsonl", content), purpose="batch")
        self.made.files.append(upload.id)
        batch = self.client.batches.create(
            input_file_id=upload.id, endpoint=CHAT, completion_window="24h", metadata=self._metadata()
        )
        self.made.batches.append(batch.id)
        self.file = Expected("file", batch.id, custom_ids)
        return (
            f"POST /v1/files: {upload.id} ({upload.bytes} bytes); POST /v1/batches: {batch.id} {batch.status}"
        )

    def create_and_cancel(self) -> str:
        """A batch cancelled right after it is made. On a fast upstream it may have ended
        first: either way it must end, which ``wait_cancelled`` checks."""
        requests = [self._request(f"cancel-{i}") for i in range(self.options.cancel_requests)]
        batch = self.client.post(
            "/batches",
            body={"requests": requests, "metadata": self._metadata()},
            cast_to=self.sdk.types.Batch,
        )
        self.made.batches.append(batch.id)
        self.cancelled = batch.id
        answer = self.client.batches.cancel(batch.id)
        return f"POST /v1/batches/{batch.id}/cancel: {answer.status} ({len(requests)} requests)"

    def check_inline(self) -> str:
        assert self.inline is not None
        batch = self.wait(self.inline.batch_id)
        results = list(self._results(batch.id))
        found = {r.get("custom_id"): r for r in results}
        bad = [
            f"{c}: {_result_error(found.get(c))}"
            for c in self.inline.custom_ids
            if (found.get(c) or {}).get("status") != "completed"
        ]
        self._succeeded_or_fail(batch, len(self.inline.custom_ids), bad)
        n = len(self.inline.custom_ids)
        return f"{batch.id} completed; GET /v1/batches/{{id}}/results: {n} of {n} succeeded"

    def check_file(self) -> str:
        assert self.file is not None
        batch = self.wait(self.file.batch_id)
        succeeded: dict[str, Any] = {}
        failed: dict[str, Any] = {}
        if batch.output_file_id:
            succeeded = _by_custom_id(self.client.files.content(batch.output_file_id).text)
        if batch.error_file_id:
            failed = _by_custom_id(self.client.files.content(batch.error_file_id).text)
        bad = []
        for c in self.file.custom_ids:
            line = succeeded.get(c)
            status = ((line or {}).get("response") or {}).get("status_code")
            if line is None or line.get("error") or status != 200:
                bad.append(f"{c}: {_line_error(line or failed.get(c))}")
        self._succeeded_or_fail(batch, len(self.file.custom_ids), bad)
        return (
            f"{batch.id} completed; output file {batch.output_file_id}: {len(succeeded)} lines, all succeeded"
        )

    def wait_cancelled(self) -> str:
        assert self.cancelled is not None
        batch = self.wait(self.cancelled)
        if batch.status not in ("cancelled", "completed"):  # a cancel ends it one of these two ways
            raise StepFailed(f"batch {batch.id} ended {batch.status}: {_batch_error(batch)}")
        counts = batch.request_counts
        done = counts.completed if counts is not None else 0
        self.succeeded += done
        if batch.status == "cancelled":
            return f"{batch.id} cancelled ({done} of {self.options.cancel_requests} had succeeded first)"
        return f"{batch.id} had already completed before the cancel reached it ({done} succeeded)"

    def check_summary(self) -> str:
        assert self.summary_before is not None
        after = self.summary()
        before = self.summary_before
        batches = after["batches"] - before["batches"]
        succeeded = after["requests"]["succeeded"] - before["requests"]["succeeded"]
        made = len(self.made.batches)
        if batches < made or succeeded < self.succeeded:
            raise StepFailed(
                f"GET /admin/batch/summary?user={self.user_id} does not count this run: "
                f"+{batches} batches (this run made {made}), +{succeeded} requests succeeded "
                f"(this run's: {self.succeeded})"
            )
        return f"{self.user_id}: +{batches} batches, +{succeeded} requests succeeded"

    # --- waiting and reading ----------------------------------------------------------------

    def wait(self, batch_id: str) -> Any:
        """The batch once it ends, however it ended (the caller judges that); StepFailed when
        it has not within the timeout, naming its requests' last errors."""
        deadline = self.clock() + self.options.timeout
        pause = POLL_FIRST_SECONDS
        while True:
            batch = self.client.batches.retrieve(batch_id)
            if batch.status in FINAL:
                return batch
            if self.clock() >= deadline:
                raise StepFailed(
                    f"batch {batch_id} still {batch.status} after {self.options.timeout:g} s"
                    f"{self._last_errors(batch_id)}"
                )
            self.sleep(min(pause, max(deadline - self.clock(), 0.0)))
            pause = min(pause * 2, POLL_MOST_SECONDS)

    def _last_errors(self, batch_id: str) -> str:
        """What the batch's unfinished requests last failed with, if they did (a request
        waiting for a retry keeps its last error)."""
        errors = [
            f"{r.get('custom_id')}: {_result_error(r)}"
            for r in self._results(batch_id)
            if r.get("status") not in ("completed", "failed") and r.get("error")
        ]
        if not errors:
            return "; none of its requests has failed yet (the upstream may be slow, or the batch queued)"
        more = f" (and {len(errors) - ERRORS_SHOWN} more)" if len(errors) > ERRORS_SHOWN else ""
        return "; its requests' last errors: " + "; ".join(errors[:ERRORS_SHOWN]) + more

    def _results(self, batch_id: str) -> Iterator[dict[str, Any]]:
        """Every result of the batch, page by page (GET /v1/batches/{id}/results)."""
        after: str | None = None
        while True:
            params: dict[str, Any] = {"limit": RESULTS_PAGE, **({"after": after} if after else {})}
            page = self.client.get(f"/batches/{batch_id}/results", cast_to=object, options={"params": params})
            data = _field(page, "data")
            yield from data
            if not _field(page, "has_more") or not data:
                return
            after = _field(page, "last_id")

    def _succeeded_or_fail(self, batch: Any, expected: int, bad: list[str]) -> None:
        """StepFailed unless the batch completed with every one of its requests succeeded."""
        if batch.status != "completed":
            raise StepFailed(f"batch {batch.id} ended {batch.status}: {_batch_error(batch)}")
        if bad:
            raise StepFailed(
                f"batch {batch.id} completed but requests failed: {len(bad)} of {expected}; first: {bad[0]}"
            )
        self.succeeded += expected

    def summary(self) -> dict[str, Any]:
        """The admin totals of this key's owner (GET /admin/batch/summary?user=...)."""
        assert self.options.admin_key is not None
        admin = self.sdk.OpenAI(
            base_url=self.options.admin_base_url, api_key=self.options.admin_key, timeout=CALL_TIMEOUT_SECONDS
        )
        page = admin.get("/admin/batch/summary", cast_to=object, options={"params": {"user": self.user_id}})
        rows = _field(page, "users")
        if not rows:
            raise StepFailed(f"GET /admin/batch/summary lists no user {self.user_id}")
        return dict(rows[0])

    def describe(self, refused: openai.APIStatusError) -> str:
        """``METHOD /path: HTTP status (code): the gateway's message``."""
        request = refused.response.request
        body = refused.body if isinstance(refused.body, dict) else {}
        message = body.get("message") or refused.response.text[:300] or refused.response.reason_phrase
        code = f" ({body['code']})" if body.get("code") not in (None, "", refused.status_code) else ""
        return f"{request.method} {request.url.path}: HTTP {refused.status_code}{code}: {message}"

    # --- after the run: only what it made ----------------------------------------------------

    def stop_running(self) -> list[str]:
        """Cancel this run's batches that have not ended (best effort), so a failed smoke
        leaves nothing running for a day; answers the ids cancelled."""
        stopped = []
        for batch_id in self.made.batches:
            try:
                if self.client.batches.retrieve(batch_id).status not in FINAL:
                    self.client.batches.cancel(batch_id)
                    stopped.append(batch_id)
            except self.sdk.OpenAIError:
                continue
        return stopped

    def clean_up(self) -> str:
        """Delete this run's batches (their requests and results go with them) and its
        uploaded file, best effort: what could not be deleted is named, not a failure."""
        left = []
        for batch_id in self.made.batches:
            try:
                self.client.delete(f"/batches/{batch_id}", cast_to=object)  # not in the SDK
            except self.sdk.OpenAIError as refused:
                left.append(f"{batch_id} ({_short(refused)})")
        for file_id in self.made.files:
            try:
                self.client.files.delete(file_id)
            except self.sdk.OpenAIError as refused:
                left.append(f"{file_id} ({_short(refused)})")
        deleted = len(self.made.batches) + len(self.made.files) - len(left)
        return f"deleted {deleted} of this run's batches and files" + (
            f"; left {', '.join(left)}" if left else ""
        )

    # --- what the requests say ---------------------------------------------------------------

    def _request(self, custom_id: str) -> dict[str, Any]:
        text = f"{self.options.prompt} ({custom_id})"
        return {
            "custom_id": custom_id,
            "body": {"model": self.options.model, "messages": [{"role": "user", "content": text}]},
        }

    def _metadata(self) -> dict[str, str]:
        return {"batchgw_smoke": self.run_id}


def _line(outcome: str, step: str, seconds: float, detail: str) -> str:
    return f"{outcome:<4}  {step:<15} {seconds:6.2f}s  {detail}"


def _field(answer: object, name: str) -> Any:
    """A field of a JSON object the SDK answered untyped (``cast_to=object``)."""
    if not isinstance(answer, dict) or name not in answer:
        raise StepFailed(f"the gateway's answer has no '{name}': {str(answer)[:200]}")
    return answer[name]


def _result_error(result: dict[str, Any] | None) -> str:
    """One result's failure, as the gateway stored it: ``HTTP status code: message``."""
    if result is None:
        return "missing from the results"
    error = result.get("error") or {}
    if not error:
        return f"{result.get('status')} without an error"
    status = f"HTTP {error['status']} " if error.get("status") else ""
    return f"{status}{error.get('code') or 'error'}: {error.get('message') or ''}".rstrip(": ")


def _line_error(line: dict[str, Any] | None) -> str:
    """One output or error file line's failure."""
    if line is None:
        return "in neither the output nor the error file"
    response = line.get("response") or {}
    error = line.get("error") or (response.get("body") or {}).get("error") or {}
    status = f"HTTP {response['status_code']} " if response.get("status_code") else ""
    return f"{status}{error.get('code') or 'error'}: {error.get('message') or ''}".rstrip(": ")


def _batch_error(batch: Any) -> str:
    """Why a batch ended without completing: its ``error``, or the first of its ``errors``."""
    if batch.status == "expired":
        return "its completion window closed before its requests ran"
    extra = batch.model_extra or {}
    error = extra.get("error") or {}
    if error:
        return f"{error.get('message')} ({error.get('code')})"
    problems = batch.errors.data if batch.errors is not None and batch.errors.data else []
    if problems:
        first = problems[0]
        where = f"line {first.line}: " if first.line else ""
        return f"{where}{first.message} ({first.code})"
    return "the gateway gave no reason"


def _by_custom_id(text: str) -> dict[str, Any]:
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    return {line.get("custom_id"): line for line in lines}


def _short(refused: Exception) -> str:
    status = getattr(refused, "status_code", None)
    return f"HTTP {status}" if status else type(refused).__name__


def _print(line: str) -> None:
    print(line, flush=True)


def smoke(
    ctx: typer.Context,
    base_url: Annotated[
        str | None,
        typer.Option(help="The API base, ending in /v1 (default: the global --base-url, BATCHGW_BASE_URL)."),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(help="A key that may create batches (default: the global --api-key, BATCHGW_API_KEY)."),
    ] = None,
    admin_key: Annotated[
        str | None,
        typer.Option(envvar="BATCHGW_ADMIN_KEY", help="An administrator's key: also check the admin totals."),
    ] = None,
    model: Annotated[str, typer.Option(help="The chat model every request names.")] = "sim-chat",
    prompt: Annotated[
        str, typer.Option(help="Each request's text (its custom_id is appended).")
    ] = "Reply with the single word OK.",
    requests: Annotated[
        int, typer.Option(min=1, help="Requests in each of the inline and file batches.")
    ] = 3,
    cancel_requests: Annotated[
        int, typer.Option(min=1, help="Requests in the batch that is cancelled.")
    ] = 20,
    timeout: Annotated[float, typer.Option(min=1, help="Seconds each batch may take to end.")] = 300.0,
    keep: Annotated[
        bool, typer.Option("--keep", help="Leave this run's batches and file (default: deleted).")
    ] = False,
) -> None:
    """Smoke-test a running batchgw with the official OpenAI Python SDK.

    Lists the models; runs a batch of direct requests and one from an uploaded file to their
    end and checks every request succeeded (the results pages, the output file); cancels a
    third batch and waits for it to end; with --admin-key, checks GET /admin/batch/summary
    counted them. One line per step with its duration. Exit 0 when every step passed; 1 at
    the first failure, naming the step, the HTTP status and the gateway's message.

    It touches nothing it did not make. After a pass it deletes its batches and its file
    (--keep leaves them); after a failure it cancels those still running and leaves them
    all, named, for you to look at.

    Example: batchgw smoke --base-url https://gw.example/v1 --api-key $KEY --admin-key $ADMIN
    """
    parent = ctx.obj
    base_url = base_url or getattr(parent, "base_url", None)
    api_key = api_key or getattr(parent, "api_key", None)
    if not base_url or not api_key:
        raise typer.BadParameter("needs --base-url and --api-key (or BATCHGW_BASE_URL and BATCHGW_API_KEY)")
    if not base_url.rstrip("/").endswith("/v1"):
        raise typer.BadParameter(
            f"the API base ends in /v1, as the SDK takes it; got {base_url}", param_hint="--base-url"
        )
    try:
        import openai  # the SDK is this command's alone: see the module's docstring
    except ImportError:
        print(NO_SDK, file=sys.stderr)
        raise typer.Exit(EXIT_NO_SDK) from None
    options = Options(
        base_url=base_url.rstrip("/"),
        api_key=api_key,
        admin_key=admin_key,
        model=model,
        prompt=prompt,
        requests=requests,
        cancel_requests=cancel_requests,
        timeout=timeout,
        keep=keep,
    )
    if not Smoke(openai, options, out=_print).run():
        raise typer.Exit(EXIT_FAILED)
