"""Benchmarks of the gateway on the local stack: ratios measured in one run, never timed tests.

Reproduce with ``make bench`` (``.venv/bin/python -m bench.run``; ``--n`` or ``BENCH_N``
sets N, default 2,000; ``--retry-n``, ``--skip-retry``; ``--help``). It takes a few
minutes: 2,000 requests at 16 in flight and 0.5 s each is about 63 s per run, and there
are four runs. The figures are printed and written to ``bench/last.json`` (git-ignored).

One local stack (``local.run.LocalStack``, free ports, 2 worker processes) runs with
``BATCH_MODEL_CONCURRENCY=16`` and the simulator's base latency at 500 ms; every
process that uses ``batchgw.storage.aws.get_clients()`` counts its AWS calls into a temporary
``BATCHGW_AWS_CALLS_DIR``. A 32-request warm-up batch runs first (its workers' first
invocations are cold starts, which the measured runs then do not pay). Then:

1. **Dispatch** (issue 2). A batch of N distinct chat requests is created on the API
   (``sk-local-alice``); the clock starts just before the POST. The batch is polled every
   50 ms: the first poll showing ``request_counts.completed >= 1`` is the *time to first
   result*. Once it is final every result page is read (``limit=1000``) and checked: one
   result per request, in order, completed, with the simulator's echo. The clock stops
   after the last page. Then the *direct* client sends the same N bodies straight to the
   simulator's ``/v1/chat/completions``: one ``httpx.AsyncClient`` (16 connections at
   most), a semaphore of 16 around each call. It runs after the gateway, on the same
   simulator: it touches nothing else, so neither run leaves work for the other.
   ``dispatch_ratio`` = gateway time / direct time (budget 1.3; PASS/FAIL is printed, the
   exit code is not affected). ``ideal_seconds`` = ceil(N/16) x 0.5 s, the floor both
   approach. The direct client costs a few ms of CPU per request on this 2-core machine
   (printed as ``direct_cpu_ms_per_request``); at 32 requests/s that is well under a core.
2. **AWS calls per item** on the success path: the sum over every process of the calls
   made between just before the create and just after the last result page (each
   snapshot taken 1.5 s later, once the per-process files have flushed), divided by N.
   It includes the api handler's calls (create and result pages), the lifecycle
   function's (run inside the moto process) and the workers'. The benchmark's own status
   polls are not an item's cost: what one poll costs is measured after the run (20 polls)
   and subtracted; ``aws_calls_per_item_with_polls`` keeps them. The local pollers' SQS
   ReceiveMessage / DeleteMessageBatch are counted when the pollers use the shared
   session (``local.poller`` does): idle poller slots long-poll 20 s as Lambda's mapping does, a cost
   per second rather than per item, which is included. moto's Step Functions interpreter's
   internal calls are never counted. Budget: 6.
3. **Retries** (issue 3): a second batch (``--retry-n``, default N) where every 10th
   request carries ``[[sim status=503 fail=2]]``, so it fails twice with 503 and then
   succeeds; the gateway retries with its real backoff (``BATCH_RETRY_BASE_SECONDS``,
   default 5 s, doubling, up to 20 % jitter on top). The direct client runs the same requests and
   retries 503s with the same rule (``batchgw.domain.decisions.backoff_seconds``, same settings),
   sleeping outside its semaphore as the gateway frees the slot while a request waits.
   The simulator must have seen exactly N + 2 x N/10 requests for the gateway's run.
4. **Cold start** (``bench.imports``, also ``python -m bench.imports``): ``import
   functions.api.handler`` and ``import boto3`` alone in fresh interpreters with the stack's
   environment, interleaved, each less a bare ``python -c pass``, medians of 5:
   ``api_import_ratio`` = handler / boto3 (budget 1.5). Beside it, the fixed stack's floor
   (boto3, Powertools' resolver and Logger, one pydantic model) measured the same way:
   ``api_import_floor_ratio`` = floor / boto3, the part of the ratio that is not ours;
   ``api_import_model_floor_ratio``, the same without the resolver (boto3, Logger, a model).
   Issue 53's names: ``api_import_over_boto3`` (the ratio again) and
   ``api_import_own_over_boto3`` = (handler - floor) / boto3, the handler's own part (goal 0.3).
5. **Scale** (issue 15), each on a stack of its own after the first: ``cap64``, 4,000
   requests at 2,000 ms under a model cap of 64 against the direct client with 64 in flight
   (``dispatch_ratio_cap64``, budget 1.2); ``throughput``, 2,000 requests with the simulator
   answering at once under a cap of 64: requests per second through the whole stack, create
   to last result page (``throughput_rps``, goal 60), and the CPU each kind of process spent
   per request. ``--skip-scale`` skips both.
6. **Validation** (``bench.validation``, after the stack has stopped): a 50,000-line file
   through the file validator against one ``json.loads`` per line, and peak memory.
7. **Cost** (``bench.cost``, also ``make cost``; ``--skip-cost``): on a stack of its own whose
   moto records every request, a batch of 500 requests of the named workload (1 KB bodies,
   1 KB answers, 2 s upstream); the recording is replayed to bill DynamoDB by item sizes, and
   with the invocations' measured durations and the functions' memory it gives
   ``cost_per_million_usd`` and its breakdown (prices: ``bench.prices``, dated); beside it,
   ``cost_per_million_usd_provisioned``: the same usage with the tables on provisioned
   capacity (``-c tableCapacity=provisioned``) used at its target utilization, and under
   ``cost_provisioned`` the figure at the scale-in threshold, the monthly floor and the units
   per request that size the capacity.
8. **moto's CPU** (``bench.moto_cpu``, in a child process; ``--skip-moto-cpu``): a request's
   DynamoDB calls, shaped as the gateway makes them, on moto's in-memory backend, in
   alternating rounds with the local patches on that path (``local.moto_patches`` 5, 7, 9,
   10 and 11) off and on: moto's handler CPU per request, and ``moto_patch_cpu_ratio`` =
   on / off.

Not part of ``make bench``: ``python -m bench.worker_memory`` (about a minute) prints the
worker's peak memory with as many chains as one invocation receives and every answer near
the size limit, beside the worker function's configured memory (what right-sizing it needs).

Also printed, to find where time goes: the gateway's timeline (create call, in_progress
seen, first upstream request, last request in flight, final status seen, results read),
slot occupancy (``/_sim/stats`` ``in_flight`` sampled every 100 ms, mean / 16, over the
whole run and over the window from the first request to the last one in flight) and what
it implies, the idle time a slot adds to each request (500 ms x (1/occupancy - 1)); the
upstream requests per 10 s of both runs (a stall shows as a run of zeros); moto's
latency for one consistent GetItem (p50/p90, idle and every 250 ms during the gateway
run: each call on the per-item path waits about that long); the
simulator's request counts and ``max_in_flight``; calls by operation and by process; and
the CPU seconds each stack process used during the gateway run.

The working tree may change while the benchmark runs (the stack's children import the
code when they start, the api adapter again for each new execution environment); to
measure one version, run it from a clean checkout of that commit.

The exit code is 1 only when a result was lost, duplicated or wrong, or the simulator saw
an unexpected number of requests (a correctness failure), never because of a ratio.
"""
