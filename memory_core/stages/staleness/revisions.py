"""Source revisions: records bound to an older revision go stale; a deleted source is revoked.

Facts and procedures keep the corpus sources their evidence relied on (``sources`` column,
``[{source_id, revision}]``, and lineage edges to ``corpus`` sources). When
``memctl sources update`` records a newer revision, every current record bound to another
revision of that source becomes ``stale``: not served by default (the read path can ask for it,
and it says so) and queued for re-validation in a ``revalidate`` review batch.

A deleted source takes back what depends on it *alone*: for each record citing it, the
evidence episodes that relied on the source are set aside and the rest is re-checked against
the record's promotion policy (``revoke._policy_failure``, the rule revocation uses). A record
that no longer meets it is revoked through ``revoke.revoke_source`` (its own receipt, and the
lineage walk to what was built on it); one with other support survives, with the source taken
out of its ``sources`` and lineage. One ``source_deleted`` receipt lists every change.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from memory_core.config import Settings
from memory_core.context import RunContext
from memory_core.lifecycle import SERVED, STALE
from memory_core.stages.forget.revoke import _policy_failure, revoke_source
from memory_core.stages.staleness.common import (
    current_rows,
    queue_batches,
    set_fields,
    with_vectors,
)
from memory_core.stores import Stores
from memory_core.stores.audit import receipt_id as audit_receipt_id
from memory_core.stores.audit import record_audit, store_receipt
from memory_core.stores.facts import MemoryTable, episodes_by_ids
from memory_core.stores.lance import sql_quote
from memory_core.stores.sources import SourceRevision, list_sources, mark_source_handled

__all__ = ["RevisionResult", "apply_source_revisions", "revoke_deleted_source"]

logger = logging.getLogger(__name__)

_TABLES: tuple[MemoryTable, ...] = ("facts", "procedures")
_ID = {"facts": "fact_id", "procedures": "procedure_id"}
_KIND = {"facts": "fact", "procedures": "procedure"}


@dataclass
class RevisionResult:
    stale: list[str] = field(default_factory=list)
    batches: list[str] = field(default_factory=list)
    deleted_sources: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "stale": list(self.stale),
            "revalidate_batches": list(self.batches),
            "deleted_sources": list(self.deleted_sources),
        }


def _refs(row: dict[str, Any]) -> list[dict[str, Any]]:
    return list(json.loads(row.get("sources") or "[]"))


def _outdated(row: dict[str, Any], known: dict[str, SourceRevision]) -> list[str]:
    """Sources of ``row`` whose current revision differs from the one it is bound to."""
    out = []
    for ref in _refs(row):
        src = known.get(ref["source_id"])
        if src is not None and not src.deleted and (ref.get("revision") or "") != src.revision:
            out.append(f"{ref['source_id']}@{ref.get('revision')} -> {src.revision}")
    return out


def apply_source_revisions(stores: Stores, settings: Settings, ctx: RunContext) -> RevisionResult:
    """Mark records bound to older revisions stale, queue them, revoke deleted sources."""
    result = RevisionResult()
    known = {s.source_id: s for s in list_sources(stores.meta)}
    if not known:
        return result
    queue: list[tuple[str, str, str]] = []
    reasons: dict[str, list[str]] = {}
    for table in _TABLES:
        cited = "sources IS NOT NULL AND sources != '[]'"
        changed = []
        live = current_rows(stores, table, statuses=(*SERVED, *STALE), where=cited, vector=False)
        for row in live:
            rid = row[_ID[table]]
            if row["status"] == "stale":  # re-queue when its batch expired undecided
                queue.append((row["tenant_id"], row["namespace"], rid))
                continue
            outdated = _outdated(row, known)
            if outdated:
                changed.append({**row, "status": "stale"})
                reasons[rid] = outdated
                queue.append((row["tenant_id"], row["namespace"], rid))
        if not ctx.dry_run:
            set_fields(stores, ctx, table, with_vectors(stores, table, changed))
        result.stale += [r[_ID[table]] for r in changed]
    result.batches = queue_batches(stores, settings, ctx, "revalidate", queue)
    if result.stale and not ctx.dry_run:
        with stores.meta.transaction() as con:
            record_audit(
                con, at=ctx.now, action="marked_stale", run_id=ctx.run_id, actor=ctx.actor,
                counts={"stale": len(result.stale)},
                detail={"records": {k: reasons[k] for k in sorted(reasons)}},
            )  # fmt: skip
    for src in sorted(known.values(), key=lambda s: s.source_id):
        if src.deleted and src.handled_at is None:
            result.deleted_sources.append(revoke_deleted_source(stores, settings, ctx, src))
    return result


def _derived_from_source(stores: Stores, source_id: str) -> list[tuple[str, str]]:
    with stores.meta.connect() as con:
        return con.execute(
            "SELECT derived_id, derived_kind FROM lineage WHERE source_id = ? "
            "AND derived_kind IN ('fact', 'procedure') ORDER BY derived_id",
            [source_id],
        ).fetchall()


def _citing(stores: Stores, tenant: str, episode_ids: list[str], source_id: str) -> set[str]:
    """Which of the episodes relied on ``source_id``."""
    rows = episodes_by_ids(stores.lance, tenant, episode_ids, ["episode_id", "sources"])
    return {
        r["episode_id"]
        for r in rows
        if any(ref["source_id"] == source_id for ref in json.loads(r.get("sources") or "[]"))
    }


def revoke_deleted_source(
    stores: Stores, settings: Settings, ctx: RunContext, src: SourceRevision
) -> dict[str, Any]:
    """Revoke what depends on ``src`` alone; strip it from what has other support. Receipt."""
    changes: list[dict[str, Any]] = []
    known = {s.source_id: s for s in list_sources(stores.meta)}
    survivors: dict[MemoryTable, list[dict[str, Any]]] = {"facts": [], "procedures": []}
    dropped_edges: list[str] = []
    for derived_id, kind in _derived_from_source(stores, src.source_id):
        table: MemoryTable = "facts" if kind == "fact" else "procedures"
        rows = current_rows(
            stores,
            table,
            statuses=(*SERVED, *STALE),
            where=f"{_ID[table]} = {sql_quote(derived_id)}",
        )
        if not rows:
            continue
        row = rows[0]
        provenance = json.loads(row.get("provenance") or "[]")
        episodes = [
            p["source_id"] for p in provenance if p.get("source_kind", "episode") == "episode"
        ]
        citing = _citing(stores, row["tenant_id"], episodes, src.source_id)
        kept = [p for p in provenance if p["source_id"] not in citing]
        failure = _policy_failure(kind, row, kept, len(episodes), [], settings)
        if failure:
            reason = f"source {src.source_id} deleted: {failure}"
            if ctx.dry_run:
                changes.append({"id": derived_id, "kind": kind, "action": "revoked"})
                continue
            receipt = revoke_source(stores, settings, ctx, derived_id, reason=reason).receipt
            changes.append(
                {"id": derived_id, "kind": kind, "action": "revoked", "from": row["status"],
                 "reason": failure, "receipt_id": receipt["receipt_id"]}
            )  # fmt: skip
            continue
        refs = [r for r in _refs(row) if r["source_id"] != src.source_id]
        kept_row = {**row, "sources": json.dumps(refs, sort_keys=True)}
        if row["status"] == "stale" and not _outdated(kept_row, known):
            kept_row["status"] = "active"  # it was stale only because of the deleted source
        survivors[table].append(kept_row)
        dropped_edges.append(derived_id)
        changes.append(
            {"id": derived_id, "kind": kind, "action": "source_removed", "from": row["status"],
             "to": kept_row["status"],
             "kept_support": len([p for p in kept if p.get("source_kind", "episode") == "episode"])}
        )  # fmt: skip
    receipt_id = audit_receipt_id(
        "source_deleted", src.source_id, src.revision, ctx.now.isoformat()
    )
    counts: dict[str, int] = {}
    for change in changes:
        key = f"{change['kind']}_{change['action']}"
        counts[key] = counts.get(key, 0) + 1
    receipt = {
        "receipt_id": receipt_id,
        "kind": "source_deleted",
        "source_id": src.source_id,
        "revision": src.revision,
        "at": ctx.now.isoformat(),
        "run_id": ctx.run_id,
        "changed": changes,
        "counts": dict(sorted(counts.items())),
    }
    if ctx.dry_run:
        return receipt
    for table, rows in survivors.items():
        set_fields(stores, ctx, table, rows)
    with stores.meta.transaction() as con:
        for derived_id in dropped_edges:
            con.execute(
                "DELETE FROM lineage WHERE derived_id = ? AND source_id = ?",
                [derived_id, src.source_id],
            )
        store_receipt(con, receipt_id=receipt_id, kind="source_deleted", at=ctx.now,
                      run_id=ctx.run_id, body=receipt)  # fmt: skip
        record_audit(con, at=ctx.now, action="source_deleted", run_id=ctx.run_id,
                     actor=ctx.actor, target=src.source_id, counts=receipt["counts"],
                     detail={"receipt_id": receipt_id})  # fmt: skip
        mark_source_handled(con, src.source_id, now=ctx.now, receipt_id=receipt_id)
    logger.info("source %s deleted: %s", src.source_id, receipt["counts"])
    return receipt
