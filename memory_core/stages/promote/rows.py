"""Rows and lineage of promoted memories, built from an approved candidate and its episodes.

A derived row takes from its sources: the highest sensitivity, the earliest expiry (it must
not outlive what it rests on), the purpose when all sources share one, and provenance (id,
kind, content hash, subject) of each. Lineage edges go from the row to every source episode,
to corpus documents and facts the episodes relied on, to a procedure the episodes followed,
and from a row version to the version it replaced, so forgetting a source reaches every
version derived from it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from memory_core.models import Candidate, Status, canonical_json, stable_id
from memory_core.stages.promote.commit_gate import GateResult
from memory_core.stages.promote.plan import PromotionPlan
from memory_core.stages.promote.supersede import normalise, row_hash
from memory_core.stores.facts import episodes_by_ids, existing_ids
from memory_core.stores.folded import folded_episodes
from memory_core.stores.lance import LanceStore
from memory_core.stores.lineage import Edge
from memory_core.stores.meta import MetaStore

__all__ = ["evidence_episodes", "fact_row", "fact_text", "lineage_for", "procedure_row"]

_EPISODE_COLUMNS = [
    "episode_id", "tenant_id", "subject_id", "namespace", "status", "source_role",
    "occurred_at", "goal", "outcome", "claims", "text", "content_hash", "sensitivity",
    "purpose", "expires_at", "sources", "procedure_id",
]  # fmt: skip
_SENSITIVITY = {"low": 0, "medium": 1, "high": 2}


def evidence_episodes(
    lance: LanceStore, candidates: Sequence[Candidate], meta: MetaStore | None = None
) -> dict[str, dict[str, Any]]:
    """Support and counterexample episodes of the candidates, read per tenant; with ``meta``,
    an episode compaction folded into a digest is read back from its line (a compaction is
    not a deletion of content: ``stores/folded.py``)."""
    wanted: dict[str, set[str]] = {}
    for c in candidates:
        wanted.setdefault(c.tenant_id, set()).update(c.support_ids, c.counterexample_ids)
    out: dict[str, dict[str, Any]] = {}
    for tenant, ids in sorted(wanted.items()):
        for row in episodes_by_ids(lance, tenant, sorted(ids), _EPISODE_COLUMNS):
            out[row["episode_id"]] = row
        if meta is not None:
            out.update(folded_episodes(lance, meta, tenant, ids - set(out)))
    return out


def _inherited(sources: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    sensitivity = max(
        (str(s.get("sensitivity") or "low") for s in sources),
        key=lambda v: _SENSITIVITY.get(v, 0),
        default="low",
    )
    purposes = {s.get("purpose") for s in sources}
    expiries = [s["expires_at"] for s in sources if s.get("expires_at") is not None]
    return {
        "sensitivity": sensitivity,
        "purpose": purposes.pop() if len(purposes) == 1 else None,
        "expires_at": min(expiries) if expiries else None,
        "provenance": canonical_json(
            [
                {
                    "source_id": s["episode_id"],
                    "source_kind": "episode",
                    "content_hash": s.get("content_hash"),
                    "subject_id": s.get("subject_id"),
                }
                for s in sources
            ]
        ),
        "sources": canonical_json(
            [
                {"source_id": sid, "revision": rev}
                for sid, rev in sorted(
                    {
                        (ref["source_id"], ref.get("revision") or "")
                        for s in sources
                        for ref in json.loads(s.get("sources") or "[]")
                    }
                )
            ]
        ),
    }


def _valid_from(candidate: Candidate, sources: Sequence[Mapping[str, Any]], now: datetime) -> Any:
    value = candidate.stats.get("valid_from")
    if value:
        return datetime.fromisoformat(str(value))
    if candidate.claim is not None and not candidate.stats.get("twin_of"):
        times = [s["occurred_at"] for s in sources if s.get("occurred_at") is not None]
        if times:
            return min(times)
    return now  # procedures and insights are valid from their approval


def _common(
    candidate: Candidate, gate: GateResult, sources: Sequence[Mapping[str, Any]], now: datetime,
    approver: str,
) -> dict[str, Any]:  # fmt: skip
    return {
        "tenant_id": candidate.tenant_id,
        "subject_id": candidate.subject_id,
        "namespace": candidate.namespace,
        "status": Status.active.value,
        "valid_from": _valid_from(candidate, sources, now),
        "valid_to": None,
        "recorded_at": now,
        "recorded_to": None,
        "authority": gate.authority.value,
        "confidence": candidate.confidence,
        "importance": candidate.importance,
        "embedding_version": "",
        "policy_version": candidate.policy_version,
        "supersedes": None,
        "superseded_by": None,
        "candidate_id": candidate.candidate_id,
        "approver": approver,
        "vector": None,
        **_inherited(sources),
    }


def fact_text(who: str, predicate: str, obj: str) -> str:
    """What a fact reads as: ``who: predicate = object``, or the object alone when it is a
    statement (three words or more) that names its subject.

    Why: an extracted object is often a whole statement ("Joanna is allergic to cats"); the
    subject and the predicate key in front of it ("Joanna: allergy = Joanna is ...") repeat it
    and cost tokens on every read, which is room the context budget could give another
    record, and put the subject's name twice into the text that is searched. A short value
    ("team-a: owner = Mina") needs both, and keeps them.
    """
    statement = len(obj.split()) >= 3  # "Mina" or "Mina Li" alone is a value, not a statement
    if statement and who and re.search(rf"(?<![\w-]){re.escape(who)}(?![\w-])", obj, re.IGNORECASE):
        return obj
    return f"{who}: {predicate} = {obj}"


def fact_row(
    candidate: Candidate,
    gate: GateResult,
    episodes: Mapping[str, Mapping[str, Any]],
    *,
    now: datetime,
    approver: str,
) -> dict[str, Any]:
    """The facts row an approved semantic candidate becomes (id and hash included)."""
    assert candidate.claim is not None
    sources = [episodes[e] for e in gate.sources if e in episodes]
    row = _common(candidate, gate, sources, now, approver)
    conditions = canonical_json(candidate.conditions)
    who = candidate.subject_id or candidate.tenant_id
    row.update(
        predicate=candidate.claim.predicate,
        object=candidate.claim.object,
        conditions=conditions,
        text=fact_text(who, candidate.claim.predicate, candidate.claim.object),
    )
    row["fact_id"] = stable_id(
        "fact",
        candidate.candidate_id,
        [candidate.tenant_id, candidate.namespace, candidate.subject_id, candidate.claim.predicate],
        conditions,
        normalise(candidate.claim.object),
        row["valid_from"].isoformat(),
    )
    row["content_hash"] = row_hash("facts", row)
    return row


def procedure_row(
    candidate: Candidate,
    gate: GateResult,
    episodes: Mapping[str, Mapping[str, Any]],
    *,
    now: datetime,
    approver: str,
) -> dict[str, Any]:
    """The procedures row (without id and version: they depend on the current version)."""
    assert candidate.procedure is not None
    spec = candidate.procedure
    sources = [episodes[e] for e in gate.sources if e in episodes]
    row = _common(candidate, gate, sources, now, approver)
    problem = spec.name.split(":", 1)[0].strip() if ":" in spec.name else spec.name
    pre = ", ".join(f"{k}={v}" for k, v in sorted(spec.preconditions.items()))
    row.update(
        procedure_id="",
        name=spec.name,
        version="",
        steps=list(spec.steps),
        preconditions=canonical_json(spec.preconditions),
        effect=candidate.stats.get("effect") or f"resolves {problem}",
        rollback=candidate.stats.get("rollback"),
        text=f"{spec.name}: " + "; ".join(spec.steps) + (f" (when {pre})" if pre else ""),
    )
    return row


def lineage_for(
    lance: LanceStore, plans: Iterable[PromotionPlan], episodes: Mapping[str, Mapping[str, Any]]
) -> list[Edge]:
    """Edges of every row a commit inserts (see the module docstring)."""
    edges: list[Edge] = []
    cited: dict[str, tuple[str, str, str | None]] = {}  # derived id -> (kind, source, revision)
    followed: list[tuple[str, str, str]] = []
    for plan in plans:
        kind = "fact" if plan.table == "facts" else "procedure"
        for row_id, row in plan.insert.items():
            scope = {"tenant_id": row["tenant_id"]}
            if row_id in plan.versions:
                old = plan.versions[row_id]
                edges.append(
                    Edge(row_id, kind, old, kind, None, subject_id=row.get("subject_id"), **scope)
                )
                continue
            for src in json.loads(row["provenance"] or "[]"):
                ep = episodes.get(src["source_id"], {})
                edges.append(
                    Edge(
                        row_id, kind, src["source_id"], "episode", src.get("content_hash"),
                        subject_id=src.get("subject_id"), **scope,
                    )
                )  # fmt: skip
                for ref in json.loads(ep.get("sources") or "[]"):
                    cited[f"{row_id}\x00{ref['source_id']}"] = (
                        kind,
                        ref["source_id"],
                        ref.get("revision"),
                    )
                if ep.get("procedure_id"):
                    followed.append((row_id, kind, ep["procedure_id"]))
    tenant = {e.derived_id: e.tenant_id for e in edges}
    facts: set[str] = set()
    procs: set[str] = set()
    for t in sorted({v for v in tenant.values() if v}):
        mine = {k for k, v in tenant.items() if v == t}
        facts |= existing_ids(
            lance, "facts", {s for k, (_, s, _) in cited.items() if k.split("\x00")[0] in mine},
            tenant_id=t,
        )  # fmt: skip
        procs |= existing_ids(
            lance, "procedures", {p for d, _, p in followed if d in mine}, tenant_id=t
        )
    for key, (kind, source, revision) in sorted(cited.items()):
        derived = key.split("\x00", 1)[0]
        source_kind = "fact" if source in facts else "corpus"
        edges.append(
            Edge(derived, kind, source, source_kind, revision, tenant_id=tenant.get(derived))
        )
    for derived, kind, proc in sorted(set(followed)):
        if proc in procs and proc != derived:
            edges.append(
                Edge(derived, kind, proc, "procedure", None, tenant_id=tenant.get(derived))
            )
    return edges
