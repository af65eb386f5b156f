"""Bounded reads: a files page, a batch's delete and a results page read what they answer
(and one more), counted in DynamoDB Query calls and items, however much is stored."""

from __future__ import annotations

import asyncio
import base64
import json
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from batchgw.api import batches, files
from batchgw.api import results as results_api
from batchgw.api.ids import cursor_key, new_id
from batchgw.api.params import ANSWER_LIMIT
from batchgw.config.catalog import Catalog
from batchgw.config.settings import Settings
from batchgw.deps import Deps, build_deps
from batchgw.domain import codec
from batchgw.domain.batch import BatchRecord, shard_totals
from batchgw.domain.chains import decode
from batchgw.domain.errors import BadRequest, Conflict
from batchgw.domain.files import FileRecord
from batchgw.domain.principal import Principal
from batchgw.domain.request import RequestEnd, RequestRecord, request_id
from batchgw.domain.states import BatchStatus, RequestStatus
from batchgw.run import attempt, lifecycle
from batchgw.run.chain import run_message
from batchgw.storage import aws
from batchgw.storage.blobs import BlobStore, UrlSigning
from batchgw.storage.dynamo import Table
from botocore.credentials import Credentials
from moto import mock_aws

from local import moto_patches
from local.simulator import Simulator
from tests.integration.conftest import FAKE_AWS_ENV, body_of, chat_request, make_deps, receive_all
from tests.support import FakeClock

pytestmark = pytest.mark.usefixtures("aws_env")

ALICE = Principal(user_id="user-alice", role="internal", key_id="key_local_alice")
BOB = Principal(user_id="user-bob", role="internal", key_id="key_local_bob")
LEASE_SECONDS = 60
BIG_REQUESTS = 600  # of the 50,000: requests whose response is ~30 KB packed


# --- counting what DynamoDB reads ----------------------------------------------------------


@dataclass
class QueryCall:
    table: str
    index: str | None
    evaluated: int  # ScannedCount: what the Query's Limit counts
    returned: int
    bytes: int  # of the items returned, as DynamoDB sizes them (names and values)
    attributes: frozenset[str]  # the attribute names the items returned carry


@dataclass
class Reads:
    """Every DynamoDB Query made through the process's clients, with what it read."""

    calls: list[QueryCall] = field(default_factory=list)

    def on(self, table: str) -> list[QueryCall]:
        return [call for call in self.calls if call.table == table]

    def clear(self) -> None:
        self.calls.clear()


