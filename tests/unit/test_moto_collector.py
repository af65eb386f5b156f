"""moto's process keeps its full collections short (``local.collector``): what survives one
is frozen, so the next walks only what came since; every ``THAW_SECONDS`` all is thawed, and
a cycle that died frozen is freed by the full collection after.

Each test's collections are counted on its own thread: ``gc.collect()`` does nothing while
another thread's collection is under way (its finalizers let other threads run), and a test
process has other threads (a receiver's, a stack's) that allocate."""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections.abc import Callable, Iterator

import pytest

from local import collector


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> tuple[Node, weakref.ref[Node]]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a, weakref.ref(a)


class Ran:
    """A ``gc.callbacks`` entry counting the full collections that ran on one thread."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.count = 0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and info["generation"] == 2 and threading.get_ident() == self.thread:
            self.count += 1


@pytest.fixture
def collect() -> Iterator[Callable[[], None]]:
    """One full collection that really ran here: ``gc.collect()`` again until one did."""
    ran = Ran()
    gc.callbacks.append(ran)

    def full_collection() -> None:
        before, deadline = ran.count, time.monotonic() + 10
        gc.collect()
        while ran.count == before:
            assert time.monotonic() < deadline, "no full collection ran on this thread in 10 s"
            time.sleep(0.001)  # another thread's collection is under way
            gc.collect()

    try:
        yield full_collection
    finally:
        gc.callbacks.remove(ran)


@pytest.fixture
def clock() -> Iterator[Clock]:
    clock = Clock()
    pauses = collector.install(collector.ShortPauses(clock, thaw_seconds=600))
    try:
        yield clock
    finally:
        collector.uninstall(pauses)


def test_what_survives_a_full_collection_is_frozen_and_not_walked_again(
    clock: Clock, collect: Callable[[], None]
) -> None:
    kept = [Node() for _ in range(1000)]
    collect()
    frozen = gc.get_freeze_count()
    assert frozen >= len(kept)
    # The next full collection walks only the objects made since: few, not the whole heap.
    collect()
    assert len(gc.get_objects(generation=2)) < frozen


def test_a_cycle_that_died_frozen_is_freed_after_the_thaw(clock: Clock, collect: Callable[[], None]) -> None:
    node, alive = cycle()
    collect()  # it survives, frozen
    del node
    collect()
    assert alive() is not None  # dead, but frozen: not walked
    clock.now += 600
    collect()  # this one thaws everything...
    collect()  # ...and the next walks it all
    assert alive() is None


def test_uninstalled_nothing_is_frozen(collect: Callable[[], None]) -> None:
    pauses = collector.install()
    collector.uninstall(pauses)
    collect()
    assert gc.get_freeze_count() == 0
    assert pauses not in gc.callbacks
