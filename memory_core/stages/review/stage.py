"""Review batches: scored candidates grouped for people, decided, then committed.

``build_review_batches`` (the nightly flow calls it after scoring) does three things:

1. expires open batches nobody decided within ``review.expire_after_days``: their undecided
   candidates go back to the queue (still ``pending_review``, no longer in an open batch);
2. auto-approves, when ``review.auto_approve_user_semantic`` is on, preferences from the
   user's own statements at or above ``review.auto_approve_min_confidence`` that carry no risk
   flag; they go through the same commit path and gate as a human approval;
3. groups the queue by (tenant, namespace, kind) into batches of at most
   ``review.max_batch_items`` items, most important first.

A semantic insight twin (``stats.twin_of``) is not an item of its own while its procedure is
in review: it is shown with the procedure and follows its decision, because it states the
same evidence in other words and a reviewer should not decide it twice (or differently).

``decide_batch`` records a reviewer's decision (per item, with edits) and commits what was
approved; the CLI and the Prefect form both call it. It is idempotent: items already decided
are not decided again, and approved items already promoted are not committed again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from memory_core.config import Settings
from memory_core.context import Partition, RunContext
from memory_core.crash import crash_point
from memory_core.embed import Embedder
from memory_core.errors import InvalidReview, NotFound
from memory_core.models import Candidate, CandidateKind, CandidateStatus, stable_id
from memory_core.stages.promote.result import CommitResult
from memory_core.stages.promote.stage import commit_candidates
from memory_core.stages.review.decisions import (
    AUTO_REVIEWER,
    DecisionResult,
    EditError,
    ItemEdit,
    ReviewRequest,
    apply_edit,
    is_twin,
    validate_request,
)
from memory_core.stages.staleness.settle import RECORD_KINDS, decide_record_batch
from memory_core.stores import Stores
from memory_core.stores.audit import record_audit, store_receipt
from memory_core.stores.candidates import get_candidates, status_keys
from memory_core.stores.review import (
    BatchRow,
    BatchState,
    BatchStatus,
    Decision,
    ItemRow,
    candidates_in_open_batches,
    expire_batches,
    insert_batches,
    load_batch_state,
    record_decisions,
    review_rounds,
    set_batch_status,
    set_candidate_outcomes,
)

__all__ = [
    "DecisionResult",
    "ReviewBatchResult",
    "build_review_batches",
    "decide_batch",
]

logger = logging.getLogger(__name__)

# Flags that keep a preference from auto-approval: a person must look at it.
_HOLD_FLAGS = frozenset({"instruction_like", "sensitive", "conflict"})


@dataclass
class ReviewBatchResult:
    """What one build did; ``as_dict`` is what the nightly flow publishes."""

    run_id: str
    expired: list[str] = field(default_factory=list)
    returned_to_queue: int = 0
    created: list[str] = field(default_factory=list)
    items: int = 0
    twins_attached: int = 0
    auto_approved: list[dict[str, Any]] = field(default_factory=list)
    partitions: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "expired_batches": list(self.expired),
            "returned_to_queue": self.returned_to_queue,
            "created_batches": list(self.created),
            "items": self.items,
            "twins_attached": self.twins_attached,
            "auto_approved": list(self.auto_approved),
            "items_by_partition": dict(sorted(self.partitions.items())),
        }


def _priority(c: Candidate) -> tuple[float, str]:
    return (-(c.importance if c.importance is not None else -1.0), c.candidate_id)


def _auto_eligible(c: Candidate, settings: Settings) -> bool:
    cfg = settings.review
    flags = set(c.stats.get("risk_flags") or [])
    return (
        cfg.auto_approve_user_semantic
        and c.kind is CandidateKind.semantic
        and not is_twin(c)
        and c.subject_id is not None
        and c.authority.value == "user_statement"
        and c.confidence >= cfg.auto_approve_min_confidence
        and not (flags & _HOLD_FLAGS)
        and not c.stats.get("conflict")
    )


def _batch_rows(
    groups: dict[tuple[str, str, str], list[Candidate]],
    ctx: RunContext,
    settings: Settings,
    *,
    rounds: dict[str, int],
    status: BatchStatus = BatchStatus.open,
    reviewer: str | None = None,
) -> tuple[list[BatchRow], list[ItemRow]]:
    size = settings.review.max_batch_items
    expires = ctx.now + timedelta(days=settings.review.expire_after_days)
    batches: list[BatchRow] = []
    items: list[ItemRow] = []
    decided = status is not BatchStatus.open
    for (tenant, namespace, kind), cands in sorted(groups.items()):
        cands = sorted(cands, key=_priority)
        for start in range(0, len(cands), size):
            chunk = cands[start : start + size]
            ids = [c.candidate_id for c in chunk]
            seen = sum(rounds.get(c, 0) for c in ids)
            batch_id = stable_id("batch", tenant, namespace, kind, ctx.now.isoformat(), ids, seen)
            batches.append(
                BatchRow(
                    batch_id, tenant, namespace, kind, status.value, len(chunk), ctx.now,
                    expires, decided_at=ctx.now if decided else None, reviewer=reviewer,
                )
            )  # fmt: skip
            items.extend(
                ItemRow(
                    batch_id, cid,
                    decision=Decision.approve.value if decided else None,
                    reviewer=reviewer, decided_at=ctx.now if decided else None,
                )
                for cid in ids
            )  # fmt: skip
    return batches, items


def _commit_unfinished_auto_batches(
    stores: Stores, settings: Settings, ctx: RunContext, pending: AbstractSet[str]
) -> tuple[list[CommitResult], set[str]]:
    """Finish auto-approved batches a killed run wrote but did not commit.

    Such a batch is ``approved`` while its candidates are still ``pending_review``; without
    this they would be batched again under a new id and the old batch would stay approved
    with nothing promoted. They are committed in their own batch, as the killed run would have.
    """
    if not pending:  # the ids of the pending_review candidates
        return [], set()
    with stores.meta.connect() as con:
        rows = con.execute(
            """SELECT i.batch_id, i.candidate_id FROM review_items i
            JOIN review_batches b ON b.batch_id = i.batch_id
            WHERE b.status = 'approved' AND b.reviewer = ? ORDER BY i.batch_id, i.candidate_id""",
            [AUTO_REVIEWER],
        ).fetchall()
    # the queue was read without evidence pins: what is committed is read whole
    whole = {
        c.candidate_id: c for c in get_candidates(stores.meta, [c for _, c in rows if c in pending])
    }
    by_batch: dict[str, list[Candidate]] = {}
    for batch_id, cid in rows:
        if cid in whole:
            by_batch.setdefault(batch_id, []).append(whole[cid])
    done = [
        commit_candidates(stores, settings, ctx, cands, reviewer=AUTO_REVIEWER, batch_id=batch_id)
        for batch_id, cands in sorted(by_batch.items())
    ]
    return done, {c.candidate_id for cands in by_batch.values() for c in cands}


def build_review_batches(stores: Stores, settings: Settings, ctx: RunContext) -> ReviewBatchResult:
    """Expire stale batches, auto-approve what config allows, batch the rest of the queue."""
    result = ReviewBatchResult(run_id=ctx.run_id)
    if not ctx.dry_run:
        with stores.meta.transaction() as con:
            for batch, returned in expire_batches(con, now=ctx.now):
                result.expired.append(batch.batch_id)
                result.returned_to_queue += len(returned)
                record_audit(
                    con, at=ctx.now, action="review_batch_expired", run_id=ctx.run_id,
                    actor=ctx.actor, target=batch.batch_id, tenant_id=batch.tenant_id,
                    counts={"returned_to_queue": len(returned)},
                )  # fmt: skip
    # The queue is picked by id, kind and twin first, and only what it takes is read, without
    # evidence pins (most of a body: at 1M episodes ~4.5k pending bodies of ~12 KB were
    # validated every night; a stable queue's candidates sit in open batches, BENCHMARKS.md
    # s45); what gets committed is read whole below.
    pending = status_keys(stores.meta, CandidateStatus.pending_review.value)
    if not ctx.dry_run:
        done, committed = _commit_unfinished_auto_batches(
            stores, settings, ctx, {cid for cid, _, _ in pending}
        )
        result.auto_approved.extend(r.as_dict() for r in done)
        pending = [key for key in pending if key[0] not in committed]
    with stores.meta.connect() as con:
        in_review = candidates_in_open_batches(con)
        rounds = review_rounds(con)
    procedures = {cid for cid, kind, _ in pending if kind == CandidateKind.procedural.value}
    wanted: list[str] = []
    for cid, kind, twin_of in pending:
        if cid in in_review:
            continue
        if kind == CandidateKind.semantic.value and twin_of and twin_of in procedures:
            result.twins_attached += 1  # an insight twin follows its procedure (is_twin)
            continue
        wanted.append(cid)
    found = {c.candidate_id: c for c in get_candidates(stores.meta, wanted, pins=False)}
    queue = [found[cid] for cid in wanted if cid in found]
    auto = [c for c in queue if _auto_eligible(c, settings)]
    auto_ids = {c.candidate_id for c in auto}
    groups: dict[tuple[str, str, str], list[Candidate]] = {}
    for cand in queue:
        if cand.candidate_id not in auto_ids:
            groups.setdefault((cand.tenant_id, cand.namespace, cand.kind.value), []).append(cand)
    batches, items = _batch_rows(groups, ctx, settings, rounds=rounds)
    auto_groups: dict[tuple[str, str, str], list[Candidate]] = {}
    for cand in auto:
        auto_groups.setdefault((cand.tenant_id, cand.namespace, cand.kind.value), []).append(cand)
    auto_batches, auto_items = _batch_rows(
        auto_groups, ctx, settings, rounds=rounds, status=BatchStatus.approved,
        reviewer=AUTO_REVIEWER,
    )  # fmt: skip
    result.created = [b.batch_id for b in batches]
    result.items = len(items)
    for b in batches:
        key = Partition(b.tenant_id, b.namespace).key
        result.partitions[key] = result.partitions.get(key, 0) + b.item_count
    if ctx.dry_run or not (batches or auto_batches):
        return result  # nothing to batch: a rerun with no new work writes nothing
    with stores.meta.transaction() as con:
        insert_batches(con, [*batches, *auto_batches], [*items, *auto_items])
        record_audit(
            con, at=ctx.now, action="review_batches_built", run_id=ctx.run_id, actor=ctx.actor,
            counts={
                "batches": len(batches), "items": len(items), "auto_approved": len(auto),
                "expired": len(result.expired), "twins_attached": result.twins_attached,
            },
            detail={"batches": result.created},
        )  # fmt: skip
    crash_point("review.batched")
    by_batch: dict[str, list[Candidate]] = {}
    cand_by_id = {c.candidate_id: c for c in get_candidates(stores.meta, sorted(auto_ids))}
    for item in auto_items:
        by_batch.setdefault(item.batch_id, []).append(cand_by_id[item.candidate_id])
    for batch_id, cands in sorted(by_batch.items()):
        done = commit_candidates(
            stores, settings, ctx, cands, reviewer=AUTO_REVIEWER, batch_id=batch_id
        )
        result.auto_approved.append(done.as_dict())
    logger.info(
        "review run=%s expired=%d returned=%d batches=%d items=%d auto=%d",
        ctx.run_id, len(result.expired), result.returned_to_queue, len(batches), len(items),
        len(auto),
    )  # fmt: skip
    return result


def _edited(
    batch_id: str, cands: Sequence[Candidate], edits: dict[str, ItemEdit]
) -> list[Candidate]:
    out = []
    for cand in cands:
        try:
            out.append(apply_edit(cand, edits.get(cand.candidate_id)))
        except EditError as exc:
            field_name = f"edits.{exc.field}"
            raise InvalidReview(
                batch_id, exc.reason, candidate_id=cand.candidate_id, field=field_name
            ) from exc
    return out


def decide_batch(
    stores: Stores,
    settings: Settings,
    ctx: RunContext,
    batch_id: str,
    request: ReviewRequest,
    *,
    embedder: Embedder | None = None,
) -> DecisionResult:
    """Record ``request`` on the batch and commit every approved, not yet promoted item.

    Three DuckDB connections in all (read, decide, commit record): each open and close of the
    file costs tens of milliseconds, and a CLI call or a flow holds it only that long.
    """
    state = load_batch_state(stores.meta, batch_id)
    if state is None:
        what, hint = "review batch", "list batches with `memctl review list`"
        raise NotFound(what, batch_id, hint)
    if state.batch.kind in RECORD_KINDS:  # items are records (stale, contested, rolled back)
        return decide_record_batch(stores, settings, ctx, state, request)
    batch, items, cands = state.batch, dict(state.items), dict(state.candidates)
    undecided, same = validate_request(batch, items, request)
    # A candidate that changed since it was batched (re-mined, forgotten) is decided no further:
    # the reviewer saw an older version. It comes back in a new batch once it is scored again.
    fresh = [
        cands[c]
        for c in undecided
        if c in cands and cands[c].status is CandidateStatus.pending_review
    ]
    edited = _edited(batch_id, fresh, request.edits)
    approve = request.decision == "approve"
    result = DecisionResult(
        batch_id, request.decision, request.reviewer, batch.status,
        decided=list(undecided), already_decided=list(same), flow_run_id=batch.flow_run_id,
        stale=[c for c in undecided if c not in {f.candidate_id for f in fresh}],
    )  # fmt: skip
    if undecided and not ctx.dry_run:
        status = CandidateStatus.approved if approve else CandidateStatus.rejected
        reason = f"approved by {request.reviewer}" if approve else request.reason.strip()
        outcomes: dict[str, tuple[CandidateStatus, str, dict[str, Any]]] = {
            c.candidate_id: (status, reason, {"reviewer": request.reviewer}) for c in edited
        }
        for cand in edited:
            for twin in state.twins.get(cand.candidate_id, []):
                if twin.status is CandidateStatus.pending_review:
                    result.followers.append(twin.candidate_id)
                    outcomes[twin.candidate_id] = (
                        status, f"follows procedure {cand.candidate_id}: {reason}",
                        {"reviewer": request.reviewer},
                    )  # fmt: skip
        decision = Decision.approve.value if approve else Decision.reject.value
        decided = [
            ItemRow(
                batch_id, cid, decision,
                edits=request.edits[cid].model_dump(mode="json", exclude_defaults=True)
                if cid in request.edits else {},
                reason=request.reason.strip() or None, reviewer=request.reviewer,
                decided_at=ctx.now,
            )
            for cid in undecided
        ]  # fmt: skip
        with stores.meta.transaction() as con:
            record_decisions(con, decided)
            set_candidate_outcomes(con, outcomes, now=ctx.now)
            result.status = set_batch_status(
                con, batch_id, now=ctx.now, reviewer=request.reviewer, reason=request.reason
            ).value
            record_audit(
                con, at=ctx.now, action="review_decision", run_id=ctx.run_id,
                actor=request.reviewer, target=batch_id, tenant_id=batch.tenant_id,
                counts={"decided": len(undecided), "already_decided": len(same),
                        "twins_following": len(result.followers)},
                detail={"decision": request.decision, "items": undecided,
                        "reason": request.reason.strip() or None},
            )  # fmt: skip
            store_receipt(
                con,
                receipt_id=stable_id(
                    "rcpt", "decision", batch_id, request.reviewer, ctx.now.isoformat(), undecided
                ),
                kind="review_decision",
                at=ctx.now,
                run_id=ctx.run_id,
                body={
                    "who": request.reviewer, "what": request.decision, "batch_id": batch_id,
                    "when": ctx.now.isoformat(), "items": undecided,
                    "counts": {"decided": len(undecided), "twins_following": len(result.followers)},
                },
            )  # fmt: skip
        items.update({d.candidate_id: d for d in decided})
        cands.update({c.candidate_id: c.model_copy(update={"status": status}) for c in fresh})
        twins = {
            p: [t.model_copy(update={"status": outcomes[t.candidate_id][0]})
                if t.candidate_id in outcomes else t for t in ts]
            for p, ts in state.twins.items()
        }  # fmt: skip
        state = BatchState(batch, items, cands, twins)
    result.commit = _commit_approved(stores, settings, ctx, state, request.reviewer, embedder)
    return result


def _commit_approved(
    stores: Stores, settings: Settings, ctx: RunContext, state: BatchState, reviewer: str,
    embedder: Embedder | None,
) -> CommitResult | None:  # fmt: skip
    """Commit the batch's approved items not yet promoted (with the edits they were approved
    with) and their twins: also what a crash between decision and commit left behind. Each
    item is committed under the name of the reviewer who approved it."""
    groups: dict[str, list[Candidate]] = {}
    for item in state.items.values():
        cand = state.candidates.get(item.candidate_id)
        if item.decision != Decision.approve.value or cand is None:
            continue
        if cand.status is not CandidateStatus.approved:
            continue
        edit = ItemEdit.model_validate(item.edits) if item.edits else None
        group = groups.setdefault(item.reviewer or reviewer, [])
        group.append(apply_edit(cand, edit))
        group.extend(
            t
            for t in state.twins.get(cand.candidate_id, [])
            if t.status is CandidateStatus.approved
        )
    result: CommitResult | None = None
    for approver, todo in sorted(groups.items()):
        done = commit_candidates(
            stores, settings, ctx, todo, reviewer=approver, batch_id=state.batch.batch_id,
            embedder=embedder,
        )  # fmt: skip
        result = done if result is None else result.merge(done)
    return result
