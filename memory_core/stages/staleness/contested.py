"""Contested facts: new evidence against a confirmed fact that cannot supersede it.

For every active subject-scope fact, the subject's own later statements (user claims, the only
authority a preference has) about the same predicate with another object are contradicting
evidence, unless the promotion already weighed them (only statements recorded after the fact
was, and not among its sources, are new) or a reviewer settled them before
(``contest_evidence``).

* Evidence that meets the bar to supersede (an explicit change, or at least
  ``claims.min_statements`` statements of the new object) is left to the claims and promotion
  path, which supersedes the fact as before (``stages/promote/supersede.py``).
* Weaker evidence (a single statement, no explicit change) demotes the fact to ``contested``:
  still served, with a conflict marker, and queued in a ``settle`` review batch. The reviewer
  keeps the fact (active again) or overturns it (revoked through lineage); either is audited.

Tool and agent output never contests a preference: it has no authority (invariant 5), and a
tool able to demote a user's preference would be a way to plant one.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from memory_core.config import Settings
from memory_core.context import RunContext
from memory_core.models import Authority
from memory_core.stages.extract.statements import extracted_user_episodes
from memory_core.stages.mine.claims import _markers
from memory_core.stages.promote.supersede import normalise
from memory_core.stages.staleness.common import (
    current_rows,
    queue_batches,
    set_fields,
    with_vectors,
)
from memory_core.stores import Stores
from memory_core.stores.audit import record_audit
from memory_core.stores.filters import ts_literal
from memory_core.stores.lance import sql_quote
from memory_core.stores.sources import contest_seen, record_contests

__all__ = ["ContestResult", "detect_contests"]

logger = logging.getLogger(__name__)

_EPISODE_COLUMNS = [
    "episode_id", "subject_id", "namespace", "source_role", "occurred_at", "recorded_at",
    "claims", "text",
]  # fmt: skip


@dataclass
class ContestResult:
    contested: dict[str, list[str]] = field(default_factory=dict)  # fact -> episodes
    left_to_supersession: list[str] = field(default_factory=list)
    batches: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "contested": dict(sorted(self.contested.items())),
            "left_to_supersession": sorted(self.left_to_supersession),
            "settle_batches": list(self.batches),
        }


def _statements(ep: dict[str, Any]) -> list[dict[str, Any]]:
    claims = json.loads(ep.get("claims") or "[]")
    return [
        c
        for c in claims
        if (c.get("authority") or Authority.user_statement.value) == Authority.user_statement.value
    ]


def detect_contests(stores: Stores, settings: Settings, ctx: RunContext) -> ContestResult:
    """Contest active preferences contradicted by weaker evidence; queue them for settling."""
    result = ContestResult()
    facts = current_rows(
        stores, "facts", statuses=("active",), where="subject_id IS NOT NULL", vector=False
    )
    markers = _markers(settings.claims)
    seen = contest_seen(stores.meta, [f["fact_id"] for f in facts])
    # the subject's own statements, per (tenant, subject, namespace): a fact looks at its own
    by_scope: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for tenant in sorted({f["tenant_id"] for f in facts}):
        # only statements recorded after the oldest of the tenant's facts can be new evidence
        since = min(f["recorded_at"] for f in facts if f["tenant_id"] == tenant)
        where = (
            f"tenant_id = {sql_quote(tenant)} AND source_role = 'user' AND claims IS NOT NULL "
            f"AND claims != '[]' AND status = 'active' AND recorded_at > {ts_literal(since)}"
        )
        for ep in stores.lance.scan("episodes", where=where, columns=_EPISODE_COLUMNS).to_pylist():
            by_scope.setdefault((tenant, ep["subject_id"], ep["namespace"]), []).append(ep)
        # statements extracted from conversations (stages/extract) count the same way
        recent = f"source_role = 'user' AND status = 'active' AND recorded_at > {ts_literal(since)}"
        extracted = extracted_user_episodes(stores, tenant, columns=_EPISODE_COLUMNS, where=recent)
        for ep in extracted:
            by_scope.setdefault((tenant, ep["subject_id"], ep["namespace"]), []).append(ep)
    contested: list[dict[str, Any]] = []
    evidence: list[tuple[str, str, str]] = []
    for fact in facts:
        fid = fact["fact_id"]
        own = {p["source_id"] for p in json.loads(fact.get("provenance") or "[]")}
        mine = normalise(fact["object"])
        against: dict[str, list[tuple[str, bool]]] = {}
        scope = (fact["tenant_id"], fact["subject_id"], fact["namespace"])
        for ep in by_scope.get(scope, []):
            if (
                ep["episode_id"] in own
                or (fid, ep["episode_id"]) in seen
                or ep["occurred_at"] <= fact["valid_from"]
                or ep["recorded_at"] <= fact["recorded_at"]  # weighed when it was promoted
            ):
                continue
            for claim in _statements(ep):
                if claim.get("predicate") != fact["predicate"]:
                    continue
                key = normalise(str(claim.get("object", "")))
                if key == mine:
                    continue
                said = claim.get("span") or ep.get("text") or ""
                explicit = bool(markers and markers.search(said))
                against.setdefault(key, []).append((ep["episode_id"], explicit))
        if not against:
            continue
        counts = Counter({k: len({e for e, _ in v}) for k, v in against.items()})
        if any(
            any(x for _, x in v) or counts[k] >= settings.claims.min_statements
            for k, v in against.items()
        ):
            result.left_to_supersession.append(fid)
            continue
        episodes = sorted({e for v in against.values() for e, _ in v})
        result.contested[fid] = episodes
        contested.append({**fact, "status": "contested"})
        evidence += [(fid, e, fact["tenant_id"]) for e in episodes]
    if ctx.dry_run:
        return result
    if contested:
        set_fields(stores, ctx, "facts", with_vectors(stores, "facts", contested))
        with stores.meta.transaction() as con:
            record_contests(con, evidence, now=ctx.now)
            record_audit(
                con, at=ctx.now, action="contested", run_id=ctx.run_id, actor=ctx.actor,
                counts={"contested": len(contested)}, detail={"evidence": result.contested},
            )  # fmt: skip
        logger.info("contested %d fact(s)", len(contested))
    # every contested fact not in an open batch (new, or its batch expired undecided)
    waiting = current_rows(stores, "facts", statuses=("contested",), vector=False)
    result.batches = queue_batches(
        stores, settings, ctx, "settle",
        [(f["tenant_id"], f["namespace"], f["fact_id"]) for f in waiting],
    )  # fmt: skip
    return result
