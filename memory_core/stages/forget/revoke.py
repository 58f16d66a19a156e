"""Revocation through lineage: a source found wrong or poisoned, and everything built on it.

``memctl revoke --source ID --reason R`` marks the source ``revoked`` (when it is a Lance
record) and walks lineage (a recursive DuckDB query, ``lineage.derived_from``) level by level.
Each derived record that cited a removed source is re-checked against its promotion policy
*without* it:

* preference fact (subject scope): the remaining user statements (episode sources) must number
  at least ``claims.min_statements`` (or as many as it had, when an explicit change promoted
  it with fewer), and at least one;
* tenant-scope fact (insight) or procedure: at least ``policy.min_support`` distinct remaining
  supporting episodes and ``policy.min_subjects_tenant_scope`` distinct subjects among them
  (subject-scope ones need only the support);
* a procedure or fact that cites a fact or procedure which is revoked fails: what it builds on
  is gone (this is how episode -> fact -> procedure propagates);
* digest: its lines of the removed sources are taken out; it is revoked only when no source
  remains;
* candidate: the same tests on its remaining evidence (support ids); its cached scores are
  dropped because its content changed.

A record that fails is ``revoked`` (and becomes a removed source for the next level); one that
passes keeps its status, with the source taken out of its provenance and lineage. The receipt
lists every change (ids, kinds, statuses), never content. User deletion (``delete_subject``)
uses the same walk with the subject's records as the removed sources.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from memory_core.config import Settings
from memory_core.context import RunContext
from memory_core.embed import Embedder, make_embedder
from memory_core.errors import NotFound
from memory_core.lifecycle import WITHDRAWN
from memory_core.models import Candidate, CandidateKind, CandidateStatus
from memory_core.stages.compact.stage import drop_digest_sources
from memory_core.stores import Stores
from memory_core.stores import forgetting as fstore
from memory_core.stores.audit import receipt_id as audit_receipt_id
from memory_core.stores.audit import record_audit, store_receipt
from memory_core.stores.lance import sql_quote
from memory_core.stores.lineage import derived_from
from memory_core.stores.llm import delete_cached_scores
from memory_core.stores.schemas import ID_COLUMN, TABLES
from memory_core.stores.status_writes import InPlace, RowVersions, write_status

__all__ = ["DerivedChanges", "RevokeResult", "find_record", "remove_sources", "revoke_source"]

logger = logging.getLogger(__name__)

TABLE_OF_KIND = {"episode": "episodes", "fact": "facts", "procedure": "procedures",
                 "digest": "digests"}  # fmt: skip


@dataclass
class DerivedChanges:
    """What the walk changed: [{id, kind, action, from, to, reason?}] and candidate updates."""

    changes: list[dict[str, Any]] = field(default_factory=list)
    removed: set[str] = field(default_factory=set)
    deleted_records: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for change in self.changes:
            key = f"{change['kind']}_{change['action']}"
            out[key] = out.get(key, 0) + 1
        return dict(sorted(out.items()))


@dataclass
class RevokeResult:
    receipt: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return self.receipt


def find_record(stores: Stores, record_id: str) -> tuple[str, dict[str, Any]] | None:
    """(table, row without vector) of the current version of a Lance record, if any."""
    existing = set(stores.lance.table_names())
    for name in TABLES:
        if name not in existing:
            continue
        columns = [c for c in stores.lance.table(name).schema.names if c != "vector"]
        rows = stores.lance.scan(
            name, where=f"{ID_COLUMN[name]} = {sql_quote(record_id)}", columns=columns
        )
        if rows.num_rows:
            return name, rows.to_pylist()[0]
    return None


def _rows(stores: Stores, name: str, ids: list[str]) -> list[dict[str, Any]]:
    if not ids or name not in stores.lance.table_names():
        return []
    quoted = ", ".join(sql_quote(i) for i in sorted(set(ids)))
    where = f"{ID_COLUMN[name]} IN ({quoted}) AND recorded_to IS NULL"
    return stores.lance.scan(name, where=where).to_pylist()


def _closed_revision(
    stores: Stores, name: str, record_id: str, removed: set[str]
) -> dict[str, Any] | None:
    """A closed revision (``recorded_to`` set) of ``record_id`` with ``removed`` sources
    taken out of its provenance, or None when there is nothing to scrub. Only a record id
    with a single row is rewritten (an upsert by id must not touch two rows)."""
    if name not in stores.lance.table_names():
        return None
    rows = stores.lance.scan(name, where=f"{ID_COLUMN[name]} = {sql_quote(record_id)}")
    if rows.num_rows != 1:
        return None
    row = rows.to_pylist()[0]
    provenance = json.loads(row.get("provenance") or "[]")
    kept = [p for p in provenance if p["source_id"] not in removed]
    if len(kept) == len(provenance):
        return None
    return {**row, "provenance": json.dumps(kept, sort_keys=True)}


def _support(provenance: list[dict[str, Any]], sources: list[tuple[str, str]]) -> tuple[int, int]:
    """(distinct episode sources, distinct subjects among them)."""
    episodes = {s for s, kind in sources if kind == "episode"}
    episodes |= {p["source_id"] for p in provenance if p.get("source_kind", "episode") == "episode"}
    subjects = {p.get("subject_id") for p in provenance if p["source_id"] in episodes}
    return len(episodes), len(subjects - {None})


def _policy_failure(
    kind: str,
    row: dict[str, Any],
    provenance: list[dict[str, Any]],
    before: int,
    lost_cited: list[str],
    settings: Settings,
) -> str | None:
    """Why the record no longer meets its promotion policy, or None when it still does."""
    if lost_cited:
        return f"cites revoked {', '.join(sorted(lost_cited))}"
    support, subjects = _support(provenance, [])
    tenant_scope = row.get("subject_id") is None
    insight = kind == "fact" and str(row.get("predicate", "")).startswith("resolution:")
    if kind == "fact" and not insight and not tenant_scope:
        need = max(1, min(settings.claims.min_statements, before))
        return None if support >= need else f"{support} statement(s) left < {need}"
    need = settings.policy.min_support
    if support < need:
        return f"min_support: {support} supporting episodes left < {need}"
    need_subjects = settings.policy.min_subjects_tenant_scope
    if tenant_scope and subjects < need_subjects:
        return f"min_subjects: {subjects} subjects left < {need_subjects} at tenant scope"
    return None


def remove_sources(
    stores: Stores,
    settings: Settings,
    ctx: RunContext,
    removed: set[str],
    *,
    reason: str,
    embedder: Embedder | None = None,
    delete_subject: str | None = None,
) -> DerivedChanges:
    """Take ``removed`` sources out of every record derived from them, re-checking each.

    ``delete_subject``: user deletion mode -- records of that subject are being deleted by the
    caller, so they are skipped here (no point rewriting what is about to go).
    """
    out = DerivedChanges(removed=set(removed))
    walk = derived_from(stores.meta, sorted(removed))
    sources = fstore.sources_of_many(stores.meta, [d for d, _, _ in walk])
    updates: dict[str, list[dict[str, Any]]] = {}
    lost_edges: list[tuple[str, str]] = []
    for derived_id, kind, _depth in walk:
        table = TABLE_OF_KIND.get(kind)
        if table is None or derived_id in out.removed:
            continue
        rows = _rows(stores, table, [derived_id])
        if not rows and delete_subject is not None:
            closed = _closed_revision(stores, table, derived_id, out.removed)
            if closed is not None:  # history must not keep a deleted subject's sources either
                updates.setdefault(table, []).append(closed)
                lost_edges += [(derived_id, s) for s, _ in sources.get(derived_id, [])
                               if s in out.removed]  # fmt: skip
            continue
        if not rows or rows[0]["status"] in WITHDRAWN:
            continue
        row = rows[0]
        if delete_subject is not None and row.get("subject_id") == delete_subject:
            continue
        cited = sources.get(derived_id, [])
        lost = {s for s, _ in cited if s in out.removed}
        provenance = json.loads(row.get("provenance") or "[]")
        lost |= {p["source_id"] for p in provenance if p["source_id"] in out.removed}
        if not lost:
            continue
        lost_edges += [(derived_id, s) for s in sorted(lost)]
        before = len([p for p in provenance if p.get("source_kind", "episode") == "episode"])
        if kind == "digest":
            embedder = embedder or make_embedder(settings.embed)
            new = drop_digest_sources(row, lost, embedder=embedder)
            if new is None:
                new = {**row, "status": "revoked", "provenance": "[]", "text": ""}
                out.removed.add(derived_id)
                action = "revoked"
            else:
                action = "sources_removed"
            updates.setdefault(table, []).append(new)
            out.changes.append(_change(derived_id, kind, action, row["status"], new["status"],
                                       reason if action == "revoked" else None))  # fmt: skip
            continue
        kept = [p for p in provenance if p["source_id"] not in lost]
        lost_cited = [s for s, k in cited if s in lost and k != "episode"]
        failure = _policy_failure(kind, row, kept, before, lost_cited, settings)
        new = {**row, "provenance": json.dumps(kept, sort_keys=True)}
        if failure:
            new["status"] = "revoked"
            out.removed.add(derived_id)
        updates.setdefault(table, []).append(new)
        out.changes.append(
            _change(derived_id, kind, "revoked" if failure else "sources_removed",
                    row["status"], new["status"], f"{reason}: {failure}" if failure else None)
        )  # fmt: skip
    _write_rows(stores, ctx, updates)
    cand_changes = _recheck_candidates(stores, settings, out.removed, reason, delete_subject)
    with stores.meta.transaction() as con:
        for derived_id, source_id in lost_edges:
            con.execute(
                "DELETE FROM lineage WHERE derived_id = ? AND source_id = ?",
                [derived_id, source_id],
            )
        fstore.rewrite_candidates(con, [c for _, c in cand_changes], now=ctx.now)
    # a changed digest's summary may quote the lost source: drop it (stages/digest_summary.py)
    changed_digests = [r["digest_id"] for r in updates.get("digests", [])]
    delete_cached_scores(stores.meta, [c.candidate_id for _, c in cand_changes] + changed_digests)
    for old_status, cand in cand_changes:
        action = "sources_removed" if cand.status.value == old_status else cand.status.value
        out.changes.append(
            _change(cand.candidate_id, "candidate", action, old_status, cand.status.value,
                    cand.reason if action != "sources_removed" else None)
        )  # fmt: skip
    return out


def _change(rid: str, kind: str, action: str, old: str | None, new: str,
            reason: str | None) -> dict[str, Any]:  # fmt: skip
    change = {"id": rid, "kind": kind, "action": action, "from": old, "to": new}
    if reason:
        change["reason"] = reason
    return change


def _write_rows(stores: Stores, ctx: RunContext, updates: dict[str, list[dict[str, Any]]]) -> None:
    """One merge_insert commit per table: readers see all of a table's changes or none."""
    for table, rows in updates.items():
        write_status(
            stores, RowVersions(table, close=rows, upsert=True), at=ctx.now, run_id=ctx.run_id,
            actor=ctx.actor,
        )  # fmt: skip


