"""Pausing Python's cyclic garbage collector around bulk work that makes no cycles.

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
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]


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
