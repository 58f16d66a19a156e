"""The partitions' worker processes, started when a night starts and taken up by its task.

Why: a worker's start is ~0.75-1.3 CPU s of imports, and the one DuckDB writer waited for
the workers' first results at the partitions' start (~1 s of the 1M 1% night, BENCHMARKS.md
s45). Started with the run instead, they import beside the embed, index and extract tasks and
the plan, and the partitions start on warm workers. Those steps slow down beside them (they
are CPU-bound too): through the flow the gain was ~0.3-1 s of a ~13 s night, not the whole
wait.

Which nights: the plan decides (``nightly.compute_processes``: the episodes of the partitions
with new ones), but it comes after those steps, so the workers start when the home holds
``runner.processes_from_episodes`` episodes or more (a count of the Lance table's rows), on the
threads runner; a night whose plan then asks for none shuts them down at once (a big home's
night with nothing new pays their start in the background). Tasks take plain values (the flow
runs on Dask and Ray too), so the pool waits here, by run id, for the task to take it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from memory_core.config import Settings
from memory_core.errors import StoreError
from memory_core.stages.consolidate_pool import ComputePool
from memory_core.stores import Stores

__all__ = ["expected_processes", "release", "take", "warm_workers"]

_pools: dict[str, ComputePool] = {}
_lock = threading.Lock()


def expected_processes(settings: Settings, episodes: int) -> int:
    """Worker processes a night on a home of ``episodes`` episodes will likely use (the
    plan's ``compute_processes`` counts only partitions with new episodes, never more)."""
    runner = settings.runner
    if runner.kind != "threads" or runner.processes_from_episodes == 0:
        return 0
    return runner.max_workers if episodes >= runner.processes_from_episodes else 0


@contextmanager
def warm_workers(run_id: str, stores: Stores, settings: Settings) -> Iterator[int]:
    """Start the run's workers if it will likely use them; yields their number (0: none).
    Whatever the run left of them is shut down when it ends."""
    workers = expected_processes(settings, _episodes(stores))
    if workers:
        with _lock:
            _pools[run_id] = ComputePool(settings, workers).warm()
    try:
        yield workers
    finally:
        release(run_id)


def _episodes(stores: Stores) -> int:
    """The home's episodes (active or not: a count of rows, from the table's metadata)."""
    try:
        return stores.lance.count("episodes")
    except StoreError:  # no table yet, or the store unreachable: the night's own steps say so
        return 0


def take(run_id: str, workers: int) -> ComputePool | None:
    """The run's started pool if it has ``workers`` workers (the caller shuts it down)."""
    with _lock:
        pool = _pools.get(run_id)
        if pool is None or pool.workers != workers:
            return None
        return _pools.pop(run_id)


def release(run_id: str) -> None:
    """Shut down the run's pool if no task took it."""
    with _lock:
        pool = _pools.pop(run_id, None)
    if pool is not None:
        pool.shutdown(wait=False)
