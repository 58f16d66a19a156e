"""Candidates and their evidence in DuckDB, keyed by deterministic candidate ids.

A rerun upserts: the same candidate id updates its evidence and statistics, never duplicates.
Human decisions stick: a candidate a reviewer approved, rejected or promoted keeps that status
when mining sees it again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from memory_core.models import Candidate, CandidateStatus
from memory_core.stores.meta import MetaStore

__all__ = [
    "DECIDED_STATUSES",
    "get_candidates",
    "list_candidates",
    "set_candidate_scores",
    "set_candidate_status",
    "upsert_candidates",
]

DECIDED_STATUSES = frozenset(
    {
        CandidateStatus.approved,
        CandidateStatus.rejected,
        CandidateStatus.promoted,
        CandidateStatus.revoked,
    }
)


def upsert_candidates(
    meta: MetaStore, candidates: Iterable[Candidate], *, run_id: str, now: datetime
) -> dict[str, int]:
    """Insert new candidates, refresh changed ones, keep decided statuses; returns counts."""
    counts = {"inserted": 0, "updated": 0, "unchanged": 0}
    with meta.transaction() as con:
        for cand in candidates:
            chash = cand.content_hash()
            row = con.execute(
                "SELECT status, content_hash, body FROM candidates WHERE candidate_id = ?",
                [cand.candidate_id],
            ).fetchone()
            if row is not None:
                status, old_hash, old_body = row
                if status in DECIDED_STATUSES or status == CandidateStatus.pending_review:
                    # keep the decided (or already scored) status and score
                    if old_hash == chash:
                        counts["unchanged"] += 1
                        continue
                    if status in DECIDED_STATUSES:
                        cand = cand.model_copy(update={"status": CandidateStatus(status)})
                if old_hash == chash and json.loads(old_body).get("status") == cand.status:
                    counts["unchanged"] += 1
                    continue
                counts["updated"] += 1
            else:
                counts["inserted"] += 1
            body = cand.model_dump(mode="json")
            con.execute(
                """INSERT INTO candidates VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)
                ON CONFLICT (candidate_id) DO UPDATE SET status = excluded.status,
                body = excluded.body, content_hash = excluded.content_hash,
                confidence = excluded.confidence, importance = excluded.importance,
                scorer = excluded.scorer, reason = excluded.reason, run_id = excluded.run_id,
                updated_at = excluded.updated_at""",
                [
                    cand.candidate_id,
                    cand.kind.value,
                    cand.tenant_id,
                    cand.subject_id,
                    cand.namespace,
                    cand.status.value,
                    json.dumps(body, sort_keys=True),
                    chash,
                    cand.confidence,
                    cand.importance,
                    cand.scorer,
                    cand.reason,
                    run_id,
                    now,
                    now,
                ],
            )
            con.execute(
                "DELETE FROM candidate_evidence WHERE candidate_id = ?", [cand.candidate_id]
            )
            evidence = [(cand.candidate_id, e, "support") for e in cand.support_ids] + [
                (cand.candidate_id, e, "counterexample") for e in cand.counterexample_ids
            ]
            subjects = {p.source_id: p.subject_id for p in cand.provenance}
            if evidence:
                con.executemany(
                    "INSERT INTO candidate_evidence VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    [(c, e, r, subjects.get(e)) for c, e, r in evidence],
                )
    return counts


def _from_rows(rows: list[tuple[Any, ...]]) -> list[Candidate]:
    return [Candidate.model_validate(json.loads(r[0])) for r in rows]


def list_candidates(
    meta: MetaStore,
    *,
    status: str | None = None,
    tenant_id: str | None = None,
    namespace: str | None = None,
    kind: str | None = None,
    run_id: str | None = None,
) -> list[Candidate]:
    """Candidates matching every given filter; ``run_id`` = inserted or changed by that run."""
    clauses, params = [], []
    for column, value in (
        ("run_id", run_id),
        ("status", status),
        ("tenant_id", tenant_id),
        ("namespace", namespace),
        ("kind", kind),
    ):
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    with meta.connect() as con:
        rows = con.execute(
            f"SELECT body FROM candidates {where} ORDER BY tenant_id, namespace, candidate_id",
            params,
        ).fetchall()
    return _from_rows(rows)


def get_candidates(meta: MetaStore, ids: list[str]) -> list[Candidate]:
    if not ids:
        return []
    with meta.connect() as con:
        rows = con.execute(
            "SELECT body FROM candidates WHERE list_contains(?, candidate_id) "
            "ORDER BY candidate_id",
            [ids],
        ).fetchall()
    return _from_rows(rows)


def set_candidate_status(
    meta: MetaStore, updates: dict[str, tuple[CandidateStatus, str]], *, now: datetime
) -> None:
    """Set status and reason of several candidates in one transaction."""
    with meta.transaction() as con:
        for cid, (status, reason) in updates.items():
            con.execute(
                """UPDATE candidates SET status = ?, reason = ?, updated_at = ?,
                body = json_merge_patch(body, json_object('status', ?, 'reason', ?))
                WHERE candidate_id = ?""",
                [status.value, reason, now, status.value, reason, cid],
            )


def set_candidate_scores(
    meta: MetaStore,
    scores: dict[str, dict[str, Any]],
    *,
    now: datetime,
) -> None:
    """Record importance, scorer and any extra fields (rationale, risk flags) per candidate.

    ``scores[cid]`` holds ``importance``, ``scorer``, optional ``status`` and ``stats`` keys to
    merge into the candidate's stats (e.g. rationale, risk_flags).
    """
    with meta.transaction() as con:
        for cid, score in scores.items():
            row = con.execute(
                "SELECT body FROM candidates WHERE candidate_id = ?", [cid]
            ).fetchone()
            if row is None:
                continue
            body = json.loads(row[0])
            body["importance"] = score.get("importance")
            body["scorer"] = score.get("scorer")
            if "status" in score:
                body["status"] = score["status"]
            body["stats"] = {**body.get("stats", {}), **score.get("stats", {})}
            con.execute(
                """UPDATE candidates SET importance = ?, scorer = ?, status = ?, body = ?,
                updated_at = ? WHERE candidate_id = ?""",
                [
                    body["importance"],
                    body["scorer"],
                    body["status"],
                    json.dumps(body, sort_keys=True),
                    now,
                    cid,
                ],
            )
