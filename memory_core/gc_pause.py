"""Pausing Python's cyclic garbage collector around bulk work that makes no cycles, and keeping
what a run starts with out of its walks.

Why: the collector runs after every ~700 net allocations, and each full collection walks every
object the process holds. Bulk stages allocate millions of short-lived objects (validated
records, a partition's rows as lists and tuples) that reference counting frees on its own, so
those walks find almost nothing: ~20% of ingest validation time, ~9% of a partition's
clustering and mining in a worker (BENCHMARKS.md, s36). Pausing it for the block and letting
it resume afterwards (it catches up on its next threshold) keeps what it would collect bounded
by one block's garbage.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_frozen", "gc_paused"]

_frozen = threading.Lock()
_frozen_depth = 0


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic collection inside the block; restored as it was (an outer pause stays)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextmanager
def gc_frozen() -> Iterator[None]:
    """What the process holds when the block starts is left out of every collection until it
    ends (``gc.freeze``); what the block makes is collected as usual.

    Why: a nightly run's process holds ~0.4M objects before its first stage (Prefect, the
    libraries, their caches), and each full collection the run's bulk work triggered walked all
    of them again: ~1 s of a 1M 1% night (BENCHMARKS.md s43). Reference counting still frees
    what they drop; only cyclic garbage among them waits for the block's end. The outermost
    block of the process freezes and unfreezes; one entered while something else had frozen
    objects (a pool worker freezes its imports for good) leaves that freeze as it is."""
    global _frozen_depth
    with _frozen:
        counted = _frozen_depth > 0 or gc.get_freeze_count() == 0
        if counted:
            if _frozen_depth == 0:
                gc.freeze()
            _frozen_depth += 1
    try:
        yield
    finally:
        if counted:
            with _frozen:
                _frozen_depth -= 1
                if _frozen_depth == 0:
                    gc.unfreeze()