@pytest.fixture
def reads() -> Iterator[Reads]:
    seen = Reads()
    events = aws.get_clients().events

    def before(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["bounded_reads"] = (params["TableName"], params.get("IndexName"))

    def after(parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        table, index = context["bounded_reads"]
        items = parsed.get("Items", [])
        size = sum(_item_bytes(item) for item in items)
        names = frozenset(name for item in items for name in item)
        seen.calls.append(
            QueryCall(table, index, int(parsed.get("ScannedCount", 0)), len(items), size, names)
        )

    events.register("before-parameter-build.dynamodb.Query", before)
    events.register("after-call.dynamodb.Query", after)
    try:
        yield seen
    finally:
        events.unregister("before-parameter-build.dynamodb.Query", before)
        events.unregister("after-call.dynamodb.Query", after)


def _item_bytes(item: dict[str, Any]) -> int:
    """An item's size as DynamoDB counts it, near enough: its names and its values."""
    total = 0
    for name, value in item.items():
        ((kind, raw),) = value.items()
        if kind == "B":
            size = len(raw)
        elif kind in ("S", "N"):
            size = len(str(raw).encode())
        else:  # a map, a list or a set: its JSON, near enough
            size = len(json.dumps(raw, default=str))
        total += len(name.encode()) + size
    return total


# --- GET /v1/files ----------------------------------------------------------------------------


def _file(deps: Deps, owner: str, made_at: float, *, purpose: str = "batch", **extra: Any) -> FileRecord:
    file_id = new_id("file-", made_at)
    return FileRecord(
        id=file_id,
        owner=owner,
        bytes=10,
        created_at=int(made_at),
        created_key=cursor_key("file-", file_id) or "",
        filename="in.jsonl",
        purpose=purpose,
        expires_at=int(deps.clock() + 86400),
        sha256="0" * 64,
        **extra,
    )


def _store_files(deps: Deps, records: list[FileRecord]) -> None:
    Table(aws.get_clients().dynamodb, deps.settings.files_table).put_many(r.to_item() for r in records)


def test_a_files_page_reads_its_files_and_one_more_past_thousands_deleted_in_the_way(
    sim: Simulator, reads: Reads
) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock)
    now = clock()
    kept = [_file(deps, ALICE.user_id, now - 10_000 + i) for i in range(3000)]
    deleted = [_file(deps, ALICE.user_id, now - 1000 + i * 0.5) for i in range(1000)]  # the newest
    _store_files(deps, kept + deleted + [_file(deps, BOB.user_id, now - 5 + i) for i in range(5)])
    for record in deleted:
        files.delete_file(deps, ALICE, record.id)
    newest_first = [r.id for r in reversed(kept)]
    table = deps.settings.files_table
    reads.clear()

    page = files.list_files(deps, ALICE, {"limit": ["20"]})

    assert [f["id"] for f in page["data"]] == newest_first[:20] and page["has_more"] is True
    assert [(c.index, c.evaluated) for c in reads.on(table)] == [("by_owner", 21)]
    reads.clear()

    following = files.list_files(deps, ALICE, {"limit": ["20"], "after": [page["last_id"]]})

    assert [f["id"] for f in following["data"]] == newest_first[20:40]
    assert [(c.index, c.evaluated) for c in reads.on(table)] == [("by_owner", 21)]
    reads.clear()

    oldest = files.list_files(deps, ALICE, {"limit": ["20"], "order": ["asc"], "after": [kept[99].id]})

    assert [f["id"] for f in oldest["data"]] == [r.id for r in kept[100:120]]
    assert [(c.index, c.evaluated) for c in reads.on(table)] == [("by_owner", 21)]


def test_a_files_page_steps_past_files_it_cannot_show_and_says_when_the_list_ends(
    sim: Simulator, reads: Reads
) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock)
    now = clock()
    shown = [_file(deps, ALICE.user_id, now - 100 + i) for i in range(3)]
    hidden = [
        _file(deps, ALICE.user_id, now - 50, pending=True),  # an upload never completed
        _file(deps, ALICE.user_id, now - 40, purpose="batch_output"),
        *(_file(deps, ALICE.user_id, now - 30 + i) for i in range(5)),
    ]
    hidden[2:] = [replace(r, expires_at=int(now)) for r in hidden[2:]]  # expired, not yet removed
    _store_files(deps, shown + hidden)
    reads.clear()

    page = files.list_files(deps, ALICE, {"limit": ["2"], "purpose": ["batch"]})

    assert [f["id"] for f in page["data"]] == [shown[2].id, shown[1].id] and page["has_more"] is True
    # the first step (3 files) met only files it cannot show; the next asks for more at once
    assert [c.evaluated for c in reads.on(deps.settings.files_table)] == [3, 7]
    rest = files.list_files(deps, ALICE, {"limit": ["2"], "after": [page["last_id"]]})
    assert [f["id"] for f in rest["data"]] == [shown[0].id] and rest["has_more"] is False
    assert files.list_files(deps, ALICE, {"purpose": ["assistants"]})["data"] == []


