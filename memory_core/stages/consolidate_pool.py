"""Consolidation with the partitions' compute in worker processes and one DuckDB writer.

Why: clustering and mining are mostly Python (under the GIL) and numpy on one BLAS thread, so
the threads runner's two workers kept ~1.3 of the 2 cores busy at 1M episodes (BENCHMARKS.md,
s30: the DuckDB statements of one thread also wait on the other's). Here each partition is
split at the boundary the stages draw (``cluster.stage.read_cluster_state`` /
``compute_clusters`` / ``write_clusters``, ``mine.stage.read_mine_state`` / ``compute_mining``
/ ``write_mining``):

* the calling process (the only one that opens DuckDB) checks the ledger, reads the
  partition's stored state (clusters, members, recorded parameters, unit fingerprints,
  extracted claims) and hands it, as plain data, to a worker;
* the worker reads the partition's episodes and vectors from Lance, clusters and mines, and
  returns the rows to write (no DuckDB in workers: a process holding the file locks every
  other process out of it);
* the caller writes each partition as ``consolidate_partition`` does, in plan order, under
  the stage ledger, so a crash or a retry converges exactly as on the threads path (the
  compute writes nothing anywhere). Several partitions share one transaction
  (``PARTITIONS_PER_COMMIT``; ``_CommitGroup``): the writer is this path's critical path, and a
  commit per partition was ~1 s of its ~12 at 1M episodes; a crash redoes at most that group.

Partitions are read ahead of the one being written (``_AHEAD`` beyond the workers, a commit
group's more when they add to stored clusters), so the workers keep computing while the
caller writes. Workers are started with "spawn" (never
fork a process that holds DuckDB, Lance and Prefect threads); each pays the imports of the
stages (~1.3 CPU s; lancedb's ~3 more are avoided by reading Lance through pylance alone,
``stores/lance_read.py``), which is why the flow uses this path only for big nights
(``RunnerConfig.processes_from_episodes``: 500k episodes by default).
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

import pyarrow as pa

from memory_core.config import Settings
from memory_core.context import Partition, RunContext
from memory_core.crash import crash_point
from memory_core.gc_pause import gc_paused
from memory_core.stages.cluster import stage as cluster_stage
from memory_core.stages.cluster.stage import (
    ClusterOutcome,
    ClusterResult,
    ClusterState,
    compute_clusters,
    read_cluster_state,
    write_clusters,
)
from memory_core.stages.mine import stage as mine_stage
from memory_core.stages.mine.stage import (
    MinedPartition,
    MineState,
    StagedMining,
    compute_mining,
    finish_mining,
    read_mine_state,
    settle_twins,
    stage_mining,
)
from memory_core.stages.partitions import active_episodes_where
from memory_core.stages.shared_state import SharedState, read_shared_state
from memory_core.stages.stage_ledger import Done, LedgeredWork, record_done
from memory_core.stores import Stores
from memory_core.stores.candidates import upsert_candidate_groups
from memory_core.stores.clusters import save_new_clusters
from memory_core.stores.lance import LanceStore
from memory_core.stores.lance_read import LanceReader
from memory_core.stores.ledger import ledger_done
from memory_core.stores.mine_units import save_partitions_units

__all__ = ["WORKER_ENVIRONMENT", "PartitionState", "consolidate_in_processes"]


def _now() -> datetime:
    """The wall clock the ledger keeps a partition's start and finish by."""
    return datetime.now(UTC)


_AHEAD = 2  # partitions read and queued beyond one per worker: no worker waits on a write
# ... and a commit group's more while the partitions add to stored clusters (an incremental
# night): a group's flush (~0.45 s at 1M) took longer than the workers' four partitions in
# flight, so they idled through it and the writer waited for them after it (~2.4 s of the 1M
# 1% night's pool, BENCHMARKS.md s45). Such a partition's result is small (its new members
# and its candidates); a first night's (every member, every candidate) keeps to ``_AHEAD``.

