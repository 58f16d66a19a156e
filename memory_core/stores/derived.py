"""Control-plane reads and writes for re-checking derived records during forgetting.

Lineage sources, candidates citing removed evidence, and clusters that lose members.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import duckdb

from memory_core.models import Candidate
from memory_core.stores.candidates import candidates_from_bodies
from memory_core.stores.meta import MetaStore
from memory_core.stores.status_writes import MetaStatuses, write_status

__all__ = [
    "candidates_citing",
    "clusters_of_members",
    "remaining_members",
    "rewrite_candidates",
    "save_cluster_changes",
    "sources_of_many",
    "subject_candidates",
    "subject_sources",
]


def _tenant_clause(tenant_id: str | None) -> tuple[str, list[Any]]:
    return ("AND tenant_id = ?", [tenant_id]) if tenant_id is not None else ("", [])


def sources_of_many(meta: MetaStore, derived_ids: list[str]) -> dict[str, list[tuple[str, str]]]:
    """Direct sources of several derived records: {derived_id: [(source_id, source_kind)]}."""
    if not derived_ids:
        return {}
    with meta.connect() as con:
        rows = con.execute(
            "SELECT derived_id, source_id, source_kind FROM lineage "
            "WHERE list_contains(?, derived_id) ORDER BY derived_id, source_id",
            [sorted(set(derived_ids))],
        ).fetchall()
    out: dict[str, list[tuple[str, str]]] = {}
    for derived, source, kind in rows:
        out.setdefault(derived, []).append((source, kind))
    return out


def candidates_citing(
    meta: MetaStore, episode_ids: list[str], *, subject_id: str | None = None
) -> list[Candidate]:
    """Candidates with evidence among ``episode_ids`` (or evidence of ``subject_id``)."""
    with meta.connect() as con:
        rows = con.execute(
            """SELECT DISTINCT c.body FROM candidates c JOIN candidate_evidence e
            USING (candidate_id) WHERE list_contains(?, e.episode_id)
            OR (? IS NOT NULL AND e.subject_id = ?) ORDER BY 1""",
            [sorted(set(episode_ids)), subject_id, subject_id],
        ).fetchall()
        return candidates_from_bodies(con, [r[0] for r in rows])


def rewrite_candidates(
    con: duckdb.DuckDBPyConnection, changed: Iterable[Candidate], *, now: datetime
) -> int:
    """Store re-checked candidates (body, status, evidence) inside the caller's transaction;
    the status through the lifecycle writer (checked and audited)."""
    changed = list(changed)
    statuses = {c.candidate_id: c.status.value for c in changed}
    write_status(None, MetaStatuses(con, statuses), at=now)
    count = 0
    for cand in changed:
        body = json.dumps(cand.model_dump(mode="json"), sort_keys=True)
        con.execute(
            """UPDATE candidates SET reason = ?, body = ?, content_hash = ?,
            score_basis = ?, confidence = ?, updated_at = ? WHERE candidate_id = ?""",
            [
                cand.reason,
                body,
                cand.content_hash(),
                cand.score_basis(),
                cand.confidence,
                now,
                cand.candidate_id,
            ],
        )
        keep = set(cand.support_ids) | set(cand.counterexample_ids)
        con.execute(
            "DELETE FROM candidate_evidence WHERE candidate_id = ? "
            "AND NOT list_contains(?, episode_id)",
            [cand.candidate_id, sorted(keep)],
        )
        count += 1
    return count


def clusters_of_members(meta: MetaStore, episode_ids: list[str]) -> list[str]:
    if not episode_ids:
        return []
    with meta.connect() as con:
        rows = con.execute(
            "SELECT DISTINCT cluster_id FROM cluster_members WHERE list_contains(?, episode_id) "
            "ORDER BY 1",
            [sorted(set(episode_ids))],
        ).fetchall()
    return [r[0] for r in rows]


def remaining_members(
    meta: MetaStore, cluster_ids: list[str], *, minus: list[str]
) -> dict[str, list[str]]:
    """Members of the clusters other than ``minus``: {cluster_id: [episode_id]}."""
    out: dict[str, list[str]] = {c: [] for c in cluster_ids}
    if not cluster_ids:
        return out
    with meta.connect() as con:
        rows = con.execute(
            "SELECT cluster_id, episode_id FROM cluster_members WHERE list_contains(?, cluster_id) "
            "AND NOT list_contains(?, episode_id) ORDER BY cluster_id, episode_id",
            [cluster_ids, sorted(set(minus))],
        ).fetchall()
    for cid, eid in rows:
        out[cid].append(eid)
    return out


def save_cluster_changes(
    con: duckdb.DuckDBPyConnection,
    updates: list[tuple[str, list[float], int, str]],
    drop: list[str],
    *,
    now: datetime,
) -> None:
    """(cluster_id, centroid, size, label) updates and dropped clusters, in the caller's txn."""
    for cid, centroid, size, label in updates:
        con.execute(
            "UPDATE clusters SET centroid = ?, size = ?, label = ?, updated_at = ? "
            "WHERE cluster_id = ?",
            [centroid, size, label, now, cid],
        )
    if drop:
        con.execute("DELETE FROM cluster_members WHERE list_contains(?, cluster_id)", [drop])
        con.execute("DELETE FROM clusters WHERE list_contains(?, cluster_id)", [drop])


def subject_candidates(meta: MetaStore, subject_id: str, tenant_id: str | None) -> list[str]:
    """Subject-scope candidates of the subject: deleted outright with the subject."""
    tenant, params = _tenant_clause(tenant_id)
    with meta.connect() as con:
        rows = con.execute(
            f"SELECT candidate_id FROM candidates WHERE subject_id = ? {tenant} ORDER BY 1",
            [subject_id, *params],
        ).fetchall()
    return [r[0] for r in rows]


def subject_sources(meta: MetaStore, subject_id: str, tenant_id: str | None) -> list[str]:
    """Source ids lineage attributes to the subject (e.g. episodes already folded away)."""
    tenant, params = _tenant_clause(tenant_id)
    with meta.connect() as con:
        rows = con.execute(
            f"SELECT DISTINCT source_id FROM lineage WHERE subject_id = ? {tenant} ORDER BY 1",
            [subject_id, *params],
        ).fetchall()
    return [r[0] for r in rows]