def test_a_deleted_file_leaves_the_owner_index_yet_a_page_still_goes_on_from_it(sim: Simulator) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock)
    now = clock()
    older, newer = _file(deps, ALICE.user_id, now - 20), _file(deps, ALICE.user_id, now - 10)
    # a result file's id is not time-ordered: its place in the list is its record's
    result_id = "file-" + "ab" * 16
    result_file = replace(
        older, id=result_id, created_key=f"{int((now - 15) * 1000):015d}#{result_id}", purpose="batch_output"
    )
    _store_files(deps, [older, newer, result_file])

    files.delete_file(deps, ALICE, result_file.id)
    kept_until = int(now) + 30 * 86400
    deps.files.mark_deleted(result_file.id, ttl=kept_until)  # as a purge would again: no change

    tombstone = Table(aws.get_clients().dynamodb, deps.settings.files_table).get(
        {"pk": {"S": result_file.id}}
    )
    assert tombstone is not None and "created_key" not in tombstone and tombstone["deleted"] is True
    assert deps.files.get(result_file.id) == replace(result_file, deleted=True, ttl=kept_until)
    assert [f["id"] for f in files.list_files(deps, ALICE, {})["data"]] == [newer.id, older.id]
    after_it = files.list_files(deps, ALICE, {"after": [result_file.id]})
    assert [f["id"] for f in after_it["data"]] == [older.id]
    with pytest.raises(BadRequest):
        files.list_files(deps, BOB, {"after": [result_file.id]})


# --- a batch of 50,000 requests -------------------------------------------------------------


def _big_batch(deps: Deps, total: int = 50_000, *, ended: bool = True) -> BatchRecord:
    """A batch in progress with ``total`` requests, all succeeded (the first BIG_REQUESTS
    with a ~30 KB packed response each, the rest with a small one), or all queued."""
    now = deps.clock()
    batch_id = new_id("batch_", now)
    record = BatchRecord(
        id=batch_id,
        owner=ALICE.user_id,
        status=BatchStatus.IN_PROGRESS,
        endpoint="/v1/chat/completions",
        created_at=int(now),
        created_key=cursor_key("batch_", batch_id) or "",
        total=total,
        models=("sim-chat",),
        shards=8,
        chains=8,
    )
    Table(aws.get_clients().dynamodb, deps.settings.batches_table).put_many([record.to_item()])
    deps.batches.put_shards(batch_id, shard_totals(total, 8))
    noise = random.Random(7)
    big = base64.b64encode(noise.randbytes(22_000)).decode()  # hardly compresses

    def item(index: int) -> dict[str, Any]:
        response = {"id": f"chatcmpl-{index}", "text": big if index < BIG_REQUESTS else "ok"}
        end = RequestEnd(
            RequestStatus.SUCCEEDED, ended_at=now, status_code=200, response_packed=codec.pack(response)
        )
        request = RequestRecord.new(batch_id, index, f"r-{index}", "sim-chat", codec.pack({"n": index}))
        return {**request.to_item(), **(end.stored_fields() if ended else {})}

    Table(aws.get_clients().dynamodb, deps.settings.requests_table).put_many(item(i) for i in range(total))
    return record


def test_deleting_a_batch_of_50000_requests_reads_its_run_marks_alone(sim: Simulator, reads: Reads) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock)
    batch = _big_batch(deps, ended=False)
    deps.batches.mark_run(batch.id, "worker-1", until=clock() + LEASE_SECONDS)  # a chain runs
    table = deps.settings.batches_table
    reads.clear()

    with pytest.raises(Conflict):
        batches.delete_batch(deps, ALICE, batch.id)

    marks = [(c.index, c.evaluated) for c in reads.on(table) if c.attributes == {"until"}]
    assert marks == [(None, 1)]
    assert not reads.on(deps.settings.requests_table)  # no request was read
    clock.advance(LEASE_SECONDS + 1)  # the worker died: its mark ran out
    reads.clear()

    assert batches.delete_batch(deps, ALICE, batch.id)["deleted"] is True

    assert not reads.on(deps.settings.requests_table)
    assert deps.workflow.purges == [batch.id]  # type: ignore[attr-defined]