# What clustering and mining read of a partition's active episodes, in one scan: each stage
# scanned them on its own (~5 ms a scan of 10k episodes, BENCHMARKS.md s44)
_SCAN_COLUMNS = sorted({*cluster_stage.SCAN_COLUMNS, *mine_stage.SCAN_COLUMNS})

# glibc's malloc arenas in a worker, unless the environment says otherwise. Why: lance's scan
# threads, polars' and OpenBLAS's pools each get an arena of their own (up to 8 per core), and
# what a partition frees in one stays resident there: a worker's peak grew to ~550 MB (a 100k
# home's partitions; 557-574 MB each at 1M, the tree over 2.6 GB) against ~450 MB with two
# arenas (415-440 MB at 1M), for the same CPU (BENCHMARKS.md, s34). glibc reads it when the
# process starts, so it is set in the spawned worker's environment; mallopt() from the
# initializer came too late (the imports made the arenas).
WORKER_ENVIRONMENT = {"MALLOC_ARENA_MAX": "2"}
_SPAWN_ENVIRONMENT = threading.Lock()

# The writer's session spans the whole night here (the threads path's spans a batch of
# partitions), and until DuckDB checkpoints, every row the night's commits wrote stays in
# this process's memory too: at 1M it grew ~2.5 MB a partition to ~300 MB (in-memory table
# data and ART index), the flow process's peak 732 MB. A checkpoint each time the WAL passes
# this bounds it (peak 578 MB, ~3 checkpoints a 1M night; BENCHMARKS.md s34), against the
# session default's 1 GB that keeps checkpoints out of small sessions' commits.
WRITER_CHECKPOINT = "128MB"

# Partitions whose writes share one transaction (each with its ledger entry, all or nothing).
# A 1% night at 1M committed 100 times, ~1 s of the one writer's ~12 (BENCHMARKS.md s42).
PARTITIONS_PER_COMMIT = 10
# ... unless they add this many cluster members: big writes (a first night's 10k members and
# evidence rows a partition) gain nothing from sharing a commit, and a group the workers wait
# on while it is finished left them idle (the 1M first night ~2 s slower, BENCHMARKS.md s42)
GROUP_NEW_MEMBERS = 2_000


@dataclass
class PartitionState:
    """What a worker needs from DuckDB to compute one partition."""

    cluster: ClusterState
    mine: MineState


@dataclass
class _Computed:
    """A worker's answer for one partition, and the seconds each stage's compute took."""

    cluster: ClusterOutcome
    mined: MinedPartition
    seconds: dict[str, float]


def read_partition_state(
    stores: Stores, partition: Partition, shared: SharedState | None = None
) -> PartitionState:
    """The partition's stored state both stages start from (DuckDB reads only); ``shared``:
    its small parts as read once for the night."""
    return PartitionState(
        cluster=read_cluster_state(stores, partition, shared.cluster if shared else None),
        mine=read_mine_state(stores, partition, shared.mine if shared else None),
    )


# ---- worker side: one Lance handle and the settings per process ---------------------------

_worker: dict[str, Any] = {}


def _start_worker(settings_data: dict[str, Any], parent: int) -> None:
    """Per worker process: the settings and a Lance handle, and a watch on the parent (a
    SIGKILLed parent, as the crash harness does, must not leave workers behind).

    What the imports and this setup made is then moved out of the cyclic collector's reach
    (``gc.freeze``): it lives as long as the worker, and every full collection walked it
    again. With the pauses of ``_compute``, collections went from ~9% of a partition's compute
    to ~1% (a worker-like process, BENCHMARKS.md s36)."""
    settings = Settings.model_validate(settings_data)
    _worker["settings"] = settings
    # pylance alone: the worker only scans, and lancedb's import was most of its start
    _worker["lance"] = LanceReader(
        settings.lance_uri, storage_options=settings.stores.storage_options
    )

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
    gc.collect()
    gc.freeze()


