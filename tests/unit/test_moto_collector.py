"""moto's process keeps its full collections short (``local.collector``): what survives one
is frozen, so the next walks only what came since; every ``THAW_SECONDS`` all is thawed, and
a cycle that died frozen is freed by the full collection after."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

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


@pytest.fixture
def clock() -> Iterator[Clock]:
    clock = Clock()
    pauses = collector.install(collector.ShortPauses(clock, thaw_seconds=600))
    try:
        yield clock
    finally:
        collector.uninstall(pauses)


def test_what_survives_a_full_collection_is_frozen_and_not_walked_again(clock: Clock) -> None:
    kept = [Node() for _ in range(1000)]
    gc.collect()
    frozen = gc.get_freeze_count()
    assert frozen >= len(kept)
    # The next full collection walks only the objects made since: few, not the whole heap.
    gc.collect()
    assert len(gc.get_objects(generation=2)) < frozen


def test_a_cycle_that_died_frozen_is_freed_after_the_thaw(clock: Clock) -> None:
    node, alive = cycle()
    gc.collect()  # it survives, frozen
    del node
    gc.collect()
    assert alive() is not None  # dead, but frozen: not walked
    clock.now += 600
    gc.collect()  # this one thaws everything...
    gc.collect()  # ...and the next walks it all
    assert alive() is None


def test_uninstalled_nothing_is_frozen() -> None:
    pauses = collector.install()
    collector.uninstall(pauses)
    gc.collect()
    assert gc.get_freeze_count() == 0
    assert pauses not in gc.callbacks
