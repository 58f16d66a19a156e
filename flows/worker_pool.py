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

__all__ = ["processes_for", "release", "take", "warm_workers"]

_pools: dict[str, ComputePool] = {}
_lock = threading.Lock()


def _configured(settings: Settings) -> bool:
    """Whether the runner computes big nights in worker processes at all: only the threads
    runner (Dask and Ray workers are processes already), only with a threshold."""
    runner = settings.runner
    return runner.kind == "threads" and runner.processes_from_episodes > 0


def processes_for(settings: Settings, episodes: int) -> int:
    """Worker processes for a night whose partitions hold ``episodes`` episodes (0: the
    runner's tasks do them in-thread): ``max_workers`` from ``processes_from_episodes``, below
    it the workers' start (imports) would outweigh the night's compute. The plan counts the
    partitions with new episodes (``nightly.compute_processes``); a night's start, before the
    plan, counts the whole home."""
    if not _configured(settings):
        return 0
    runner = settings.runner
    return runner.max_workers if episodes >= runner.processes_from_episodes else 0


@contextmanager
def warm_workers(run_id: str, stores: Stores, settings: Settings) -> Iterator[int]:
    """Start the run's workers if it will likely use them; yields their number (0: none).
    Whatever the run left of them is shut down when it ends. The home's episodes are counted
    only when the runner may use processes (a count reads the table's metadata, remote on an
    object store)."""
    workers = processes_for(settings, _episodes(stores)) if _configured(settings) else 0
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
