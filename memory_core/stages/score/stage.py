"""The score stage: importance for every ``pending_score`` candidate, with honest accounting.

Order of a run, and why:

1. Resume: batches a previous run submitted but never collected are looked at first (one
   retrieve each, no waiting). Ended ones are collected; their candidates are not sent again.
2. Select ``pending_score`` candidates; those still inside a running batch (same content hash)
   are left alone: they are paid for.
3. Cache: an answer for the same (content hash, model, prompt version) is reused; an unchanged
   rerun makes no API call.
4. Budget: each remaining request is admitted only if its estimate fits the run's limits;
   the others stay ``pending_score`` with the reason in their stats.
5. Score: no API key -> heuristic (said once, labelled ``heuristic``); at least
   ``batch_min_requests`` and not ``sync`` -> Message Batches; otherwise the Messages API.
6. Write: scores (status ``pending_review``), fallbacks (heuristic, with the reason), deferrals
   (stay ``pending_score``; after ``MAX_DEFERRALS`` runs in a row, fall back), the cache, the
   ledger and the audit log.

Write order is crash-safe: cache, then candidates, then ledger together with the batches'
``collected`` mark. A crash anywhere reruns into the cache or the open batch, never into a
second payment.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import TYPE_CHECKING, Any

from memory_core.config import ScoreConfig
from memory_core.context import RunContext
from memory_core.crash import crash_point
from memory_core.models import Candidate, CandidateStatus
from memory_core.stages.score.anthropic_scorer import (
    NO_KEY_MESSAGE,
    AnthropicScorer,
    FailureKind,
    build_client,
    scored_from_answer,
)
from memory_core.stages.score.batches import BatchOutcome, BatchRunner, PollResult
from memory_core.stages.score.budget import Budget, estimate_usage
from memory_core.stages.score.evidence import load_evidence, needs_pin_subjects
from memory_core.stages.score.heuristic import HeuristicScorer
from memory_core.stages.score.prompt import (
    InvalidAnswer,
    ScoreAnswer,
    parse_answer,
    prompt_version,
)
from memory_core.stages.score.report import ScoreResult, build_ledger, score_updates
from memory_core.stages.score.results import ScoreInput, ScoringReport, Usage
from memory_core.stores import Stores
from memory_core.stores.audit import record_audit
from memory_core.stores.candidates import (
    list_candidates,
    score_fields,
    set_candidate_scores,
    support_pin_subjects,
)
from memory_core.stores.llm import (
    OWN_STAGE_PROMPTS,
    BatchRecord,
    CachedScore,
    get_cached_scores,
    open_batches,
    record_answers_and_spend,
    record_ledger,
)
from memory_core.stores.meta import MetaStore

if TYPE_CHECKING:
    import anthropic

__all__ = ["score_candidates"]

logger = logging.getLogger(__name__)


def score_candidates(
    stores: Stores,
    config: ScoreConfig,
    ctx: RunContext,
    *,
    sync: bool = False,
    client: anthropic.Anthropic | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> ScoreResult:
    """Score every ``pending_score`` candidate; see the module docstring for the order.

    ``client=None`` builds one from ``ANTHROPIC_API_KEY`` (with the configured timeout and
    retries) or, without a key, scores with the heuristic and says so once. ``sync=True`` uses
    the Messages API whatever the count and does not wait on batches still running. ``sleep``
    is what polling waits with (tests pass a no-op).
    """
    client = client if client is not None else build_client(config)
    return _ScoreRun(stores, config, ctx, client=client, sleep=sleep).execute(sync=sync)


class _ScoreRun:
    """One run's state: the pool of candidates, what happened to each, and what it cost."""

    def __init__(
        self,
        stores: Stores,
        config: ScoreConfig,
        ctx: RunContext,
        *,
        client: anthropic.Anthropic | None,
        sleep: Callable[[float], None],
    ) -> None:
        self.stores = stores
        self.config = config
        self.ctx = ctx
        self.pv = prompt_version(config)
        self.budget = Budget(config)
        self.heuristic = HeuristicScorer(now=ctx.now)
        self.report = ScoringReport()
        self.result = ScoreResult(run_id=ctx.run_id, model=config.model, prompt_version=self.pv)
        self.pool: dict[str, ScoreInput] = {}
        self.twins: list[Candidate] = []
        self.hashes: dict[str, str] = {}
        self.estimates: dict[str, Usage] = {}
        self.cache_puts: dict[tuple[str, str, str], CachedScore] = {}
        self.outcomes: list[BatchOutcome] = []
        self.submitted: list[BatchRecord] = []
        self.llm: AnthropicScorer | None = None
        self.runner: BatchRunner | None = None
        if client is not None:
            self.llm = AnthropicScorer(client, config, budget=self.budget)
            self.runner = BatchRunner(
                client,
                config,
                stores.meta,
                run_id=ctx.run_id,
                now=ctx.now,
                model=config.model,
                prompt_version=self.pv,
                sleep=sleep,
            )

    # -- the run ---------------------------------------------------------------------------

    def execute(self, *, sync: bool) -> ScoreResult:
        if self.llm is None:
            logger.warning(NO_KEY_MESSAGE)
            self.result.warnings.append(NO_KEY_MESSAGE)
        resumed = self._resume()
        # One DuckDB session per phase that only reads and writes the file (each open of a 1M
        # night's file cost ~0.1-0.25 s, ~18 per run); never across a wait on the API.
        with self.stores.meta.session():
            self._select(resumed)
        for outcome in resumed.collected:
            self._apply(outcome, requeue=True)
        misses = self._from_cache()
        if self.ctx.dry_run:
            self.result.would_send = len(misses)
            return self.result
        # Kinds outside score.llm_kinds (by default a user's own preference statements, whose
        # value is plain) are scored by rule: LLM spend follows findings, not chatter.
        by_rule = [i for i in misses if i.candidate.kind.value not in self.config.llm_kinds]
        misses = [i for i in misses if i.candidate.kind.value in self.config.llm_kinds]
        for item in by_rule:
            self.result.heuristic_ids.append(item.candidate.candidate_id)
            self.result.by_rule_ids.append(item.candidate.candidate_id)
        if self.llm is None:
            self.result.mode = "heuristic" if misses else self.result.mode
            for item in misses:
                self.result.heuristic_ids.append(item.candidate.candidate_id)
        elif not sync and len(misses) >= self.config.batch_min_requests:
            self.result.mode = "batch"
            self._batch(misses, resumed.pending)
        elif misses:
            self.result.mode = "sync"
            self.report.merge(self.llm.score(misses))
        if self.llm is not None and not sync and self.result.mode != "batch" and resumed.pending:
            self._wait(resumed.pending)
        with self.stores.meta.session():
            return self._write()

    def _resume(self) -> PollResult:
        records = [
            r
            for r in open_batches(self.stores.meta)
            if not r.prompt_version.startswith(OWN_STAGE_PROMPTS)
        ]
        if not records:
            return PollResult()
        self.result.resumed_batch_ids = [r.batch_id for r in records]
        if self.runner is None or self.ctx.dry_run:
            logger.info("%d batch(es) still open; resumed when a key is set", len(records))
            return PollResult(pending=records)
        logger.info("resuming %d open batch(es) from earlier runs", len(records))
        return self.runner.poll(records, wait=False)

    def _select(self, resumed: PollResult) -> None:
        # Without the evidence pins (one per cited episode: most of a body, most of the cost
        # of reading ~4.5k pending candidates at 1M episodes); scoring needs only their subjects.
        candidates = list_candidates(
            self.stores.meta, status=CandidateStatus.pending_score.value, pins=False
        )
        # An insight twin restates its procedural candidate: it is not sent on its own (that
        # would pay twice for one finding); it takes its twin's score in _write.
        self.twins = [c for c in candidates if c.stats.get("twin_of")]
        candidates = [c for c in candidates if not c.stats.get("twin_of")]
        pinned = [c.candidate_id for c in candidates if needs_pin_subjects(c)]
        with ThreadPoolExecutor(max_workers=1) as beside:
            # their pins' subjects read from DuckDB while load_evidence scans Lance
            subjects = beside.submit(support_pin_subjects, self.stores.meta, pinned)
            evidence = load_evidence(self.stores.lance, candidates, support_subjects=subjects)
        for cand in candidates:
            self.pool[cand.candidate_id] = ScoreInput(cand, evidence[cand.candidate_id])
            self.hashes[cand.candidate_id] = cand.content_hash()
        in_flight = {
            i.candidate_id
            for r in resumed.pending
            for i in r.items
            if self.hashes.get(i.candidate_id) == i.content_hash
        }
        self.result.in_flight = sorted(in_flight)
        self.result.considered = len(self.pool)

    def _open(self, cid: str) -> bool:
        """Still to be decided in this run (not scored, fallen back, deferred or in flight)."""
        r = self.report
        return cid in self.pool and not (
            cid in r.scores or cid in r.fallbacks or cid in r.deferred or cid in r.over_budget
        )

    def _from_cache(self) -> list[ScoreInput]:
        in_flight = set(self.result.in_flight)
        todo = [item for cid, item in self.pool.items() if self._open(cid) and cid not in in_flight]
        hits = get_cached_scores(
            self.stores.meta,
            (self.hashes[i.candidate.candidate_id] for i in todo),
            model=self.config.model,
            prompt_version=self.pv,
        )
        misses: list[ScoreInput] = []
        for item in todo:
            cid = item.candidate.candidate_id
            hit = hits.get(self.hashes[cid])
            answer = _valid(hit.body) if hit else None
            if answer is None:
                misses.append(item)
                continue
            self.report.scores[cid] = scored_from_answer(
                answer, item, model=self.config.model, source="cache", extra={}
            )
            self.result.cache_hits += 1
        if todo and not misses:
            self.result.mode = "cache"
        return sorted(misses, key=self._priority)

    def _priority(self, item: ScoreInput) -> tuple[int, float, str]:
        """Who gets the budget first: candidates left waiting by an earlier run, then the
        heuristically most important, so a tight budget is spent where it matters and the
        same candidates are not cut every night."""
        waited = bool(item.candidate.stats.get("score_pending_reason"))
        raw = self.heuristic.score_one(item.candidate, item.evidence).extra["heuristic_raw"]
        return (0 if waited else 1, -raw, item.candidate.candidate_id)

    def _batch(self, misses: list[ScoreInput], resumed_open: list[BatchRecord]) -> None:
        assert self.llm is not None and self.runner is not None
        requests: list[tuple[str, str, dict[str, Any]]] = []
        for item in misses:
            cid = item.candidate.candidate_id
            params = self.llm.params_for(item)
            estimate = estimate_usage(params)
            refusal = self.budget.reserve(estimate, batch=True)
            if refusal is not None:
                self.report.over_budget[cid] = refusal
                continue
            self.estimates[cid] = estimate
            requests.append((cid, self.hashes[cid], params))
        records, failure, left = self.runner.submit(requests) if requests else ([], None, [])
        self.submitted = records
        self.result.batch_ids = [r.batch_id for r in records]
        self.result.submitted = sum(len(r.items) for r in records)
        if failure is not None:
            # temporary: try again next run; refused (bad key, bad request): it will not pass
            transient = failure.kind is FailureKind.transient
            target = self.report.deferred if transient else self.report.fallbacks
            for cid in left:
                target[cid] = failure.reason
            if failure.kind is FailureKind.fatal:
                return
        self._wait([*records, *resumed_open])

    def _wait(self, records: list[BatchRecord]) -> None:
        assert self.runner is not None
        polled = self.runner.poll(records, wait=True)
        for outcome in polled.collected:
            self._apply(outcome, requeue=False)
        for record in polled.lost:
            for item in record.items:
                if self._open(item.candidate_id):
                    self.report.deferred[item.candidate_id] = f"batch {record.batch_id} lost"
        waiting = {i.candidate_id for r in polled.pending for i in r.items}
        self.result.in_flight = sorted(waiting & set(self.pool))
        if polled.stop is not None:
            self.result.warnings.append(f"polling stopped: {polled.stop.reason}")

    def _apply(self, outcome: BatchOutcome, *, requeue: bool) -> None:
        """Use a collected batch: cache every valid answer, score the candidates it is for.

        ``requeue`` (batches resumed at the start of the run): a temporary failure returns the
        candidate to this run's pool instead of deferring it, since this is the next run.
        """
        self.outcomes.append(outcome)
        record = outcome.record
        current_key = record.model == self.config.model and record.prompt_version == self.pv
        for cid, message in outcome.messages.items():
            chash = outcome.content_hash(cid) or ""
            current = self._open(cid) and self.hashes.get(cid) == chash and current_key
            estimate = self.estimates.pop(cid, None)
            if estimate is not None:
                self.budget.settle(estimate, Usage.from_api(message.usage), batch=True)
            try:
                answer = parse_answer(message.content, message.stop_reason)
            except InvalidAnswer as invalid:
                if current:
                    self._retry_invalid(cid, invalid)
                continue
            if not current:  # stale content, other model or prompt: still worth caching
                self._cache(cid, chash, record.model, record.prompt_version, answer.model_dump())
                continue
            self.report.scores[cid] = scored_from_answer(
                answer,
                self.pool[cid],
                model=record.model,
                source="batch",
                extra={"batch_id": record.batch_id, "message_id": message.id},
            )
        for cid, failure in outcome.failures.items():
            if not (self._open(cid) and self.hashes.get(cid) == outcome.content_hash(cid)):
                continue
            if failure.kind is not FailureKind.transient:
                self.report.fallbacks[cid] = failure.reason
            elif not requeue:
                self.report.deferred[cid] = failure.reason

    def _retry_invalid(self, cid: str, invalid: InvalidAnswer) -> None:
        """An invalid batch answer gets its one retry through the Messages API."""
        assert self.llm is not None
        item = self.pool[cid]
        stop = self.llm.retry_invalid(
            item, self.llm.params_for(item), invalid, self.report, source="batch"
        )
        if stop is not None:
            target = (
                self.report.fallbacks if stop.kind is FailureKind.fatal else self.report.deferred
            )
            target[cid] = stop.reason

    def _cache(
        self, cid: str, chash: str, model: str, version: str, answer: dict[str, Any]
    ) -> None:
        self.cache_puts[(chash, model, version)] = CachedScore(
            content_hash=chash,
            model=model,
            prompt_version=version,
            candidate_id=cid,
            score=answer["score"],
            body=answer,
        )

    # -- writing ---------------------------------------------------------------------------

    def _write(self) -> ScoreResult:
        meta, ctx, result = self.stores.meta, self.ctx, self.result
        for cid in result.heuristic_ids:
            self.report.scores[cid] = self.heuristic.score_one(
                self.pool[cid].candidate, self.pool[cid].evidence
            )
        updates = score_updates(
            self.report, self.pool, self.heuristic, prompt_version=self.pv, result=result
        )
        for cid, scored in self.report.scores.items():
            if scored.answer is not None and scored.source in ("sync", "batch"):
                self._cache(cid, self.hashes[cid], scored.model or "", self.pv, scored.answer)
        # Answers and their spend land together, before the candidates change: a crash after
        # this rerun scores from the cache and pays nothing twice, and no spend goes unrecorded.
        spent = bool(self.pool or self.outcomes or self.submitted)
        record_answers_and_spend(
            meta,
            self.cache_puts.values(),
            self._ledger() if spent else [],
            collected=[o.record.batch_id for o in self.outcomes] if spent else [],
            now=ctx.now,
        )
        crash_point("score.cached")
        set_candidate_scores(meta, updates, now=ctx.now)
        crash_point("score.candidates")
        result.twins_followed = _follow_twins(meta, self.twins, now=ctx.now)
        if not (spent or result.twins_followed):
            # nothing was pending: a rerun with no new work leaves no row anywhere
            result.budget = self.budget.as_dict()
            return result
        if not spent:  # only insight twins followed their procedures: an outcome row
            record_ledger(meta, self._ledger(), now=ctx.now)
        result.budget = self.budget.as_dict()
        with meta.transaction() as con:
            record_audit(
                con,
                at=ctx.now,
                action="score",
                run_id=ctx.run_id,
                actor=ctx.actor,
                counts=result.counts(),
                detail={"mode": result.mode, "model": self.config.model, "prompt": self.pv},
            )
        logger.info(
            "score run %s: mode=%s %s cost=$%.4f",
            ctx.run_id,
            result.mode,
            result.counts(),
            result.cost_usd,
        )
        return result

    def _ledger(self) -> list[Any]:
        sync_usage = self.llm.usage if self.llm is not None else Usage()
        return build_ledger(
            self.config,
            self.ctx,
            self.result,
            self.report,
            outcomes=self.outcomes,
            submitted=self.submitted,
            sync_usage=sync_usage,
        )


def _follow_twins(meta: MetaStore, twins: list[Candidate], *, now: datetime) -> int:
    """Give each insight twin its procedural twin's score once that one has been scored."""
    if not twins:
        return 0
    # the procedures' status, importance and scorer only (their bodies are not parsed)
    scored = {
        cid: fields
        for cid, fields in score_fields(meta, sorted({t.stats["twin_of"] for t in twins})).items()
        if fields[0] != CandidateStatus.pending_score.value
    }
    updates: dict[str, dict[str, Any]] = {}
    for twin in twins:
        source_id = twin.stats["twin_of"]
        if source_id not in scored:
            continue
        _, importance, scorer = scored[source_id]
        if importance is None:
            continue
        updates[twin.candidate_id] = {
            "importance": importance,
            "scorer": scorer,
            "status": CandidateStatus.pending_review.value,
            "stats": {"scored_with": source_id},
        }
    set_candidate_scores(meta, updates, now=now)
    return len(updates)


def _valid(body: dict[str, Any]) -> ScoreAnswer | None:
    """A cached body is re-validated: a cache row that no longer parses is a miss."""
    try:
        return ScoreAnswer.model_validate(body)
    except ValueError:
        return None
