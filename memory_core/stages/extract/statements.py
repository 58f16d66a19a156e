"""Extracted facts as claims-path input, and the rule that proposes them.

The claims path (``stages/claims.py``) already knows how statements of one subject about one
predicate become candidates: it orders them in valid time, resolves explicit changes, makes
the current object ``pending_score`` and links what it supersedes, and counts statements
without authority as blocked preference writes. Extracted facts enter that same path as
claims on their evidence episodes (``extracted_claim_rows``), so contradiction, supersession
and the audit of blocked writes follow the rules that already exist:

* a fact with ``user_statement`` authority becomes one claim on each episode in which the
  subject said it (its ``self_evidence``), under its paraphrase group's predicate and object;
* a fact without authority (an agent's, a tool's or another person's statement about the
  user) becomes an ``authority: none`` claim on its evidence episodes: blocked and audited,
  never a preference.

``proposal_rule`` decides when the statements of one object are enough for a candidate:
``min_sessions`` distinct sessions and ``min_episodes`` distinct episodes, or a single
explicit statement of the user about themself with importance >= the configured minimum.
That importance is the answer's own 1-5 score, or, when the answer carries none (replayed
annotations), the labelled heuristic's (``importance.py``), computed here and never stored.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from memory_core.config import ExtractConfig
from memory_core.context import Partition
from memory_core.stages.extract.importance import fact_importance
from memory_core.stages.extract.rules import norm
from memory_core.stages.mine.claims import Statement
from memory_core.stages.partitions import active_episodes_where
from memory_core.stores import Stores
from memory_core.stores.extract import extracted_facts, facts_for_episodes
from memory_core.stores.folded import folded_episodes
from memory_core.stores.lance import sql_quote

__all__ = [
    "extracted_claim_rows",
    "extracted_user_episodes",
    "folded_evidence",
    "proposal_rule",
    "with_extracted_claims",
]

_COLUMNS = ["episode_id", "subject_id", "session_id", "occurred_at", "source_role", "text",
            "content_hash"]  # fmt: skip


def proposal_rule(config: ExtractConfig) -> Callable[[Sequence[Statement]], bool]:
    """Whether the statements of one object are enough evidence to propose it."""

    def enough(mine: Sequence[Statement]) -> bool:
        episodes = {s.episode_id for s in mine}
        sessions = {s.session_id or s.episode_id for s in mine}
        if len(sessions) >= config.min_sessions and len(episodes) >= config.min_episodes:
            return True
        return any(
            s.extracted and (s.importance or 0) >= config.single_statement_min_importance
            for s in mine
        )

    return enough


def _episodes(stores: Stores, partition: Partition, ids: set[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    ordered = sorted(ids)
    for start in range(0, len(ordered), 500):
        chunk = ", ".join(sql_quote(i) for i in ordered[start : start + 500])
        where = f"{active_episodes_where(partition)} AND episode_id IN ({chunk})"
        for row in stores.lance.scan("episodes", where=where, columns=_COLUMNS).to_pylist():
            out[row["episode_id"]] = row
    return out


def folded_evidence(
    stores: Stores,
    partition: Partition,
    ids: set[str],
    said: set[str],
    sessions: dict[str, str],
) -> dict[str, dict[str, Any]]:
    """Claims-path rows for evidence turns compaction folded into an active digest.

    A compaction is not a deletion of content (``stores/folded.py``): the fact keeps counting
    the turn under its own id and session. The role is ``user`` for a turn in which the
    subject stated the fact (``said``: extraction derived it from the turn's source role), the
    only role the claims path needs.
    """
    rows = folded_episodes(stores.lance, stores.meta, partition.tenant_id, ids)
    out: dict[str, dict[str, Any]] = {}
    for eid, row in rows.items():
        if row["namespace"] != partition.namespace or row["status"] != "active":
            continue
        session = sessions.get(eid, "")
        out[eid] = {
            **{c: row[c] for c in _COLUMNS},
            "session_id": None if session.startswith("episode:") else session or None,
            "source_role": "user" if eid in said else None,
        }
    return out


def extracted_claim_rows(stores: Stores, partition: Partition) -> list[dict[str, Any]]:
    """Episode-shaped rows carrying the partition's extracted facts as claims."""
    facts = extracted_facts(
        stores.meta, tenant_id=partition.tenant_id, namespace=partition.namespace
    )
    if not facts:
        return []
    wanted = {e for f in facts for e in (f.self_evidence if f.authority != "none" else f.evidence)}
    episodes = _episodes(stores, partition, wanted)
    said = {e for f in facts if f.authority != "none" for e in f.self_evidence}
    sessions = {e: f.session_key for f in facts for e in f.evidence}
    episodes.update(folded_evidence(stores, partition, wanted - set(episodes), said, sessions))
    claims: dict[str, dict[tuple[str, str, str], dict[str, Any]]] = {}
    for f in facts:
        blocked = f.authority == "none"
        predicate = f.group_predicate or f.predicate
        obj = f.group_object or f.object
        for episode_id in f.evidence if blocked else f.self_evidence:
            if episode_id not in episodes:
                continue  # forgotten or expired since (not folded): no longer counts
            key = (predicate, norm(obj), f.authority)
            mine = claims.setdefault(episode_id, {})
            best = mine.get(key)
            importance, source = fact_importance(f)
            if best is None or importance > (best.get("importance") or 0):
                mine[key] = {
                    "predicate": predicate, "object": obj, "span": None,
                    "authority": f.authority, "extracted": True, "importance": importance,
                    "importance_source": source, "subject_id": f.subject_id,
                }  # fmt: skip
    rows = []
    for episode_id in sorted(claims):
        ep = episodes[episode_id]
        items = list(claims[episode_id].values())
        rows.append({**ep, "claims": items, "actions": [], "conditions": {}})
    return rows


def with_extracted_claims(
    meta: Any, episodes: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """The episodes with their extracted user statements added to ``claims``, for the
    commit-time gate: a fact extracted from what the user said carries the same
    ``user_statement`` authority a claim structured at ingest does (both stamped by code from
    the source role and the subject), so the gate checks both the same way. A turn folded into
    a digest (``stores/folded.py``, no role kept) is the user's when a fact's ``self_evidence``
    names it: extraction stamped that from the turn's source role."""
    facts = [f for f in facts_for_episodes(meta, episodes) if f.authority == "user_statement"]
    if not facts:
        return episodes
    out = dict(episodes)
    for f in facts:
        for eid in f.self_evidence:
            ep = out.get(eid)
            if ep is None or ep.get("subject_id") != f.subject_id:
                continue
            if ep.get("folded_into") and ep.get("source_role") is None:
                # a digest line keeps no role; extraction derived this turn's from it
                ep = {**ep, "source_role": "user"}
            claims = ep.get("claims")
            claims = json.loads(claims) if isinstance(claims, str) else list(claims or [])
            claims.append({
                "predicate": f.group_predicate or f.predicate,
                "object": f.group_object or f.object, "span": None,
                "authority": f.authority, "extracted": True,
            })  # fmt: skip
            out[eid] = {**ep, "claims": claims}
    return out


def extracted_user_episodes(
    stores: Stores, tenant_id: str, *, where: str, columns: list[str]
) -> list[dict[str, Any]]:
    """Episodes (``columns``, matching ``where``) in which a user of the tenant stated an
    extracted fact about themself, with those statements in ``claims`` (JSON): what the
    staleness stage reads as a subject's own later statements."""
    facts = extracted_facts(stores.meta, tenant_id=tenant_id)
    ids = sorted({e for f in facts if f.authority == "user_statement" for e in f.self_evidence})
    rows: dict[str, dict[str, Any]] = {}
    for start in range(0, len(ids), 500):
        chunk = ", ".join(sql_quote(i) for i in ids[start : start + 500])
        clause = f"tenant_id = {sql_quote(tenant_id)} AND ({where}) AND episode_id IN ({chunk})"
        for row in stores.lance.scan("episodes", where=clause, columns=columns).to_pylist():
            rows[row["episode_id"]] = row
    out = with_extracted_claims(stores.meta, rows)
    return [{**ep, "claims": json.dumps(ep.get("claims") or [])} for ep in out.values()]
