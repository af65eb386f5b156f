"""This process's one ledger of each model's slots (``SlotLedger``): the room in its batch
share that no chain holds, handed out to splits (and the split it allows), and which batches
hold and wait for its slots (for ``domain.fairness``), kept up to date with this process's
own takes and releases between reads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

from batchgw.domain.chains import ChainMessage
from batchgw.domain.errors import StorageError
from batchgw.domain.fairness import token_of
from batchgw.scheduling import logger
from batchgw.scheduling.share import BatchShares
from batchgw.scheduling.tuning import TUNING, Tuning
from batchgw.storage.slots import SlotState, SlotStore


class SlotLedger:
    """Each model's slots as this process knows them, from reads of its slot map (one item),
    in two parts:

    - the room no chain holds: the model's batch slots less the slots held, the smaller of
      the last two reads (at most one every ``Tuning.room_read_seconds``), so a chain between
      its stop and its return is not taken for room. Each read's room is handed out once in
      this process, to the splits that take it (``split``); other processes may hand it out
      too, and a chain split off without a slot waits for one like any other;
    - the slot map: which batches hold slots and which wait, as last read (the room's reads
      included: one read serves both), read again for itself when it is
      ``Tuning.board_seconds`` old, and kept up to date with this process's own takes and
      releases between reads.
    """

    def __init__(
        self,
        shares: BatchShares,
        slots: SlotStore,
        clock: Callable[[], float],
        *,
        tuning: Tuning = TUNING,
    ) -> None:
        self._shares = shares
        self._slots = slots
        self._clock = clock
        self._tuning = tuning
        self._room_every, self._map_every = tuning.room_read_seconds, tuning.board_seconds
        self._going_for = tuning.going_seconds
        # The room (its own lock: a read of the held slots is made under it).
        self._room_lock = threading.Lock()
        self._read: dict[str, tuple[float, int]] = {}  # model: (read at, room then)
        self._left: dict[str, int] = {}  # model: room of the last two reads not handed out yet
        # (model, batch): when chains of the batch that ended gave their slots
        self._given: dict[tuple[str, str], list[float]] = {}
        # The slot map.
        self._map_lock = threading.Lock()
        self._seen: dict[str, tuple[float, SlotState]] = {}  # model: (read at, as read or updated)
        self._going: dict[str, list[float]] = {}  # model: when chains waiting in place went for a slot

    # --- the room no chain holds, and splits --------------------------------------------------

    def ways(self, chain: ChainMessage, total: int, chains: int) -> int:
        """The most parts ``chain`` may split into now (``domain.chains``, within the bounds
        of ``Tuning``); 1 when it does not split."""
        tuning = self._tuning
        return chain.ways(
            total,
            chains,
            tuning.max_split_ways,
            min_part=tuning.split_min_part,
            max_factor=tuning.max_split_factor,
        )

    def split(
        self,
        model: str,
        batch_id: str,
        chain: ChainMessage,
        total: int,
        chains: int,
        most: int,
        *,
        with_slots: bool = True,
    ) -> tuple[ChainMessage, ...] | None:
        """``chain`` (of batch ``batch_id``) in as many parts as ``model`` has room for new
        chains, ``most`` parts at most (``ways``): the chain itself first, then the new ones.
        None when there is no room for one: no split. Reads the room when ``room_due``.

        ``with_slots``: each new chain gets a slot of ``model`` taken for it in the slot map
        (the write that judges every slot), its name in the chain's message, for
        ``Tuning.split_slot_seconds``; as many parts as slots were taken. So the room a read
        saw is handed out once across the deployment, not once in every process that read it
        (each chain split off without a slot found the model full and backed off, and the
        slot it was to fill stood idle meanwhile)."""
        taken = self.take(model, batch_id, most - 1)
        slots = self._reserve(model, batch_id, taken) if with_slots and taken else [""] * taken
        if not slots:
            return None
        tuning = self._tuning
        parts = chain.split(
            total,
            chains,
            ways=1 + len(slots),
            min_part=tuning.split_min_part,
            max_factor=tuning.max_split_factor,
        )
        assert parts is not None  # ``ways`` allowed as many
        kept, *new = parts
        return kept, *(replace(part, slot=slot) for part, slot in zip(new, slots, strict=True))

    def _reserve(self, model: str, batch_id: str, count: int) -> list[str]:
        """Up to ``count`` slots of ``model`` taken for new chains of ``batch_id``: their tokens
        (fewer, or none, when the slot map has less room than the reads said)."""
        cap = self._shares.share(model).slots
        seconds = self._tuning.split_slot_seconds
        tokens: list[str] = []
        for _ in range(count):
            now, token = self._clock(), token_of(batch_id, SlotStore.new_token())
            try:
                grant = self._slots.acquire(model, token, cap=cap, now=now, lease_seconds=seconds)
            except StorageError:
                logger.warning("no slot taken for a split", extra={"model": model}, exc_info=True)
                break
            if not grant.granted:
                break
            self.took(model, token, now + seconds)
            tokens.append(token)
        return tokens

    def room_due(self, model: str) -> bool:
        """Whether ``take`` reads the table now (else it answers at once)."""
        read = self._read.get(model)
        return read is None or self._clock() - read[0] >= self._room_every

    def may_take(self, model: str, batch_id: str) -> bool:
        """Whether ``take`` could hand out a unit now: a read is due, or room from the last
        reads or from a chain of ``batch_id`` that ended is left. Read without the lock (a
        read of the table may hold it): an answer a moment stale only moves a split to the
        chain's next request. When False, a chain need not leave its event loop to ask."""
        return (
            self.room_due(model) or self._left.get(model, 0) > 0 or bool(self._given.get((model, batch_id)))
        )

    def read_room(self, model: str) -> None:
        """Read the room now if that is due (what ``take`` would read first): a chain reads it
        ahead, beside the writes that record an answer, so that its split finds it read."""
        with self._room_lock:
            if self.room_due(model):
                self._look_room(model)

    def take(self, model: str, batch_id: str | None = None, most: int = 1) -> int:
        """Up to ``most`` units of ``model``'s room that are left (one a chain of ``batch_id``
        gave first, then the reads'), each handed out once: how many (0: none)."""
        with self._room_lock:
            key = (model, batch_id or "")
            given = [at for at in self._given.pop(key, []) if self._clock() - at < self._room_every]
            taken = 0
            if given:
                self._given[key] = given[1:]
                taken = 1
            if taken < most:
                if self.room_due(model):
                    self._look_room(model)
                more = max(0, min(most - taken, self._left.get(model, 0)))
                self._left[model] = self._left.get(model, 0) - more
                taken += more
            return taken

    def give(self, model: str, batch_id: str) -> None:
        """One unit of ``model``'s room, from a chain of batch ``batch_id`` in this process
        that ended for good with its slot in hand: free at once for a split of another of
        that batch's chains (the batch's end runs on as many chains as it had), not only
        from the reads that confirm it two reads later. Taken once, before any read's room;
        not taken within ``room_read_seconds``, it is left to the reads (another chain may
        hold it by then)."""
        with self._room_lock:
            self._given.setdefault((model, batch_id), []).append(self._clock())

    def _look_room(self, model: str) -> None:
        now = self._clock()
        try:
            state = self._slots.read(model)
        except StorageError:
            room = 0
        else:
            self.saw(model, state)  # the slot map as read: no read of its own for a while
            room = max(0, self._shares.share(model).slots - state.running(now))
        last = self._read.get(model)
        recent = last is not None and now - last[0] <= 2 * self._room_every
        self._left[model] = min(room, last[1]) if recent and last is not None else 0
        self._read[model] = (now, room)

    # --- the slot map: which batches hold and wait for slots ---------------------------------

    def map_due(self, model: str) -> bool:
        """Whether ``look`` reads the table now (else it answers at once)."""
        seen = self._seen.get(model)
        return seen is None or self._clock() - seen[0] >= self._map_every

    def look(self, model: str, *, fresh: bool = False) -> SlotState:
        """The model's slot map, as read at most ``board_seconds`` ago (``fresh``: read now).
        Unreadable: as last seen (nobody waits, if never)."""
        if fresh or self.map_due(model):
            try:
                self.saw(model, self._slots.read(model))
            except StorageError:
                logger.warning("slot map unreadable", extra={"model": model}, exc_info=True)
                with self._map_lock:
                    self._seen.setdefault(model, (self._clock(), SlotState({}, 0.0)))
        return self._seen[model][1]

    def last(self, model: str) -> SlotState:
        """The model's slot map as last seen, read or not (never reads: nobody waits, if
        never seen)."""
        seen = self._seen.get(model)
        return SlotState({}, 0.0) if seen is None else seen[1]

    def going(self, model: str, slots: int) -> bool:
        """Whether one more chain of this process that waits in place for a slot of
        ``model`` goes for one now: the model's batch ``slots`` less those held (as last
        seen) less the chains of this process that went for one in the last
        ``going_seconds`` and do not hold it yet (``arrived``). True once per unit of
        room so seen; the other chains wait on, instead of each making its way to the slot
        write for the one slot (a mark, a claim, the write refused, the claim given back)."""
        with self._map_lock:
            now = self._clock()
            gone = self._still_going(model, now)
            seen = self._seen.get(model)
            held = 0 if seen is None else seen[1].running(now)
            go = held + len(gone) < slots
            self._going[model] = [*gone, now] if go else gone
            return go

    def arrived(self, model: str) -> None:
        """A chain that went for a slot of ``model`` (``going``) holds it now: the board
        counts it among the holders (counted as going as well, it would hold the room of
        another chain back until ``going_seconds`` had passed)."""
        with self._map_lock:
            self._going[model] = self._still_going(model, self._clock())[1:]  # the oldest that counts

    def _still_going(self, model: str, now: float) -> list[float]:
        """When the chains of this process that went for a slot of ``model`` and still count
        as going went, oldest first (the lock held)."""
        return [at for at in self._going.get(model, []) if now - at < self._going_for]

    def saw(self, model: str, state: SlotState) -> None:
        """The slot map as a read or a write of this process just returned it."""
        with self._map_lock:
            self._seen[model] = (self._clock(), state)

    def took(self, model: str, token: str, until: float) -> None:
        self._change(model, lambda holders: holders.__setitem__(token, until))

    def let_go(self, model: str, token: str) -> None:
        self._change(model, lambda holders: holders.pop(token, None))

    def _change(self, model: str, change: Callable[[dict[str, float]], object]) -> None:
        with self._map_lock:
            seen = self._seen.get(model)
            if seen is None:
                return
            at, state = seen
            holders = dict(state.holders)
            change(holders)
            self._seen[model] = (at, replace(state, holders=holders))
