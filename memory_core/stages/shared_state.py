"""The small parts of every partition's stored state, read once for a night of many partitions.

Why: each partition's consolidation read its recorded cluster parameters (a scan of the whole
audit log with a JSON extraction, a log that only grows), its unit fingerprints, its stored
semantic ids and its extracted facts: ~1-1.5 ms each at 1M, once per partition
(BENCHMARKS.md s46); and its clusters, whose centroids share row groups with every other
partition's, so each read decompressed them all (~4 ms at 1M, s47). Read once before any
partition's writes, each partition's part is what its own reads would give: only that
partition's consolidation writes those rows, and a night holds the pipeline lease. Members,
most of a partition's state, stay per partition (a partition's read touches its own rows).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from memory_core.context import Partition
from memory_core.stages.cluster.stage import SharedClusterState, read_shared_cluster_state
from memory_core.stages.mine.stage import SharedMineState, read_shared_mine_state
from memory_core.stores import Stores

__all__ = ["SharedState", "read_shared_state"]


@dataclass(frozen=True)
class SharedState:
    """``SharedClusterState`` and ``SharedMineState``."""

    cluster: SharedClusterState
    mine: SharedMineState


def read_shared_state(stores: Stores, partitions: Iterable[Partition] | None = None) -> SharedState:
    """``partitions``: the night's; the clusters of these alone are held (the other small
    parts are read for every partition)."""
    keys = [(p.tenant_id, p.namespace) for p in partitions] if partitions is not None else None
    return SharedState(
        cluster=read_shared_cluster_state(stores, keys), mine=read_shared_mine_state(stores)
    )
