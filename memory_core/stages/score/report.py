"""What a score run tells: the result it returns, the candidate updates, the ledger rows.

Kept apart from the run logic so the accounting can be read in one place: every candidate the
run considered ends in exactly one bucket (LLM score, cached score, heuristic, fallback,
deferred, over budget, in flight), and every token the API reported lands in a ledger row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from memory_core.config import ScoreConfig
from memory_core.context import RunContext
from memory_core.models import CandidateStatus
from memory_core.stages.score.anthropic_scorer import FailureKind
from memory_core.stages.score.batches import BatchOutcome
from memory_core.stages.score.heuristic import HeuristicScorer
from memory_core.stages.score.results import Scored, ScoreInput, ScoringReport, Usage
from memory_core.stores.llm import BatchRecord, LedgerEntry

__all__ = ["MAX_DEFERRALS", "ScoreResult", "build_ledger", "score_updates"]

MAX_DEFERRALS = 3
"""Runs in a row a candidate may be deferred by temporary API failures before the heuristic
scores it (with the reason): an API that stays down must not keep candidates from review."""

FALLBACK_FLAG = "llm_fallback"


@dataclass
class ScoreResult:
    """The stage's report; ``as_dict()`` is what ``--format json`` and flow artifacts show."""

    run_id: str
    model: str
    prompt_version: str
    mode: str = "none"  # none | cache | heuristic | sync | batch
    considered: int = 0
    scored_llm: int = 0
    cache_hits: int = 0
    heuristic: int = 0
    heuristic_ids: list[str] = field(default_factory=list)
    by_rule_ids: list[str] = field(default_factory=list)
    fallbacks: dict[str, str] = field(default_factory=dict)
    deferred: dict[str, str] = field(default_factory=dict)
    over_budget: dict[str, str] = field(default_factory=dict)
    in_flight: list[str] = field(default_factory=list)
    batch_ids: list[str] = field(default_factory=list)
    resumed_batch_ids: list[str] = field(default_factory=list)
    submitted: int = 0
    requests: int = 0
    would_send: int = 0
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    budget: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    twins_followed: int = 0

    def counts(self) -> dict[str, int]:
        return {
            "considered": self.considered,
            "scored_llm": self.scored_llm,
            "cache_hits": self.cache_hits,
            "heuristic": self.heuristic,
            "fallbacks": len(self.fallbacks),
            "deferred": len(self.deferred),
            "over_budget": len(self.over_budget),
            "in_flight": len(self.in_flight),
            "requests": self.requests,
            "twins_followed": self.twins_followed,
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "mode": self.mode,
            "model": self.model,
            "prompt_version": self.prompt_version,
            **self.counts(),
            "fallback_reasons": self.fallbacks,
            "deferred_reasons": self.deferred,
            "over_budget_reasons": self.over_budget,
            "batch_ids": self.batch_ids,
            "resumed_batch_ids": self.resumed_batch_ids,
            "usage": self.usage.as_dict(),
            "cost_usd": round(self.cost_usd, 6),
            "budget": self.budget,
            "warnings": self.warnings,
        }


def _scored_update(scored: Scored, prompt_version: str, **stats: Any) -> dict[str, Any]:
    llm = scored.scorer == "anthropic"
    return {
        "importance": float(scored.importance),
        "scorer": scored.scorer,
        "status": CandidateStatus.pending_review.value,
        "stats": {
            "rationale": scored.rationale,
            "risk_flags": list(scored.risk_flags),
            "kind_check": scored.kind_check,
            "prompt_version": prompt_version if llm else None,
            "model": scored.model if llm else None,
            "score_source": scored.source,
            "score_deferrals": 0,
            "score_pending_reason": None,
            "fallback_reason": None,
            "score_flags": [],
            **scored.extra,
            **stats,
        },
    }


def _pending_update(**stats: Any) -> dict[str, Any]:
    """Stays ``pending_score`` without a score; only the reason is recorded."""
    return {
        "importance": None,
        "scorer": None,
        "status": CandidateStatus.pending_score.value,
        "stats": stats,
    }


