"""Nightly consolidation of partitions: cluster then mine, under the stage ledger.

``consolidation_plan`` says what each (tenant, namespace) partition's input is (its episodes,
the config that shapes clustering and mining, and its extracted facts) as one hash;
``consolidate_partition`` runs cluster and mine for one partition through
:func:`memory_core.stages.stage_ledger.run_once`, so a rerun with the same input skips it and a
crash before its ledger entry redoes it. The nightly flow maps the second over the first.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from memory_core.config import Settings
from memory_core.context import RunContext
from memory_core.crash import crash_point
from memory_core.models import content_hash
from memory_core.stages.cluster.stage import cluster_partition
from memory_core.stages.mine.stage import mine_partition
from memory_core.stages.partitions import STAGE, PartitionWork, plan_partitions
from memory_core.stages.shared_state import SharedState
from memory_core.stages.stage_ledger import LedgeredWork, run_once
from memory_core.stores import Stores
from memory_core.stores.extract import fact_digests
from memory_core.stores.maintenance import fold_new_rows

__all__ = [
    "STAGE",
    "PlannedPartition",
    "config_key",
    "consolidate_partition",
    "consolidation_plan",
    "index_episodes",
]

# The columns of every partition scan's filter (tenant, namespace, status; ids for the
# vectors of new episodes): their scalar indices must cover the day's appends.
_SCAN_INDEXED = ["tenant_id", "namespace", "status", "episode_id"]


def config_key(settings: Settings, *, recluster: bool) -> str:
    """The part of every partition's input hash that the configuration contributes."""
    return content_hash(
        [
            settings.cluster.model_dump(),
            settings.policy.model_dump(),
            settings.claims.model_dump(),
            settings.extract.model_dump(),
            recluster,
        ]
    )


def index_episodes(stores: Stores) -> int:
    """Fold the episodes appended since the last fold into the scalar indices the partition
    scans filter on, before any partition reads; the rows folded.

    Every partition is read by filtered scans (cluster: two, mine: one), and a scan reads the
    filter columns of every fragment no index covers: a day's ingest appends one fragment per
    write, so without this the night's ~3 scans per partition each walk all of them (0.06 CPU
    s a scan at 100 partitions of 200 episodes, 0.005 s after). Derived data: a crash before
    or after it changes nothing a rerun sees."""
    if "episodes" not in stores.lance.table_names():
        return 0
    return fold_new_rows(stores.lance, "episodes", _SCAN_INDEXED)


@dataclass(frozen=True)
class PlannedPartition:
    """One partition to consolidate: what is new in it, and its ledger identity."""

    work: PartitionWork
    unit: LedgeredWork


def consolidation_plan(
    stores: Stores, settings: Settings, *, recluster: bool
) -> list[PlannedPartition]:
    """Every partition with active episodes, in a stable order, with its input hash.

    A partition whose extracted facts changed gets a new hash, so it is mined again even
    without new episodes."""
    key = config_key(settings, recluster=recluster)
    facts_state = fact_digests(stores.meta)
    planned = []
    for work in plan_partitions(stores):
        part = work.partition
        facts = facts_state.get((part.tenant_id, part.namespace), "")
        unit = LedgeredWork(
            stage=STAGE,
            partition=part,
            input_hash=work.input_hash(key + facts),
            watermark_at=work.watermark_to,
        )
        planned.append(PlannedPartition(work=work, unit=unit))
    return planned


def consolidate_partition(
    stores: Stores,
    settings: Settings,
    ctx: RunContext,
    unit: LedgeredWork,
    *,
    recluster: bool,
    shared: SharedState | None = None,
) -> dict[str, Any]:
    """Cluster, then mine counterexamples and claims, for one partition, at most once per
    input (the ledger) and with the watermark moved only after both committed. ``shared``:
    the small parts of the partitions' state as read once for the night
    (``stages/shared_state.py``), read before this partition's writes."""
    partition = unit.partition

    def work() -> dict[str, Any]:
        t0 = time.perf_counter()
        with stores.meta.session():
            clustered = cluster_partition(
                stores, settings.cluster, ctx, partition, recluster=recluster,
                steps=settings.steps, shared=shared.cluster if shared else None,
            )  # fmt: skip
            t1 = time.perf_counter()
            crash_point("partition.clustered")
            mined = mine_partition(
                stores, settings, ctx, partition, clustering=clustered.clustering,
                shared=shared.mine if shared else None,
            )  # fmt: skip
        t2 = time.perf_counter()
        crash_point("partition.mined")
        return {
            "cluster": clustered.as_dict(),
            "mine": mined.as_dict(),
            "seconds": {"cluster": round(t1 - t0, 3), "mine": round(t2 - t1, 3)},
        }

    # one DuckDB open for the ledger check, the work, the watermark and the ledger entry (an
    # open costs ~0.02 CPU s and more wall: four of them were most of a small partition's
    # night), and one transaction: the steps' ~10 commits (clusters, candidates, unit state,
    # audit rows, watermark, ledger entry) become one, in the protocol's order, so a crash
    # anywhere in the partition leaves nothing of it and the rerun redoes it
    with stores.meta.session(), stores.meta.atomic():
        return run_once(stores.meta, unit, work, run_id=ctx.run_id, now=ctx.now)