def test_a_batch_carries_a_run_mark_while_a_chain_runs_and_none_after(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock, BATCH_MODEL_CONCURRENCY="1")
    created = batches.create_batch(
        deps, ALICE, body_of([chat_request(f"r-{i}", f"hi {i}") for i in range(3)])
    )
    lifecycle.prepare(deps, created["id"])
    (message,) = [decode(raw["Body"]) for raw in receive_all(deps)]
    seen: list[bool] = []
    real_call = attempt.call

    async def watched_call(deps: Deps, batch: Any, *args: Any, **kw: Any) -> Any:
        seen.append(deps.batches.runs_live(batch.id, clock()))
        with pytest.raises(Conflict):  # while a request of it runs
            batches.delete_batch(deps, ALICE, batch.id)
        return await real_call(deps, batch, *args, **kw)

    monkeypatch.setattr(attempt, "call", watched_call)
    assert not deps.batches.runs_live(created["id"], clock())
    asyncio.run(run_message(deps, message, owner="w", deadline=clock() + 900))
    assert seen == [True, True, True]
    assert not deps.batches.runs_live(created["id"], clock())


@dataclass
class StoredBatch:
    """A finished batch of 50,000 requests in a moto of its own, and that moto's resources."""

    settings: Settings
    catalog: Catalog
    batch: BatchRecord

    def reader(self) -> Deps:
        """A test's own wiring to it: its clients are the test's, the ones ``reads`` counts."""
        return build_deps(self.settings, self.catalog, FakeClock())


@pytest.fixture(scope="class")
def stored_batch() -> Iterator[StoredBatch]:
    """One ``_big_batch`` for the tests of a class, which only read it: its moto stays up
    while they run (each test's own ``aws_env`` nests in it, so resets nothing), and ends,
    with its data, after the class's last test."""
    with pytest.MonkeyPatch.context() as env:
        for name, value in FAKE_AWS_ENV.items():
            env.setenv(name, value)
        env.delenv("AWS_ENDPOINT_URL", raising=False)
        moto_patches.apply()
        simulator = Simulator(port=0, backup_port=0).start()  # the catalog's; never called
        try:
            with mock_aws():
                aws.reset_clients()
                deps = make_deps(simulator, FakeClock())
                yield StoredBatch(deps.settings, deps.catalog, _big_batch(deps))
            aws.reset_clients()
        finally:
            simulator.stop()


class TestResultsPages:
    """Both read the one stored batch (``stored_batch``), and write nothing."""

    def test_a_results_page_of_a_50000_request_batch_stops_reading_at_its_byte_cap(
        self, stored_batch: StoredBatch, reads: Reads
    ) -> None:
        deps, batch = stored_batch.reader(), stored_batch.batch
        table = deps.settings.requests_table
        reads.clear()

        page = results_api.results_page(deps, ALICE, batch.id, {"limit": ["1000"]})

        assert isinstance(page, dict) and page["has_more"] is True
        shown = len(page["data"])
        assert 100 < shown < BIG_REQUESTS  # ~40 KB lines: the response's 6 MB cap ends the page
        assert [line["custom_id"] for line in page["data"]] == [f"r-{i}" for i in range(shown)]
        calls = reads.on(table)
        # each step asks for what the bytes left hold at the largest line so far (DynamoDB ends
        # a step at 1 MB too): the page's lines and the one that did not fit, not 1,001 requests
        assert sum(c.evaluated for c in calls) == shown + 1
        assert sum(c.bytes for c in calls) <= ANSWER_LIMIT
        assert not any("req" in c.attributes for c in calls)  # nor are the requests' own bodies
        reads.clear()

        following = results_api.results_page(
            deps, ALICE, batch.id, {"limit": ["1000"], "after": [page["last_id"]]}
        )

        assert isinstance(following, dict)
        assert following["data"][0]["custom_id"] == f"r-{shown}"

    def test_a_results_page_of_a_50000_request_batch_reads_its_lines_and_one_more(
        self, stored_batch: StoredBatch, reads: Reads
    ) -> None:
        deps, batch = stored_batch.reader(), stored_batch.batch
        after = request_id(batch.id, 9_999)
        reads.clear()

        page = results_api.results_page(deps, ALICE, batch.id, {"limit": ["1000"], "after": [after]})

        assert isinstance(page, dict) and page["has_more"] is True
        assert [line["custom_id"] for line in page["data"]] == [f"r-{i}" for i in range(10_000, 11_000)]
        calls = reads.on(deps.settings.requests_table)
        assert sum(c.evaluated for c in calls) == 1001 and len(calls) == 1
        last = results_api.results_page(deps, ALICE, batch.id, {"after": [request_id(batch.id, 49_997)]})
        assert isinstance(last, dict)
        assert [line["custom_id"] for line in last["data"]] == ["r-49998", "r-49999"]
        assert last["has_more"] is False