def _compute(ctx: RunContext, partition: Partition, state: PartitionState, *,
             recluster: bool) -> _Computed:  # fmt: skip
    """Cluster, then mine, one partition from Lance and ``state`` (in a worker process), the
    cyclic collector paused (``memory_core.gc_pause``: one partition's garbage at most waits
    for it)."""
    settings: Settings = _worker["settings"]
    lance: LanceStore = _worker["lance"]
    t0 = time.perf_counter()
    with gc_paused():
        scanned = None
        if not recluster and state.cluster.members.num_rows:
            # one scan for both stages (a first batch or a rebuild reads all the vectors too)
            where = active_episodes_where(partition)
            scanned = lance.scan("episodes", where=where, columns=_SCAN_COLUMNS)
        cluster = compute_clusters(lance, settings.cluster, ctx, partition, state.cluster,
                                   recluster=recluster, steps=settings.steps,
                                   scanned=scanned)  # fmt: skip
        t1 = time.perf_counter()
        clustering = cluster.result.clustering
        assert clustering is not None  # every compute path sets it
        mined = compute_mining(lance, settings, partition, state.mine, clustering, scanned)
    cluster.result.clustering = None  # the writer needs the rows to save, not the state again
    seconds = {"cluster": t1 - t0, "mine": time.perf_counter() - t1}
    return _Computed(cluster=cluster, mined=mined, seconds=seconds)


# ---- caller side: the one DuckDB writer ---------------------------------------------------


@contextmanager
def _worker_environment() -> Iterator[None]:
    """``WORKER_ENVIRONMENT`` (what the user has not set) in this process's environment while
    workers are spawned: ``spawn`` starts them with it, and no hook gives a pool's workers an
    environment of their own. Restored after; the lock keeps two pools of one process from
    restoring each other's."""
    with _SPAWN_ENVIRONMENT:
        added = {k: v for k, v in WORKER_ENVIRONMENT.items() if k not in os.environ}
        os.environ.update(added)
        try:
            yield
        finally:
            for key in added:
                os.environ.pop(key, None)


class _Staged(NamedTuple):
    """A partition of a commit group, written up to its candidates' upsert."""

    key: Any  # the caller's (its index in the plan)
    unit: LedgeredWork
    compute_s: dict[str, float]  # the worker's seconds per stage
    clustered: ClusterResult
    mining: StagedMining
    cluster_s: float  # the writer's seconds per step
    staged_s: float


