"""Shared pieces of the staleness stage: current rows, status changes, batches, the bound.

A status change here (active -> stale, contested, deprecated and back) is written in place on
the current row, as revocation does, so the record keeps its id: lineage edges, review items
and receipts keep pointing at it. Each call is one ``merge_insert`` per table, so a reader sees
all of a run's changes to a table or none (invariant 9).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

from memory_core.config import Settings
from memory_core.context import RunContext
from memory_core.models import stable_id
from memory_core.stages.mine.counterexamples import wilson_upper_bound as wilson_upper
from memory_core.stages.promote.supersede import row_hash
from memory_core.stores import Stores
from memory_core.stores.audit import record_audit
from memory_core.stores.facts import MemoryTable
from memory_core.stores.lance import sql_quote
from memory_core.stores.review import (
    BatchRow,
    ItemRow,
    candidates_in_open_batches,
    insert_batches,
)
from memory_core.stores.status_writes import RowVersions, write_status

__all__ = [
    "REVIEW_KINDS",
    "current_rows",
    "queue_batches",
    "set_fields",
    "wilson_upper",
    "with_vectors",
]

# Review batch kinds whose items are records (fact or procedure ids), not candidates.
REVIEW_KINDS = ("revalidate", "settle", "failures")


def current_rows(
    stores: Stores,
    table: MemoryTable,
    *,
    statuses: Sequence[str],
    where: str | None = None,
    vector: bool = True,
) -> list[dict[str, Any]]:
    """Current-knowledge rows of ``table`` in ``statuses`` (full rows unless ``vector=False``:
    a scan that only looks for what changed skips the widest column)."""
    status = ", ".join(sql_quote(s) for s in statuses)
    clause = f"recorded_to IS NULL AND status IN ({status})"
    if where:
        clause += f" AND ({where})"
    columns = (
        None if vector else [n for n in stores.lance.table(table).schema.names if n != "vector"]
    )
    return stores.lance.scan(table, where=clause, columns=columns).to_pylist()


def with_vectors(
    stores: Stores, table: MemoryTable, rows: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``rows`` (read without vectors) completed with their vectors, for a rewrite."""
    if not rows:
        return []
    id_col = "fact_id" if table == "facts" else "procedure_id"
    ids = ", ".join(sql_quote(r[id_col]) for r in rows)
    found = stores.lance.scan(table, where=f"{id_col} IN ({ids})", columns=[id_col, "vector"])
    vectors = dict(
        zip(found.column(id_col).to_pylist(), found.column("vector").to_pylist(), strict=True)
    )
    return [{**r, "vector": vectors.get(r[id_col])} for r in rows]


def set_fields(
    stores: Stores, ctx: RunContext, table: MemoryTable, rows: Iterable[dict[str, Any]]
) -> int:
    """Write changed current rows in place (one commit, through the status writer); their
    content hash is recomputed."""
    changed = [{**r, "content_hash": row_hash(table, r)} for r in rows]
    if changed:
        write_status(
            stores, RowVersions(table, close=changed), at=ctx.now, run_id=ctx.run_id,
            actor=ctx.actor,
        )  # fmt: skip
    return len(changed)


def queue_batches(
    stores: Stores,
    settings: Settings,
    ctx: RunContext,
    kind: str,
    records: Iterable[tuple[str, str, str]],
) -> list[str]:
    """Put (tenant, namespace, record_id) into review batches of ``kind``; return batch ids.

    A record already in an open batch is not queued again; one whose batch expired is.
    """
    wanted = sorted(set(records))
    if not wanted or ctx.dry_run:
        return []
    with stores.meta.connect() as con:
        busy = candidates_in_open_batches(con)
    groups: dict[tuple[str, str], list[str]] = {}
    for tenant, namespace, rid in wanted:
        if rid not in busy:
            groups.setdefault((tenant, namespace), []).append(rid)
    size = settings.review.max_batch_items
    expires = ctx.now + timedelta(days=settings.review.expire_after_days)
    batches: list[BatchRow] = []
    items: list[ItemRow] = []
    for (tenant, namespace), ids in sorted(groups.items()):
        for start in range(0, len(ids), size):
            chunk = ids[start : start + size]
            batch_id = stable_id("batch", tenant, namespace, kind, ctx.now.isoformat(), chunk)
            batches.append(
                BatchRow(batch_id, tenant, namespace, kind, "open", len(chunk), ctx.now, expires)
            )
            items.extend(ItemRow(batch_id, rid) for rid in chunk)
    if not batches:
        return []
    with stores.meta.transaction() as con:
        insert_batches(con, batches, items)
        record_audit(
            con, at=ctx.now, action="review_batches_built", run_id=ctx.run_id, actor=ctx.actor,
            counts={"batches": len(batches), "items": len(items)},
            detail={"kind": kind, "batches": [b.batch_id for b in batches]},
        )  # fmt: skip
    return [b.batch_id for b in batches]