def score_updates(
    report: ScoringReport,
    pool: dict[str, ScoreInput],
    heuristic: HeuristicScorer,
    *,
    prompt_version: str,
    result: ScoreResult,
) -> dict[str, dict[str, Any]]:
    """Turn the run's outcomes into ``set_candidate_scores`` updates; fill the result counts."""
    updates: dict[str, dict[str, Any]] = {}
    no_key = set(result.heuristic_ids) - set(result.by_rule_ids)
    by_rule = set(result.by_rule_ids)
    for cid, scored in report.scores.items():
        extra = {"heuristic_reason": "no ANTHROPIC_API_KEY"} if cid in no_key else {}
        if cid in by_rule:
            extra = {"heuristic_reason": "scored by rule: kind not in score.llm_kinds"}
        updates[cid] = _scored_update(scored, prompt_version, **extra)
        if scored.scorer == "anthropic":
            result.scored_llm += scored.source != "cache"
        else:
            result.heuristic += 1
    fallbacks = dict(report.fallbacks)
    for cid, reason in report.deferred.items():
        runs = int(pool[cid].candidate.stats.get("score_deferrals") or 0) + 1
        if runs >= MAX_DEFERRALS:
            fallbacks[cid] = f"deferred {runs} runs in a row; last: {reason}"
            continue
        result.deferred[cid] = reason
        updates[cid] = _pending_update(score_deferrals=runs, score_pending_reason=reason)
    for cid, reason in fallbacks.items():
        item = pool[cid]
        scored = heuristic.score_one(item.candidate, item.evidence)
        flags = [*report.flags.get(cid, []), FALLBACK_FLAG]
        updates[cid] = _scored_update(
            scored, prompt_version, fallback_reason=reason, score_flags=flags
        )
        result.fallbacks[cid] = reason
        result.heuristic += 1
    for cid, reason in report.over_budget.items():
        result.over_budget[cid] = reason
        updates[cid] = _pending_update(score_pending_reason=f"over budget: {reason}")
    return updates


def build_ledger(
    config: ScoreConfig,
    ctx: RunContext,
    result: ScoreResult,
    report: ScoringReport,
    *,
    outcomes: Sequence[BatchOutcome],
    submitted: Sequence[BatchRecord],
    sync_usage: Usage,
) -> list[LedgerEntry]:
    """One row per kind of spend (sync, each batch submitted, each batch collected), plus an
    ``outcome`` row with no tokens that says what fell back, was deferred or cut, and why."""
    entries: list[LedgerEntry] = []
    base = {"run_id": ctx.run_id, "logged_at": ctx.now}
    total, cost = Usage(), 0.0
    if sync_usage.requests:
        sync_cost = sync_usage.cost_usd(config, batch=False)
        entries.append(
            _spend(base, "sync", None, sync_usage, sync_cost, {"retries": report.retries})
        )
        total, cost = total + sync_usage, cost + sync_cost
    for record in submitted:
        detail = {"model": record.model, "prompt_version": record.prompt_version}
        entries.append(
            LedgerEntry(
                **base,
                mode="batch_submit",
                batch_id=record.batch_id,
                requests=len(record.items),
                detail=detail,
            )
        )
    for outcome in outcomes:
        record = outcome.record
        batch_cost = outcome.usage.cost_usd(config, batch=True)
        fell_back = sum(f.kind is not FailureKind.transient for f in outcome.failures.values())
        detail = {
            "counts": outcome.counts,
            "submitted_by_run": record.run_id,
            "resumed": record.run_id != ctx.run_id,
        }
        usage = Usage(**{**outcome.usage.as_dict(), "requests": len(record.items)})
        entries.append(
            _spend(base, "batch", record.batch_id, usage, batch_cost, detail, fallbacks=fell_back)
        )
        total, cost = total + outcome.usage, cost + batch_cost
    result.usage, result.cost_usd = total, cost
    result.requests = sync_usage.requests + sum(len(r.items) for r in submitted)
    outcome_detail = {
        "fallbacks": result.fallbacks,
        "deferred": result.deferred,
        "over_budget": result.over_budget,
        "flags": {cid: flags for cid, flags in report.flags.items() if flags},
        "cache_hits": result.cache_hits,
        "scored_llm": result.scored_llm,
        "heuristic": result.heuristic,
        "in_flight": len(result.in_flight),
        "batch_ids": result.batch_ids,
        "resumed_batch_ids": result.resumed_batch_ids,
        "mode": result.mode,
    }
    entries.append(
        LedgerEntry(**base, mode="outcome", fallbacks=len(result.fallbacks), detail=outcome_detail)
    )
    return entries


def _spend(
    base: dict[str, Any],
    mode: str,
    batch_id: str | None,
    usage: Usage,
    cost: float,
    detail: dict[str, Any],
    *,
    fallbacks: int = 0,
) -> LedgerEntry:
    return LedgerEntry(
        **base,
        mode=mode,  # type: ignore[arg-type]
        batch_id=batch_id,
        requests=usage.requests,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        cost_usd=cost,
        fallbacks=fallbacks,
        detail=detail,
    )
