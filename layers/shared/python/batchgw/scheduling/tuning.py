"""Every timing and policy constant of scheduling, in one value, each with one line of why.

The figures behind them (the runs they were measured in, when, and on what) are in
``docs/design/scheduling.md``. What an administrator changes at run time is a setting
(``config.settings``), not a field here: these change with a release.
"""

from __future__ import annotations

from dataclasses import dataclass

from batchgw.domain import chains, interactive


@dataclass(frozen=True, slots=True)
class Tuning:
    # --- the chain's own loop -----------------------------------------------------------------
    # Time kept in hand at the end of an invocation to send the chain's continuation.
    segment_margin_seconds: float = 5.0
    # How long a chain that walked all its indexes waits, slot in hand, for a retry due soon.
    chain_retry_wait_seconds: float = 30.0
    # A chain at a request prepare has not written reads the batch again after this long...
    write_wait_seconds: float = 0.05
    # ...doubled each time the request is still not written, up to this.
    write_wait_max_seconds: float = 1.0
    # A chain claims its next request once this share of the recent call length has passed
    # (a claim sent as a call starts queues beside the other chains' ends, and holds them)...
    claim_ahead_share: float = 0.25
    # ...and at most this long after its call started.
    claim_ahead_wait_max_seconds: float = 1.0

    # --- admission: a model full, yielded, given way or paused --------------------------------
    # A chain that finds its model full waits twice as long each time in a row, up to this
    # factor: each visit costs a read, a claim, a slot write and a message.
    slot_wait_max_factor: int = 4
    # One that yielded to interactive traffic waits at most this factor: bursts end.
    yield_wait_max_factor: int = 2
    # A chain waiting in place looks for room as often as a process reads the batch shares.
    room_look_seconds: float = 0.25
    # How long in all a chain that yielded waits in place before it leaves for a round
    # (its invocation's billed time against a message and its reads per round).
    yield_in_place_seconds: float = 30.0
    # Its further rounds in place last at least this long (each reads its batch and notes
    # it waiting again).
    yield_round_seconds: float = 5.0

    # --- the share: interactive reports and adaptive limits -----------------------------------
    # How old the interactive load a process goes by may be: a burst queues at the model at
    # most this long before batch work gives way (one Query four times a second at most).
    shares_max_age_seconds: float = 0.25
    # The adaptive limits change at most once per cooldown: read once a second at most.
    limits_max_age_seconds: float = 1.0
    # How long a process goes by the last load it read when a read fails, before the load
    # counts as unknown (a transient error stops no batch work).
    unreadable_grace_seconds: float = 3.0
    # How long the most interactive requests seen in flight keeps counting: busy traffic's
    # dips of a request or two do not hand its slots to batch work (``domain.interactive.peak``)...
    peak_hold_seconds: float = interactive.PEAK_HOLD_SECONDS
    # ...unless the reads saw the model quiet this long: a burst's end does.
    quiet_seconds: float = interactive.QUIET_SECONDS

    # --- the room: slots no chain holds, and the slot map -------------------------------------
    # How often a process reads how many of a model's slots batch chains hold: room is taken
    # once two reads saw it, so this sets how soon splits fill what interactive traffic left.
    room_read_seconds: float = 0.5
    # How old a process's view of a model's slot map may be when a chain asks whether its
    # batch gives way (a Get per model every 2 s at most).
    board_seconds: float = 2.0
    # How long a chain that went for a slot it saw free counts against that room for the
    # process's other chains (about its way to the slot write), unless it holds it sooner.
    going_seconds: float = 0.5

    # --- splits (the rule is ``domain.chains``; these are its bounds) -------------------------
    # A chain splits only with at least this many indexes left for each part.
    split_min_part: int = chains.SPLIT_MIN_PART
    # The most parts a chain splits into at once: one round fills room a burst left.
    max_split_ways: int = chains.MAX_SPLIT_WAYS
    # A chain's stride grows by splits to at most this many times the batch's first one.
    max_split_factor: int = chains.MAX_SPLIT_FACTOR

    # --- backpressure -------------------------------------------------------------------------
    # How often a process adds the healthy answers it saw to a constrained model's limit.
    growth_seconds: float = 1.0

    # --- pacing: the call starts of one process -----------------------------------------------
    # The share of the recent call length over which one process's chains' starts spread.
    spread_share: float = 0.5
    # The longest spacing, whatever the recent call length (one long call lengthens it).
    spacing_max_seconds: float = 0.1
    # How much the latest call's length moves the recent call length.
    length_weight: float = 0.2


# What every process runs with (tests pass their own ``Tuning`` instead).
TUNING = Tuning()
