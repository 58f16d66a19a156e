"""``gc_paused`` pauses the cyclic collector for its block only, and never re-enables one that
an outer pause (or the caller) had disabled."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from memory_core.gc_pause import gc_frozen, gc_paused


def test_the_collector_is_paused_inside_and_restored_after_even_on_error() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner pause leaves the outer one in force
    assert gc.isenabled()
    try:
        with gc_paused():
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert gc.isenabled()


def test_a_collector_disabled_by_the_caller_stays_disabled() -> None:
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """The test process's own freeze (conftest) lifted for the test, made again after."""
    gc.unfreeze()
    try:
        yield
    finally:
        gc.freeze()


@pytest.mark.usefixtures("unfrozen")
def test_gc_frozen_keeps_what_exists_out_of_collections_and_restores_after() -> None:
    # (the frozen count only falls meanwhile, as frozen objects are freed: only a freeze adds)
    held = [[] for _ in range(10)]
    assert gc.get_freeze_count() == 0
    with gc_frozen():
        frozen = gc.get_freeze_count()
        assert frozen >= len(held)  # what existed at the start, ``held`` among it
        made = [[] for _ in range(1000)]  # what a second freeze would add
        with gc_frozen():  # nested: the outer freeze stands, nothing more is frozen
            assert 0 < gc.get_freeze_count() < frozen + len(made)
        assert 0 < gc.get_freeze_count() < frozen + len(made)
    assert gc.get_freeze_count() == 0
    try:
        with gc_frozen():
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert gc.get_freeze_count() == 0


@pytest.mark.usefixtures("unfrozen")
def test_gc_frozen_still_collects_the_cycles_the_block_makes() -> None:
    class Node:
        pass

    with gc_frozen():
        cycle = Node()
        cycle.other = Node()  # type: ignore[attr-defined]
        cycle.other.other = cycle  # type: ignore[attr-defined]
        gone = weakref.ref(cycle)
        del cycle
        gc.collect()
        assert gone() is None


@pytest.mark.usefixtures("unfrozen")
def test_gc_frozen_leaves_a_freeze_made_elsewhere_as_it_is() -> None:
    gc.freeze()  # as a pool worker does for good
    try:
        with gc_frozen():
            pass
        assert gc.get_freeze_count() > 0  # not unfrozen by the block's end (that makes it 0)
    finally:
        gc.unfreeze()
