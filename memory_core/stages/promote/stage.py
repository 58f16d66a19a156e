"""Commit of approved candidates: facts and versioned procedures, with lineage and receipts.

The one commit path both review routes (CLI and the Prefect form) and auto-approval end in:

1. load the candidates' evidence episodes from Lance (scoped by tenant);
2. the gate (``gate.check_candidate``) refuses what lacks the authority its kind needs;
3. procedures first: a changed procedure of the same name is a new semantic version that
   supersedes the current one (``supersede.resolve``); then facts, where a new object for the
   same (tenant, namespace, subject, predicate, conditions) supersedes the current one when it
   is later in valid time and of equal or higher authority, and is held as a conflict
   otherwise. Semantic insight twins follow their procedure;
4. one ``merge_insert`` per table closes old rows and inserts new versions, so readers see the
   whole change or none of it;
5. one DuckDB transaction: lineage edges, candidate outcomes, audit events and a receipt.

Row ids are deterministic (candidate, content, clock), and an item already promoted is not
committed again, so approving twice commits once and a rerun after a crash converges.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from memory_core.config import Settings
from memory_core.context import RunContext
from memory_core.embed import Embedder, make_embedder
from memory_core.models import (
    Candidate,
    CandidateKind,
    CandidateStatus,
    ClaimSpec,
    stable_id,
)
from memory_core.stages.extract.statements import with_extracted_claims
from memory_core.stages.mine.counterexamples import format_conditions
from memory_core.stages.promote.commit_gate import GateResult, check_candidate
from memory_core.stages.promote.plan import PromotionPlan
from memory_core.stages.promote.result import CommitResult
from memory_core.stages.promote.rows import (
    evidence_episodes,
    fact_row,
    lineage_for,
    procedure_row,
)
from memory_core.stages.promote.supersede import (
    Resolution,
    Verdict,
    fact_key,
    next_version,
    procedure_key,
    row_hash,
)
from memory_core.stages.review.decisions import is_twin
from memory_core.stages.staleness.canary import unused_version
from memory_core.stores import Stores
from memory_core.stores.audit import record_audit, store_receipt
from memory_core.stores.facts import existing_ids
from memory_core.stores.lineage import add_edges
from memory_core.stores.review import set_candidate_outcomes
from memory_core.stores.status_writes import RowVersions, write_status

__all__ = ["CommitResult", "commit_candidates", "preview_candidates"]

logger = logging.getLogger(__name__)


def _twin_spec(twin: Candidate, procedure: Candidate) -> Candidate:
    """A twin restated from its procedure as approved (narrowed preconditions flow through)."""
    assert procedure.procedure is not None and twin.claim is not None
    pre = procedure.procedure.preconditions
    cond = format_conditions(pre)
    obj = ", then ".join(procedure.procedure.steps) + (f" when {cond}" if cond else "")
    return twin.model_copy(
        update={
            "claim": ClaimSpec(predicate=twin.claim.predicate, object=obj),
            "conditions": {**twin.conditions, **pre},
            "stats": {**twin.stats, "valid_from": procedure.stats.get("valid_from")},
        }
    )


class _Commit:
    def __init__(
        self, stores: Stores, settings: Settings, ctx: RunContext, *, reviewer: str,
        batch_id: str | None, embedder: Embedder | None,
    ) -> None:  # fmt: skip
        self.stores, self.settings, self.ctx = stores, settings, ctx
        self.reviewer, self.batch_id = reviewer, batch_id
        self.embedder = embedder
        self.result = CommitResult(batch_id=batch_id, reviewer=reviewer)
        self.gates: dict[str, GateResult] = {}

    def plan(
        self, candidates: Sequence[Candidate]
    ) -> tuple[PromotionPlan, PromotionPlan, dict[str, Mapping[str, Any]]]:
        # extracted user statements (stages/extract) count as the gate's user claims too
        episodes = with_extracted_claims(
            self.stores.meta, evidence_episodes(self.stores.lance, candidates, self.stores.meta)
        )
        procs = [c for c in candidates if c.kind is CandidateKind.procedural]
        facts = [c for c in candidates if c.kind is CandidateKind.semantic]
        by_id = {c.candidate_id: c for c in procs}
        now = self.ctx.now
        for cand in candidates:
            self.gates[cand.candidate_id] = check_candidate(cand, episodes, reviewer=self.reviewer)
        proc_rows = {
            c.candidate_id: procedure_row(
                c, self.gates[c.candidate_id], episodes, now=now, approver=self.reviewer
            )
            for c in procs
            if self.gates[c.candidate_id].refusal is None
        }
        proc_plan = PromotionPlan.for_rows(self.stores, "procedures", [*proc_rows.values()])
        for cand in sorted(procs, key=lambda c: c.candidate_id):
            row = proc_rows.get(cand.candidate_id)
            if row is None:
                continue
            old = proc_plan.current.get(procedure_key(row))
            version = next_version(old, row) if old is not None else "1.0.0"
            # a rolled-back (deprecated) version keeps its number: take the next free one
            version = unused_version(self.stores, row, version, old and old["version"])
            row["version"] = version
            row["procedure_id"] = stable_id(
                "proc", row["tenant_id"], row["namespace"], procedure_key(row)[2], version
            )
            row["content_hash"] = row_hash("procedures", row)
            proc_plan.apply(
                cand.candidate_id, procedure_key(row), row, now=now,
                force=bool(cand.stats.get("force_supersede")),
            )  # fmt: skip
        if self.settings.staleness.canary_fraction > 0 and not self.ctx.dry_run:
            proc_plan.hold_back_canaries()  # new versions serve a fraction of subjects first
        fact_rows: dict[str, dict[str, Any]] = {}
        for cand in facts:
            gate = self.gates[cand.candidate_id]
            proc_id = str(cand.stats.get("twin_of") or "")
            if is_twin(cand) and proc_id in by_id:
                follow = self._follow(cand.candidate_id, proc_id, proc_plan)
                if follow:
                    continue
                cand = _twin_spec(cand, by_id[proc_id])
            if gate.refusal is None:
                fact_rows[cand.candidate_id] = fact_row(
                    cand, gate, episodes, now=now, approver=self.reviewer
                )
        fact_plan = PromotionPlan.for_rows(self.stores, "facts", [*fact_rows.values()])
        forced = {c.candidate_id for c in facts if c.stats.get("force_supersede")}
        for cid, row in sorted(fact_rows.items(), key=lambda kv: (kv[1]["valid_from"], kv[0])):
            fact_plan.apply(cid, fact_key(row), row, now=now, force=cid in forced)
        return proc_plan, fact_plan, episodes

    def _follow(self, twin_id: str, proc_id: str, plan: PromotionPlan) -> bool:
        """Give a twin its procedure's outcome when that is not a commit; True if it did."""
        gate = self.gates.get(proc_id)
        if gate is not None and gate.refusal is not None:
            self.gates[twin_id] = GateResult(f"follows procedure {proc_id}: {gate.refusal}")
            return True
        res = plan.outcome.get(proc_id)
        if res is not None and res[0].verdict is Verdict.conflict:
            plan.outcome[twin_id] = (
                Resolution(Verdict.conflict, f"follows procedure {proc_id}: {res[0].reason}"),
                None,
            )
            self.result.conflicts[twin_id] = plan.outcome[twin_id][0].reason
            return True
        return False

    def embed(self, plans: Iterable[PromotionPlan]) -> None:
        fresh = [r for p in plans for r in p.insert.values() if r.get("vector") is None]
        if not fresh:
            return
        embedder = self.embedder or make_embedder(self.settings.embed)
        vectors = embedder.embed([r["text"] for r in fresh])
        for row, vec in zip(fresh, vectors, strict=True):
            row["vector"] = [float(x) for x in vec]
            row["embedding_version"] = embedder.version

    def write(self, plan: PromotionPlan) -> None:
        have = existing_ids(self.stores.lance, plan.table, plan.insert)
        inserts = [r for rid, r in plan.insert.items() if rid not in have]
        closes = list(plan.close.values())
        if self.ctx.dry_run or not (inserts or closes):
            return
        write_status(
            self.stores, RowVersions(plan.table, close=closes, insert=inserts),
            at=self.ctx.now, run_id=self.ctx.run_id, actor=self.ctx.actor,
        )  # fmt: skip

    def outcomes(
        self, plans: Sequence[PromotionPlan]
    ) -> dict[str, tuple[CandidateStatus, str, dict[str, Any]]]:
        now = self.ctx.now.isoformat()
        out: dict[str, tuple[CandidateStatus, str, dict[str, Any]]] = {}
        for cid, gate in self.gates.items():
            if gate.refusal is not None:
                self.result.refused[cid] = gate.refusal
                out[cid] = (
                    CandidateStatus.auto_rejected,
                    f"refused at commit: {gate.refusal}",
                    {"refused": gate.refusal, "refused_at": now},
                )
        for plan in plans:
            self.result.superseded.update(plan.superseded)
            for cid, (res, row_id) in plan.outcome.items():
                if res.verdict is Verdict.conflict:
                    self.result.conflicts[cid] = res.reason
                    out[cid] = (
                        CandidateStatus.pending_review,
                        f"held for review: {res.reason}",
                        {"conflict": {"reason": res.reason, "at": now}},
                    )
                    continue
                assert row_id is not None
                self.result.promoted[cid] = row_id
                if res.verdict is Verdict.unchanged:
                    self.result.unchanged.append(cid)
                else:
                    (self.result.facts if plan.table == "facts" else self.result.procedures).append(
                        row_id
                    )
                out[cid] = (
                    CandidateStatus.promoted,
                    f"promoted to {plan.table} {row_id} ({res.reason})",
                    {
                        "promoted_to": row_id,
                        "promoted_table": plan.table,
                        "promoted_at": now,
                        "approver": self.reviewer,
                        "batch_id": self.batch_id,
                        "conflict": None,
                        "force_supersede": None,
                    },
                )
        return out

    def record(
        self, plans: Sequence[PromotionPlan], episodes: Mapping[str, Mapping[str, Any]]
    ) -> None:
        """Lineage, candidate outcomes, audit events and the receipt: one DuckDB transaction."""
        outcomes = self.outcomes(plans)
        if self.ctx.dry_run:
            return
        edges = lineage_for(self.stores.lance, plans, episodes)
        self.result.lineage_edges = len(edges)
        counts = self.result.counts()
        with self.stores.meta.transaction() as con:
            add_edges(con, edges, now=self.ctx.now)
            set_candidate_outcomes(con, outcomes, now=self.ctx.now)
            for cid, reason in sorted(self.result.refused.items()):
                record_audit(
                    con, at=self.ctx.now, action="promotion_refused", run_id=self.ctx.run_id,
                    actor=self.reviewer, target=cid, counts={"refused": 1},
                    detail={"batch_id": self.batch_id, "reason": reason},
                )  # fmt: skip
            record_audit(
                con, at=self.ctx.now, action="promotion_commit", run_id=self.ctx.run_id,
                actor=self.reviewer, target=self.batch_id, counts=counts,
                detail={
                    "facts": self.result.facts, "procedures": self.result.procedures,
                    "superseded": self.result.superseded,
                },
            )  # fmt: skip
            store_receipt(
                con,
                receipt_id=stable_id(
                    "rcpt", "promotion", self.batch_id, self.reviewer, self.ctx.now.isoformat(),
                    sorted(outcomes),
                ),
                kind="promotion_commit",
                at=self.ctx.now,
                run_id=self.ctx.run_id,
                body={
                    "who": self.reviewer, "batch_id": self.batch_id,
                    "when": self.ctx.now.isoformat(), "counts": counts,
                    "candidates": sorted(outcomes),
                },
            )  # fmt: skip