_CALL_STATS = frozenset({"abstract_steps", "observed_steps", "pattern", "support_runs"})


def _recheck_candidates(stores: Stores, settings: Settings, removed: set[str], reason: str,
                        delete_subject: str | None) -> list[tuple[str, Candidate]]:  # fmt: skip
    changed = []
    for cand in fstore.candidates_citing(stores.meta, sorted(removed), subject_id=delete_subject):
        if delete_subject is not None and cand.subject_id == delete_subject:
            continue  # deleted outright by the caller
        gone = set(removed)
        if delete_subject is not None:
            gone |= {p.source_id for p in cand.provenance if p.subject_id == delete_subject}
        support = [s for s in cand.support_ids if s not in gone]
        counter = [s for s in cand.counterexample_ids if s not in gone]
        provenance = [p for p in cand.provenance if p.source_id not in gone]
        subjects = {p.subject_id for p in provenance if p.source_id in support} - {None}
        failure = None
        if cand.kind == CandidateKind.semantic and cand.subject_id is not None:
            need = max(1, min(settings.claims.min_statements, len(cand.support_ids)))
            if len(support) < need:
                failure = f"{len(support)} statement(s) left < {need}"
        elif len(support) < settings.policy.min_support:
            failure = f"min_support: {len(support)} < {settings.policy.min_support}"
        elif cand.subject_id is None and len(subjects) < settings.policy.min_subjects_tenant_scope:
            failure = f"min_subjects: {len(subjects)} < {settings.policy.min_subjects_tenant_scope}"
        update: dict[str, Any] = {
            "support_ids": support,
            "counterexample_ids": counter,
            "provenance": provenance,
        }
        if delete_subject is not None:
            # the mined step analysis quotes the calls' concrete arguments (the subject's ids
            # among them): dropped here, recomputed from what is left when the cluster is re-mined
            update["stats"] = {k: v for k, v in cand.stats.items() if k not in _CALL_STATS}
        keep_status = cand.status in (CandidateStatus.rejected, CandidateStatus.auto_rejected)
        if failure and not keep_status:
            # A deletion leaves an undecided candidate open to new evidence (auto_rejected is
            # re-mined); a poisoned source, or a decided candidate, is revoked for good.
            undecided = cand.status in (
                CandidateStatus.pending_score,
                CandidateStatus.pending_review,
            )
            update["status"] = (
                CandidateStatus.auto_rejected
                if delete_subject is not None and undecided
                else CandidateStatus.revoked
            )
            update["reason"] = f"{reason}: {failure}"
        changed.append((cand.status.value, cand.model_copy(update=update)))
    return changed