class _CommitGroup:
    """The writes of a commit group's partitions (inside its transaction): each partition's in
    ``consolidate_partition``'s order, with its crash points, except that the group shares
    statements where their fixed cost was paid per partition: the candidates are upserted in
    one call (``candidates.upsert_candidate_groups``) between the partitions' reads and their
    finishing writes, and after those the unit state (``save_partitions_units``), the
    watermarks and the ledger entries (``stage_ledger.record_done``) go in one statement each,
    the ledger's last as its protocol needs. Partitions never share a candidate, a unit or a
    ledger entry (all name tenant and namespace), so the stored rows are the per-partition
    calls' (tests/stages/test_consolidate_pool.py).

    A partition's mining is staged (and a recluster's clusters written) as soon as it is
    ``add``-ed, so the workers keep computing the next ones meanwhile; only the incremental
    clusters' save (``cluster_store.save_new_clusters``: one for the group, its statements'
    fixed cost was paid per partition, BENCHMARKS.md s43), the twins' check against the store
    (``mine.stage.settle_twins``: one read for the group, s44), the upsert and the finishing
    writes wait for the group (``flush``). Staging whole groups first made the workers idle
    while the writer wrote ten partitions (a first night at 1M: +2 s, BENCHMARKS.md s42).

    The ledger is checked before a partition is computed (``refill``), not again here:
    nothing else writes the ledger while this process holds DuckDB and the run its lease."""

    def __init__(
        self, stores: Stores, settings: Settings, ctx: RunContext,
        shared: SharedState | None = None,
    ) -> None:  # fmt: skip
        self.stores, self.settings, self.ctx = stores, settings, ctx
        self.shared = shared  # the night's shared state, read before any partition's writes
        self.staged: list[_Staged] = []
        self.new_members = 0
        self.new_clusters: list[tuple[pa.Table, pa.Table]] = []  # saved together at flush

    def full(self, per_commit: int) -> bool:
        """Whether the group holds ``per_commit`` partitions or ``GROUP_NEW_MEMBERS``."""
        return len(self.staged) >= max(1, per_commit) or self.new_members >= GROUP_NEW_MEMBERS

    def add(self, key: Any, unit: LedgeredWork, computed: _Computed) -> None:
        t0 = time.perf_counter()
        clustered = write_clusters(self.stores, self.ctx, unit.partition, computed.cluster,
                                   new_rows=self.new_clusters)  # fmt: skip
        t1 = time.perf_counter()
        crash_point("partition.clustered")
        mining = stage_mining(self.stores, self.settings, unit.partition, computed.mined,
                              self.shared.mine if self.shared else None)  # fmt: skip
        self.new_members += computed.cluster.result.new_members
        self.staged.append(_Staged(key, unit, computed.seconds, clustered, mining, t1 - t0,
                                   time.perf_counter() - t1))  # fmt: skip

    def flush(self) -> list[tuple[Any, dict[str, Any]]]:
        """Save the group's new clusters, upsert its candidates, finish each partition; (key,
        result) in order."""
        stores, ctx, staged = self.stores, self.ctx, self.staged
        t2 = time.perf_counter()
        save_new_clusters(stores.meta, self.new_clusters)
        settle_twins(stores, [item.mining for item in staged])
        upserted: dict[int, dict[str, int]] = {}
        if not ctx.dry_run:
            # partitions never share an episode; the tables' buffers are not copied
            pins = pa.concat_tables([item.mining.mined.pins for item in staged])
            hashes = {k: v for item in staged for k, v in item.mining.mined.hashes.items()}
            upserted = upsert_candidate_groups(
                stores.meta, {i: item.mining.candidates for i, item in enumerate(staged)},
                run_id=ctx.run_id, now=ctx.now, pins=pins, hashes=hashes,
            )  # fmt: skip
        share = (time.perf_counter() - t2) / max(1, len(staged))
        out, done, unit_saves = [], [], []
        for i, item in enumerate(staged):
            if not ctx.dry_run:
                crash_point("mine.upserted")
            started = _now()
            t3 = time.perf_counter()
            mined = finish_mining(stores, ctx, item.unit.partition, item.mining, upserted.get(i),
                                  unit_saves=unit_saves)  # fmt: skip
            finished_s = time.perf_counter() - t3
            crash_point("partition.mined")
            spent = item.compute_s
            result = {
                "partition": item.unit.partition.key,
                "skipped": False,
                "cluster": item.clustered.as_dict(),
                "mine": mined.as_dict(),
                # compute (in a worker) + write (here), per stage, as the threads path
                # reports; the group's upsert shared evenly
                "seconds": {
                    "cluster": round(spent["cluster"] + item.cluster_s, 3),
                    "mine": round(spent["mine"] + item.staged_s + share + finished_s, 3),
                },
            }
            done.append(Done(item.unit, result, started, _now()))
            out.append((item.key, result))
        # the group's unit state, watermarks and ledger entries, one statement each
        save_partitions_units(stores.meta, unit_saves, run_id=ctx.run_id, now=ctx.now)
        record_done(stores.meta, done, run_id=ctx.run_id, now=ctx.now)
        self.staged, self.new_members, self.new_clusters = [], 0, []
        return out


def _ready() -> int:
    """A worker's first task when the pool is warmed (``ComputePool.warm``): nothing, so that
    the submit spawns the worker and its start (imports, ``_start_worker``) runs now."""
    return os.getpid()