def commit_candidates(
    stores: Stores,
    settings: Settings,
    ctx: RunContext,
    candidates: Sequence[Candidate],
    *,
    reviewer: str,
    batch_id: str | None = None,
    embedder: Embedder | None = None,
) -> CommitResult:
    """Commit approved candidates (already edited as approved; twins with their procedure).

    Candidates already ``promoted`` are skipped, so a second call commits nothing. With
    ``ctx.dry_run`` the plan is made and reported but nothing is written.
    """
    todo = [c for c in candidates if c.status is not CandidateStatus.promoted]
    run = _Commit(stores, settings, ctx, reviewer=reviewer, batch_id=batch_id, embedder=embedder)
    if not todo:
        return run.result
    proc_plan, fact_plan, episodes = run.plan(todo)
    plans = [proc_plan, fact_plan]
    if not ctx.dry_run:
        run.embed(plans)
        run.write(proc_plan)
        run.write(fact_plan)
    run.record(plans, episodes)
    logger.info(
        "promote batch=%s run=%s reviewer=%s %s",
        batch_id, ctx.run_id, reviewer, run.result.counts(),
    )  # fmt: skip
    return run.result


def preview_candidates(
    stores: Stores, settings: Settings, candidates: Sequence[Candidate], *, now: datetime
) -> dict[str, dict[str, Any]]:
    """What committing each candidate would do now: refusal, conflict, supersession or new.

    A dry run of the commit path as a human reviewer, so the review summary shows exactly what
    approval would do (and what the gate would refuse).
    """
    ctx = RunContext(now=now, dry_run=True)
    run = _Commit(stores, settings, ctx, reviewer="preview", batch_id=None, embedder=None)
    proc_plan, fact_plan, _ = run.plan(list(candidates))
    out: dict[str, dict[str, Any]] = {}
    for cid, gate in run.gates.items():
        if gate.refusal is not None:
            out[cid] = {"outcome": "refused", "reason": gate.refusal}
    for plan in (proc_plan, fact_plan):
        id_col = "fact_id" if plan.table == "facts" else "procedure_id"
        replaced = {new: old for old, new in plan.superseded.items()}
        for cid, (res, row_id) in plan.outcome.items():
            item: dict[str, Any] = {"outcome": res.verdict.value, "reason": res.reason}
            old_id = replaced.get(row_id or "")
            if old_id is not None:
                old = plan.close.get(old_id) or plan.insert.get(old_id) or {}
                item["supersedes"] = {
                    id_col: old_id,
                    **{k: old.get(k) for k in ("object", "name", "version") if old.get(k)},
                    "valid_from": _iso(old.get("valid_from")),
                    "authority": old.get("authority"),
                }
            if plan.table == "procedures" and row_id:
                item["version"] = (plan.insert.get(row_id) or {}).get("version")
            out[cid] = item
    return out


def _iso(value: Any) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else value
