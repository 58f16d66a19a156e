"""The stage-ledger and watermark protocol: run one stage on one partition at most once per input.

This is what makes a killed night converge on rerun. The order is the whole protocol:

1. the ledger has (stage, partition, input hash) as done -> skip, write nothing;
2. otherwise do the work (itself idempotent: deterministic ids, upserts);
3. advance the partition's watermark (only after the work committed, never before: a crash
   during the work must leave the episodes counted as new);
4. record the ledger entry last: it makes a rerun skip the partition, so anything written
   after it would be lost by a crash in between.

A crash anywhere before step 4 redoes the partition, which writes nothing twice. Library code,
no orchestrator: flows call :func:`run_once`, and so can the CLI or a test.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from memory_core.context import Partition
from memory_core.crash import crash_point
from memory_core.stores.ledger import (
    StageEntry,
    Watermark,
    ledger_has,
    record_stages,
    set_watermarks,
)
from memory_core.stores.meta import MetaStore

__all__ = ["Done", "LedgeredWork", "record_done", "run_once"]


@dataclass(frozen=True)
class LedgeredWork:
    """What identifies one unit of partition work in the ledger, and how far it reaches.

    ``watermark_at`` is the newest input transaction time the work covers (None: the work
    moves no watermark)."""

    stage: str
    partition: Partition
    input_hash: str
    watermark_at: datetime | None = None


def run_once(
    meta: MetaStore,
    unit: LedgeredWork,
    work: Callable[[], dict[str, Any]],
    *,
    run_id: str,
    now: datetime,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> dict[str, Any]:
    """``work()``'s result for ``unit``, or ``{"partition": key, "skipped": True}`` when the
    ledger says this input is done. ``now`` is the run's clock (the watermark's update time);
    ``clock`` gives the wall-clock start and finish the ledger keeps."""
    key = unit.partition.key
    if ledger_has(meta, stage=unit.stage, partition_key=key, input_hash=unit.input_hash):
        return {"partition": key, "skipped": True}
    started = clock()
    result = {"partition": key, "skipped": False, **work()}
    record_done(meta, [Done(unit, result, started, clock())], run_id=run_id, now=now)
    return result


@dataclass(frozen=True)
class Done:
    """A unit's finished work (steps 1-2 of the protocol), its result and wall-clock span."""

    unit: LedgeredWork
    result: dict[str, Any]
    started_at: datetime
    finished_at: datetime


def record_done(meta: MetaStore, done: Sequence[Done], *, run_id: str, now: datetime) -> None:
    """Steps 3 and 4 for finished work: the watermarks, then the ledger entries, one statement
    each for all of it. Several units at once only inside one transaction with their work
    (the process pool's commit groups, ``stages/consolidate_pool.py``): a crash then undoes
    all of it, as the protocol needs; their statements' fixed cost was paid per partition
    (BENCHMARKS.md s44)."""
    set_watermarks(
        meta,
        [
            Watermark(d.unit.partition.tenant_id, d.unit.partition.namespace, d.unit.stage,
                      d.unit.watermark_at)
            for d in done
            if d.unit.watermark_at is not None
        ],
        run_id=run_id,
        now=now,
    )  # fmt: skip
    for _ in done:
        crash_point("partition.watermark")
    record_stages(
        meta,
        [
            StageEntry(d.unit.stage, d.unit.partition.key, d.unit.input_hash, run_id,
                       d.started_at, d.finished_at, d.result)
            for d in done
        ],
    )  # fmt: skip