class ComputePool:
    """The worker processes that compute a night's partitions (``consolidate_in_processes``).

    Why a pool of its own, started apart from the night's partitions: a worker's start is
    ~0.75-1.3 CPU s of imports, which the writer used to wait for at the partitions' start
    (~1 s of the 1M 1% night, BENCHMARKS.md s45). ``warm`` spawns the workers at once, so a
    flow can start them before the steps that come first (embed, index, extract, the plan) and
    find them ready; the caller that makes the pool shuts it down
    (``consolidate_in_processes`` only shuts down a pool it made).
    """

    def __init__(self, settings: Settings, workers: int) -> None:
        self.workers = workers
        self._submitted = 0
        self._executor = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_start_worker,
            initargs=(settings.model_dump(mode="json"), os.getpid()),
        )

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        # the executor spawns a worker on each of its first ``workers`` submits (none idle
        # yet) and never after; only those change the environment, which other threads may
        # be reading (an HTTP client's proxy lookup iterates it)
        spawning = self._submitted < self.workers
        with _worker_environment() if spawning else nullcontext():
            future = self._executor.submit(fn, *args, **kwargs)
        self._submitted += 1
        return future

    def warm(self) -> ComputePool:
        """Spawn every worker now (each runs its start while the caller goes on)."""
        while self._submitted < self.workers:
            self.submit(_ready)
        return self

    def shutdown(self, *, wait: bool = True) -> None:
        """Stop the workers; ``wait=False`` (on an error) drops what is queued."""
        self._executor.shutdown(wait=wait, cancel_futures=not wait)

    def __enter__(self) -> ComputePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown(wait=exc[0] is None)


def consolidate_in_processes(
    stores: Stores,
    settings: Settings,
    ctx: RunContext,
    units: list[LedgeredWork],
    *,
    recluster: bool,
    workers: int,
    per_commit: int = PARTITIONS_PER_COMMIT,
    pool: ComputePool | None = None,
) -> list[dict[str, Any]]:
    """``consolidate_partition`` for every unit, in order, with the compute in ``workers``
    processes and ``per_commit`` partitions' writes in each transaction; the results in
    ``units``' order (the same results, and the same stored rows, as the threads path).

    ``pool``: workers started before (``ComputePool.warm``), built from the same settings;
    left running for its caller to shut down. Without one, a pool is made and shut down
    here."""
    if pool is None:
        with ComputePool(settings, workers) as own:
            return consolidate_in_processes(stores, settings, ctx, units, recluster=recluster,
                                            workers=workers, per_commit=per_commit,
                                            pool=own)  # fmt: skip
    workers = pool.workers
    results: list[dict[str, Any] | None] = [None] * len(units)
    todo = iter(enumerate(units))
    window: deque[tuple[int, LedgeredWork, Future[_Computed]]] = deque()
    ahead = _AHEAD

    def refill() -> None:
        nonlocal ahead
        while len(window) < workers + ahead:
            nxt = next(todo, None)
            if nxt is None:
                return
            index, unit = nxt
            part = unit.partition
            if (unit.stage, part.key, unit.input_hash) in done:
                results[index] = {"partition": part.key, "skipped": True}
                continue
            state = read_partition_state(stores, part, shared)
            adds = not recluster and state.cluster.members.num_rows > 0
            ahead = _AHEAD + per_commit if adds else _AHEAD
            future = pool.submit(_compute, ctx, part, state, recluster=recluster)
            window.append((index, unit, future))

    with stores.meta.session(checkpoint_threshold=WRITER_CHECKPOINT):
        # before any partition's writes, so each partition's part is what its own read gives
        shared = read_shared_state(stores, [unit.partition for unit in units])
        done = ledger_done(stores.meta, [(u.stage, u.partition.key, u.input_hash) for u in units])
        refill()
        while window:
            # one commit, each partition's ledger entry in it; no cyclic collection meanwhile
            with stores.meta.atomic(), gc_paused():
                group = _CommitGroup(stores, settings, ctx, shared)
                while window and not group.full(per_commit):
                    index, unit, future = window.popleft()
                    computed = future.result()
                    refill()  # the next partitions go out before this one's writes
                    group.add(index, unit, computed)
                for index, result in group.flush():
                    results[index] = result
    return [r for r in results if r is not None]
