"""Reviewers' decisions on staleness batches, whose items are records rather than candidates.

``memctl review approve|reject BATCH`` ends in ``stages.review.decide_batch``, which hands
batches of these kinds here. What a decision does, per kind:

============  ==========================================  =====================================
kind          approve                                     reject (a reason is required)
============  ==========================================  =====================================
revalidate    still true: active again, re-bound to the   no longer true: revoked through
              sources' current revisions                  lineage (``revoke.revoke_source``)
settle        keep the fact: active again; the            overturn it: revoked through lineage
              contradicting statements are settled
failures      confirm the rollback                        dispute it: recorded for follow-up
============  ==========================================  =====================================

The change reaches the Lance row in the same call (one commit per table), so an open
``Recaller`` sees it on its next query. Decisions, an audit event and a receipt are written in
one DuckDB transaction after the effects, which are idempotent: a decision interrupted between
the two is applied again, not twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from memory_core.config import Settings
from memory_core.context import RunContext
from memory_core.errors import InvalidReview
from memory_core.models import stable_id
from memory_core.stages.forget.revoke import revoke_source
from memory_core.stages.review.decisions import DecisionResult, ReviewRequest, validate_request
from memory_core.stages.staleness.common import REVIEW_KINDS, current_rows, set_fields
from memory_core.stores import Stores
from memory_core.stores.audit import record_audit, store_receipt
from memory_core.stores.facts import MemoryTable
from memory_core.stores.lance import sql_quote
from memory_core.stores.review import (
    BatchState,
    Decision,
    ItemRow,
    record_decisions,
    set_batch_status,
)
from memory_core.stores.sources import list_sources, settle_contests

__all__ = ["RECORD_KINDS", "RecordDecisionResult", "decide_record_batch"]

RECORD_KINDS = REVIEW_KINDS


@dataclass
class RecordDecisionResult(DecisionResult):
    effects: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {**super().as_dict(), "effects": list(self.effects)}


def _find(stores: Stores, record_id: str) -> tuple[MemoryTable, dict[str, Any]] | None:
    for table, id_col in (("facts", "fact_id"), ("procedures", "procedure_id")):
        rows = current_rows(
            stores, table,  # type: ignore[arg-type]
            statuses=("active", "stale", "contested", "canary", "deprecated"),
            where=f"{id_col} = {sql_quote(record_id)}",
        )  # fmt: skip
        if rows:
            return table, rows[0]  # type: ignore[return-value]
    return None


def _rebind(stores: Stores, row: dict[str, Any]) -> dict[str, Any]:
    current = {s.source_id: s for s in list_sources(stores.meta) if not s.deleted}
    refs = []
    for ref in json.loads(row.get("sources") or "[]"):
        src = current.get(ref["source_id"])
        refs.append({**ref, "revision": src.revision} if src else ref)
    return {**row, "status": "active", "sources": json.dumps(refs, sort_keys=True)}


def _apply(
    stores: Stores, settings: Settings, ctx: RunContext, kind: str, record_id: str, *,
    approve: bool, request: ReviewRequest,
) -> dict[str, Any]:  # fmt: skip
    found = _find(stores, record_id)
    expected = {"revalidate": "stale", "settle": "contested", "failures": "deprecated"}[kind]
    if found is None or found[1]["status"] != expected:
        status = found[1]["status"] if found else "gone"
        return {"id": record_id, "action": "skipped", "reason": f"no longer {expected} ({status})"}
    table, row = found
    who = request.reviewer
    if kind == "failures":
        action = "rollback_confirmed" if approve else "rollback_disputed"
        return {"id": record_id, "action": action}
    if approve:
        new = _rebind(stores, row) if kind == "revalidate" else {**row, "status": "active"}
        set_fields(stores, ctx, table, [new])
        with stores.meta.transaction() as con:
            if kind == "revalidate":
                for ref in json.loads(new.get("sources") or "[]"):
                    con.execute(
                        "UPDATE lineage SET source_hash = ? WHERE derived_id = ? AND source_id = ?",
                        [ref.get("revision"), record_id, ref["source_id"]],
                    )
            else:
                settle_contests(con, record_id, now=ctx.now, settlement="kept")
        return {"id": record_id, "action": "revalidated" if kind == "revalidate" else "kept"}
    what = "re-validation rejected" if kind == "revalidate" else "contest settled against it"
    reason = f"{what} by {who}: {request.reason.strip()}"
    receipt = revoke_source(stores, settings, ctx, record_id, reason=reason).receipt
    if kind == "settle":
        with stores.meta.transaction() as con:
            settle_contests(con, record_id, now=ctx.now, settlement="overturned")
    return {"id": record_id, "action": "revoked", "receipt_id": receipt["receipt_id"]}


def decide_record_batch(
    stores: Stores, settings: Settings, ctx: RunContext, state: BatchState, request: ReviewRequest
) -> RecordDecisionResult:
    """Apply ``request`` to a revalidate, settle or failures batch (see the module docstring)."""
    batch, items = state.batch, dict(state.items)
    undecided, same = validate_request(batch, items, request)
    if request.edits:
        msg = f"edits do not apply to a {batch.kind} batch: approve or reject the records"
        raise InvalidReview(batch.batch_id, msg, field="edits")
    result = RecordDecisionResult(
        batch.batch_id, request.decision, request.reviewer, batch.status,
        decided=list(undecided), already_decided=list(same), flow_run_id=batch.flow_run_id,
    )  # fmt: skip
    if not undecided or ctx.dry_run:
        return result
    approve = request.decision == "approve"
    for rid in undecided:
        result.effects.append(
            _apply(stores, settings, ctx, batch.kind, rid, approve=approve, request=request)
        )
    decision = Decision.approve.value if approve else Decision.reject.value
    decided = [
        ItemRow(batch.batch_id, rid, decision, reason=request.reason.strip() or None,
                reviewer=request.reviewer, decided_at=ctx.now)
        for rid in undecided
    ]  # fmt: skip
    counts: dict[str, int] = {}
    for effect in result.effects:
        counts[effect["action"]] = counts.get(effect["action"], 0) + 1
    with stores.meta.transaction() as con:
        record_decisions(con, decided)
        result.status = set_batch_status(
            con, batch.batch_id, now=ctx.now, reviewer=request.reviewer, reason=request.reason
        ).value
        record_audit(
            con, at=ctx.now, action=f"{batch.kind}_decision", run_id=ctx.run_id,
            actor=request.reviewer, target=batch.batch_id, tenant_id=batch.tenant_id,
            counts=counts,
            detail={"decision": request.decision, "effects": result.effects,
                    "reason": request.reason.strip() or None},
        )  # fmt: skip
        store_receipt(
            con,
            receipt_id=stable_id(
                "rcpt", batch.kind, batch.batch_id, request.reviewer, ctx.now.isoformat(), undecided
            ),
            kind=f"{batch.kind}_decision",
            at=ctx.now,
            run_id=ctx.run_id,
            body={"who": request.reviewer, "what": request.decision, "batch_id": batch.batch_id,
                  "when": ctx.now.isoformat(), "effects": result.effects},
        )  # fmt: skip
    return result