def revoke_source(
    stores: Stores,
    settings: Settings,
    ctx: RunContext,
    source_id: str,
    *,
    reason: str,
    embedder: Embedder | None = None,
) -> RevokeResult:
    """Revoke a source and re-check everything derived from it; store and return the receipt."""
    t0 = time.perf_counter()
    if not reason.strip():
        msg = "revoke needs a reason (--reason R): it is recorded on every revoked record"
        raise ValueError(msg)
    found = find_record(stores, source_id)
    has_lineage = derived_from(stores.meta, [source_id]) or fstore.candidates_citing(
        stores.meta, [source_id]
    )
    if found is None and not has_lineage:
        what = "source"
        raise NotFound(what, source_id, "give an episode, fact, procedure, digest or corpus id")
    changes: list[dict[str, Any]] = []
    if found is not None and found[1]["status"] not in WITHDRAWN:
        table, row = found
        where = f"{ID_COLUMN[table]} = {sql_quote(source_id)}"
        write_status(
            stores, InPlace(table, where, was=(row["status"],), to="revoked"), at=ctx.now,
            run_id=ctx.run_id, actor=ctx.actor, reason=reason,
        )  # fmt: skip
        kind = {v: k for k, v in TABLE_OF_KIND.items()}[table]
        changes.append(_change(source_id, kind, "revoked", row["status"], "revoked", reason))
    derived = remove_sources(stores, settings, ctx, {source_id}, reason=reason, embedder=embedder)
    changes += derived.changes
    receipt_id = audit_receipt_id("revoke", source_id, reason, ctx.now.isoformat())
    counts: dict[str, int] = {}
    for change in changes:
        key = f"{change['kind']}_{change['action']}"
        counts[key] = counts.get(key, 0) + 1
    receipt = {
        "receipt_id": receipt_id,
        "kind": "revoke",
        "source_id": source_id,
        "reason": reason,
        "at": ctx.now.isoformat(),
        "run_id": ctx.run_id,
        "changed": changes,
        "counts": dict(sorted(counts.items())),
        "duration_s": round(time.perf_counter() - t0, 3),
    }
    with stores.meta.transaction() as con:
        store_receipt(con, receipt_id=receipt_id, kind="revoke", at=ctx.now, run_id=ctx.run_id,
                      body=receipt)  # fmt: skip
        record_audit(con, at=ctx.now, action="revoke", run_id=ctx.run_id, actor=ctx.actor,
                     target=source_id, counts=receipt["counts"],
                     detail={"receipt_id": receipt_id, "reason": reason})  # fmt: skip
    logger.info("revoke %s run=%s changed=%d", source_id, ctx.run_id, len(changes))
    return RevokeResult(receipt)