# --- presigned uploads say when their URL really ends ----------------------------------------


def test_a_presigned_upload_ends_with_its_signing_credentials_and_says_so(sim: Simulator) -> None:
    clock = FakeClock()
    deps = make_deps(sim, clock)
    expiring = Credentials("AKIDEXPIRING", "secret", "token", method="env")
    signing = UrlSigning(
        lambda: expiring,
        margin_seconds=60,
        min_seconds=60,
        clock=lambda: 1_000.0,
        environ={"AWS_CREDENTIAL_EXPIRATION": "1970-01-01T00:36:40Z"},  # 2,200 s: 1,200 s after 1,000
    )
    deps.blobs = BlobStore(aws.get_clients().s3, deps.settings.data_bucket, signing)

    answer = files.presign_upload(deps, ALICE, {"filename": "in.jsonl", "purpose": "batch", "bytes": 10})

    query = parse_qs(urlsplit(answer["upload_url"]).query)
    assert query["X-Amz-Expires"] == ["1140"]
    assert answer["expires_at"] == answer["file"]["created_at"] + 1140


def test_a_run_mark_is_renewed_while_its_call_outlasts_a_lease(sim: Simulator) -> None:
    # Renewed every third of a lease: 2 s leaves a renewal over a second of a busy machine's delay.
    deps = make_deps(sim, time.time, BATCH_LEASE_SECONDS="2", BATCH_UPSTREAM_TIMEOUT_SECONDS="15")
    slow = chat_request("long", "slow [[sim latency_ms=6000]]")
    created = batches.create_batch(deps, ALICE, body_of([slow]))
    lifecycle.prepare(deps, created["id"])
    [message] = receive_all(deps)

    async def run_and_look() -> bool:
        chain = asyncio.create_task(
            run_message(deps, decode(message["Body"]), owner="w", deadline=deps.clock() + 60)
        )
        await asyncio.sleep(4.5)  # the call runs 6 s: well past the mark's first 2 s
        live = await asyncio.to_thread(deps.batches.runs_live, created["id"], deps.clock())
        await chain
        return live

    assert asyncio.run(run_and_look())  # still live: the mark was renewed
    assert not deps.batches.runs_live(created["id"], deps.clock())  # and removed at the end


def test_a_status_filtered_list_reads_a_bounded_number_of_batches_and_says_where_to_go_on(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled batches among 46 in progress: a status filter reads at most LIST_READ_MOST
    of them per page (20 here), answers what it found with ``has_more`` and ``next_after``,
    and following ``next_after`` finds every one -- also the batch a read stopped on (the
    20th and 40th read) and the batch just after it."""
    from batchgw.api import batches as batches_api

    monkeypatch.setattr(batches_api, "LIST_READ_MOST", 20)
    deps = make_deps(sim, FakeClock(), BATCH_MAX_ACTIVE_PER_USER="100")
    body = json.dumps({"requests": [chat_request("a", "hi")]}).encode()
    created = [batches_api.create_batch(deps, ALICE, body)["id"] for _ in range(46)]
    newest_first = sorted(created, key=lambda i: deps.batches.get_record(i).created_key, reverse=True)
    cancelled = [newest_first[i] for i in (19, 20, 39, 45)]
    for batch_id in cancelled:
        batches_api.cancel_batch(deps, ALICE, batch_id)
    found, pages, after = [], 0, None
    while True:
        params = {"status": ["cancelling,cancelled"], **({"after": [after]} if after else {})}
        page = batches_api.list_batches(deps, ALICE, params)
        pages += 1
        found += [b["id"] for b in page["data"]]
        if not page["has_more"]:
            break
        after = page.get("next_after") or page["last_id"]
        assert pages < 10
    assert found == cancelled and pages >= 3  # 46 batches, 20 read per page
