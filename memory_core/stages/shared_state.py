"""The small parts of every partition's stored state, read once for a night of many partitions.

Why: each partition's consolidation read its recorded cluster parameters (a scan of the whole
audit log with a JSON extraction, a log that only grows), its unit fingerprints, its stored
semantic ids and its extracted facts: ~1-1.5 ms each at 1M, once per partition
(BENCHMARKS.md s46). Read once before any partition's writes, each partition's part is what its
own reads would give: only that partition's consolidation writes those rows, and a night holds
the pipeline lease. Clusters and members, most of a partition's state, stay per partition.
"""

from __future__ import annotations

from dataclasses import dataclass

from memory_core.stages.cluster.selection import Choice
from memory_core.stages.cluster.stage import recorded_choices
from memory_core.stages.mine.stage import SharedMineState, read_shared_mine_state
from memory_core.stores import Stores

__all__ = ["SharedState", "read_shared_state"]


@dataclass(frozen=True)
class SharedState:
    """The recorded cluster parameters by (tenant, namespace) and ``SharedMineState``."""

    choices: dict[tuple[str, str], Choice | None]
    mine: SharedMineState


def read_shared_state(stores: Stores) -> SharedState:
    return SharedState(choices=recorded_choices(stores), mine=read_shared_mine_state(stores))
