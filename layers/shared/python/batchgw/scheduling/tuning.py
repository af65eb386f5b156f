"""Every timing and policy constant of scheduling, in one value, each with one line of why.

The figures behind them (the runs they were measured in, when, and on what) are in
``docs/design/scheduling.md``. What an administrator changes at run time is a setting
(``config.settings``), not a field here: these change with a release. The knobs whose best
value depends on the deployment are settings: how long a yielded chain waits in place
(``BATCH_YIELD_IN_PLACE_SECONDS``), how old the interactive load read may be
(``BATCH_SHARE_READ_SECONDS``), and whether call starts are paced (``BATCH_CALL_PACING``).
"""

from __future__ import annotations

from dataclasses import dataclass

from batchgw.domain import adaptive, chains, interactive


@dataclass(frozen=True, slots=True)
class Tuning:
    """Scheduling's constants; each line says why its value (the evidence: the design page)."""

    # --- the chain's own loop -----------------------------------------------------------------
    # Time kept at an invocation's end to send the chain's continuation.
    segment_margin_seconds: float = 5.0
    # A chain at its walk's end waits this long for a retry due soon...
    chain_retry_wait_seconds: float = 30.0
    # ...its slot in hand for a wait this short at most: longer, the slot serves other chains.
    retry_wait_keep_slot_seconds: float = 1.0
    # A chain at a request not written yet reads the batch again after this long...
    write_wait_seconds: float = 0.05
    # ...doubled each time, up to this: prepare writes a batch's requests while its first run.
    write_wait_max_seconds: float = 1.0
    # The claim ahead waits this share of the call length: sent at once, it queues beside ends.
    claim_ahead_share: float = 0.25
    # ...and no longer than this, however long the calls.
    claim_ahead_wait_max_seconds: float = 1.0

    # --- admission: a model full, yielded, given way or paused --------------------------------
    # A full model's wait doubles up to this factor: each visit costs a read, a claim and writes.
    slot_wait_max_factor: int = 4
    # A chain that yielded backs off to this factor only: interactive bursts end.
    yield_wait_max_factor: int = 2
    # A chain waiting in place looks for room as often as the shares are read (by default).
    room_look_seconds: float = 0.25
    # Further rounds in place last this long at least: each reads the batch and notes it waiting.
    yield_round_seconds: float = 5.0

    # --- the share: interactive reports and adaptive limits -----------------------------------
    # Adaptive limits change at most once per cooldown: read once a second at most.
    limits_max_age_seconds: float = 1.0
    # A transient read failure stops no batch work for this long; then the load is unknown.
    unreadable_grace_seconds: float = 3.0
    # Busy traffic's dips of a request or two do not hand its slots to batch work...
    peak_hold_seconds: float = interactive.PEAK_HOLD_SECONDS
    # ...but a burst's end does, once the reads saw the model quiet this long.
    quiet_seconds: float = interactive.QUIET_SECONDS
    # Quiet is this many in flight at most: busy traffic does not stay that low without ending.
    quiet_in_flight: int = interactive.QUIET_IN_FLIGHT
    # Interactive load grows before batch work looks again: this share of it past the first is kept free.
    headroom_share: float = interactive.HEADROOM_SHARE

    # --- the room: slots no chain holds, and the slot map -------------------------------------
    # Room is taken once two reads saw it: this sets how soon splits fill what traffic left.
    room_read_seconds: float = 0.5
    # Whether a batch gives way is judged on a slot map this old at most (a Get per model).
    board_seconds: float = 2.0
    # A chain gone for a slot it saw counts against that room about as long as its way there.
    going_seconds: float = 0.5
    # A split's new chain has the slot taken for it this long to arrive; then it is free again.
    split_slot_seconds: float = 5.0

    # --- splits (the rule is ``domain.chains``; these are its bounds) -------------------------
    # At a batch's end the last chains split down to this many requests each.
    split_min_part: int = chains.SPLIT_MIN_PART
    # One round of splits fills the room a burst left, not two rounds of doubling.
    max_split_ways: int = chains.MAX_SPLIT_WAYS
    # Strides stay within this many times the first: the queue holds that many times W at most.
    max_split_factor: int = chains.MAX_SPLIT_FACTOR
    # A split's new chain starts in the process that split, while fewer than this many chains
    # run there (an invocation's messages, the worker's SQS batch size): through the queue it
    # waited for a free environment, or a cold one. 0: always through the queue.
    chains_beside_most: int = 10

    # --- backpressure (the rule is ``domain.adaptive``; its latency factor is a setting) --------
    # A saturation answer is weighed among this process's answers of the model this recent...
    saturation_window_seconds: float = adaptive.SATURATION_WINDOW_SECONDS
    # ...of this many different requests at least: one request failing again is its own retry's...
    saturation_min_requests: int = adaptive.SATURATION_MIN_REQUESTS
    # ...and this share of the answers: requests failing one by one among healthy ones are not load.
    saturation_min_share: float = adaptive.SATURATION_MIN_SHARE
    # Healthy answers raise a constrained model's limit at most this often (one write).
    growth_seconds: float = 1.0
    # A saturation signal keeps this share of the batch requests running (multiplicative decrease).
    decrease_factor: float = adaptive.DECREASE
    # One overload answers many requests at once: one decrease per model this often at most.
    cooldown_seconds: float = adaptive.COOLDOWN_SECONDS
    # A constrained model still runs this many batch requests, whose healthy answers raise it again.
    limit_floor: float = adaptive.FLOOR
    # Time raises the limit this much a second: a model gone quiet after an overload is not held back.
    recovery_per_second: float = adaptive.RECOVERY_PER_SECOND
    # The first answers' plain mean is the unloaded latency: the latency signal counts after them.
    latency_warmup: int = adaptive.LATENCY_WARMUP
    # Each answer's weight in the recent latency: a trend moves it, not one answer.
    latency_average_weight: float = adaptive.LATENCY_AVERAGE_WEIGHT
    # An answer counts as this many times the recent latency at most: a lone slow one is no trend.
    latency_outlier_factor: float = adaptive.LATENCY_OUTLIER_FACTOR
    # The unloaded latency is forgotten this fast, per answer: slowly, so a sustained rise shows.
    baseline_drift: float = adaptive.BASELINE_DRIFT
    # Rising is this much above the unloaded latency too: the worker's own delays are in what it measures.
    latency_min_gap_ms: float = adaptive.LATENCY_MIN_GAP_MS
    # ...for this many answers in a row: the worker's own delays tripped a shorter, lower signal.
    latency_sustained: int = adaptive.LATENCY_SUSTAINED

    # --- pacing: the call starts of one process -----------------------------------------------
    # Starts spread over this share of the call length: ends then come one after another.
    spread_share: float = 0.5
    # One long call lengthens the recent length: the spacing stays this short at most.
    spacing_max_seconds: float = 0.1
    # How much the latest call moves the recent call length.
    length_weight: float = 0.2

    # --- the promise: when a batch would end (``forecast``) -----------------------------------
    # A model's pace is its batch answers of this recent a stretch: older ones say little of now.
    pace_window_seconds: float = 600.0
    # ...at most this many of the newest (a read of the request log across batches, per shard).
    pace_sample: int = 200
    # ...read again by a process at most this often: a read is two queries per shard, and a
    # pace over ten minutes moves little in ten seconds.
    pace_read_seconds: float = 10.0
    # A slot's next call starts this long after an answer (a chain's record and claim: 42.5 ms).
    call_gap_seconds: float = 0.05
    # A new batch's first call starts this long after its create (validation and the first claim).
    first_call_seconds: float = 1.0


# What every process runs with (tests pass their own ``Tuning`` instead).
TUNING = Tuning()
