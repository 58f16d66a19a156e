"""The extract stage: sessions -> Claude (Message Batches) or a replay -> validated facts.

Order of a run, and why:

1. Skip, and say so, when ``extract.enabled`` is false or there is neither an API key nor a
   replay file: episodes stay episodic, nothing is invented.
2. Plan: sessions not yet extracted under (content hash, model, prompt version), packed into
   requests (``plan.py``). An unchanged rerun plans nothing and sends nothing.
3. Resume: extraction batches an earlier run submitted but never collected are collected
   first (no waiting); their requests are not sent again.
4. Cache: an answer for the same request hash, model and prompt version is reused.
5. Send what is left, each request admitted by the run's budget (``[score]`` limits): through
   the Batches API (recorded before the first poll: a crash between submit and collect resumes
   the same batch, never pays twice), or, with ``extract.replay``, from the recorded answers.
6. Apply each answer through the same parser and rules (``rules.py``); write the facts, the
   sessions' done marks, the answer cache, the spend and the batch's ``collected`` mark in one
   transaction. Transient failures (429, 529, timeouts, expiry) leave sessions pending for the
   next run; nothing is made up for them. An answer that fails the schema (``prompt.py``'s
   pydantic model) is counted (``invalid``, and an ``invalid`` ledger row keyed by the
   request hash); its sessions stay pending, so the next run sends the request once more in
   its batch; after ``MAX_INVALID_ANSWERS`` invalid answers the request is no longer sent
   (``given_up``) until its sessions change. No fact is ever made up for it.
7. Merge paraphrases per subject (``merge.py``).
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memory_core.config import Settings
from memory_core.context import RunContext
from memory_core.crash import crash_point
from memory_core.embed import Embedder, make_embedder
from memory_core.stages.extract.merge import merge_groups
from memory_core.stages.extract.plan import RequestPlan, load_sessions, pack_requests
from memory_core.stages.extract.prompt import InvalidExtraction, parse_extraction, prompt_version
from memory_core.stages.extract.replay import Replay, ReplayMessage, TextBlock, load_replay
from memory_core.stages.extract.rules import check_answer
from memory_core.stages.score.anthropic_scorer import API_KEY_ENV, FailureKind, build_client
from memory_core.stages.score.batches import BatchOutcome, BatchRunner
from memory_core.stages.score.budget import Budget, estimate_usage
from memory_core.stages.score.results import Usage
from memory_core.stores import Stores
from memory_core.stores.extract import (
    DoneSession,
    ExtractedFactRow,
    done_sessions,
    extracted_facts,
    set_fact_groups,
    ungrouped_subjects,
    write_extraction,
)
from memory_core.stores.llm import (
    EXTRACT_PROMPT,
    BatchRecord,
    CachedScore,
    LedgerEntry,
    get_cached_scores,
    invalid_answers,
    open_batches,
    record_answers_and_spend,
)

if TYPE_CHECKING:
    import anthropic

__all__ = [
    "MAX_INVALID_ANSWERS",
    "NO_KEY_MESSAGE",
    "REPLAY_LABEL",
    "ExtractResult",
    "extract_facts",
]

logger = logging.getLogger(__name__)

NO_KEY_MESSAGE = f"extract skipped: no {API_KEY_ENV} and no extract.replay; episodes stay episodic"
REPLAY_LABEL = "replayed answers, not Claude"
MAX_INVALID_ANSWERS = 2  # the first answer and one retry in a later run's batch


@dataclass
class ExtractResult:
    """What one run did; every planned request ends in exactly one bucket."""

    mode: str = "idle"  # skipped | idle | batch | replay | cache
    skipped: str | None = None
    label: str | None = None
    model: str = ""
    prompt_version: str = ""
    sessions_pending: int = 0
    sessions_unchanged: int = 0
    requests_planned: int = 0
    request_input_tokens: int = 0  # estimated from the planned request bodies (chars / 4)
    cache_hits: int = 0
    submitted: int = 0
    replayed: int = 0
    applied: int = 0
    facts_written: int = 0
    blocked_facts: int = 0
    no_recorded_answer: list[str] = field(default_factory=list)
    invalid: dict[str, str] = field(default_factory=dict)
    retried_invalid: list[str] = field(default_factory=list)
    given_up: dict[str, str] = field(default_factory=dict)
    deferred: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    over_budget: dict[str, str] = field(default_factory=dict)
    in_flight: list[str] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)
    corrected: Counter[str] = field(default_factory=Counter)
    batch_ids: list[str] = field(default_factory=list)
    resumed_batch_ids: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "skipped": self.skipped,
            "label": self.label,
            "model": self.model,
            "prompt_version": self.prompt_version,
            "sessions_pending": self.sessions_pending,
            "sessions_unchanged": self.sessions_unchanged,
            "requests_planned": self.requests_planned,
            "request_input_tokens_estimate": self.request_input_tokens,
            "cache_hits": self.cache_hits,
            "submitted": self.submitted,
            "replayed": self.replayed,
            "applied": self.applied,
            "facts_written": self.facts_written,
            "blocked_facts": self.blocked_facts,
            "no_recorded_answer": len(self.no_recorded_answer),
            "invalid": self.invalid,
            "retried_invalid": self.retried_invalid,
            "given_up": self.given_up,
            "deferred": self.deferred,
            "failed": self.failed,
            "over_budget": self.over_budget,
            "in_flight": self.in_flight,
            "dropped": dict(self.dropped),
            "corrected": dict(self.corrected),
            "batch_ids": self.batch_ids,
            "resumed_batch_ids": self.resumed_batch_ids,
            "usage": self.usage.as_dict(),
            "warnings": self.warnings,
        }


def extract_facts(
    stores: Stores,
    settings: Settings,
    ctx: RunContext,
    *,
    client: anthropic.Anthropic | None = None,
    embedder: Embedder | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> ExtractResult:
    """Extract facts from sessions not yet extracted; see the module docstring for the order.

    ``client=None`` builds one from ``ANTHROPIC_API_KEY``; ``extract.replay`` wins over both.
    ``embedder`` (default: the configured one, loaded only when facts need merging) is what
    paraphrases are compared with; ``sleep`` is what polling waits with (tests pass a no-op).
    """
    cfg = settings.extract
    result = ExtractResult()
    if not cfg.enabled:
        result.mode, result.skipped = "skipped", "extract.enabled = false"
        return result
    replay = load_replay(cfg.replay) if cfg.replay else None
    if replay is None and client is None:
        client = build_client(settings.score)
    if replay is None and client is None:
        logger.warning(NO_KEY_MESSAGE)
        result.mode, result.skipped = "skipped", NO_KEY_MESSAGE
        result.warnings.append(NO_KEY_MESSAGE)
        return result
    run = _ExtractRun(stores, settings, ctx, result, client=client, replay=replay, sleep=sleep)
    run.execute()
    _merge(stores, settings, embedder, run.touched)
    logger.info(
        "extract run=%s mode=%s planned=%d applied=%d facts=%d dropped=%s",
        ctx.run_id, result.mode, result.requests_planned, result.applied,
        result.facts_written, dict(result.dropped),
    )  # fmt: skip
    return result


def _merge(
    stores: Stores, settings: Settings, embedder: Embedder | None, touched: set[tuple[str, ...]]
) -> None:
    """Recompute paraphrase groups of every subject with new or ungrouped facts."""
    todo = touched | ungrouped_subjects(stores.meta)
    if not todo:
        return
    emb = embedder or make_embedder(settings.embed)
    by_scope: dict[tuple[str, str], set[str]] = {}
    for tenant, namespace, subject in todo:
        by_scope.setdefault((tenant, namespace), set()).add(subject)
    for (tenant, namespace), subjects in sorted(by_scope.items()):
        facts = extracted_facts(
            stores.meta, tenant_id=tenant, namespace=namespace, subject_ids=subjects
        )
        groups = merge_groups(facts, emb, similarity=settings.extract.merge_similarity)
        set_fact_groups(stores.meta, groups)


class _ExtractRun:
    def __init__(
        self,
        stores: Stores,
        settings: Settings,
        ctx: RunContext,
        result: ExtractResult,
        *,
        client: anthropic.Anthropic | None,
        replay: Replay | None,
        sleep: Callable[[float], None],
    ) -> None:
        self.stores, self.settings, self.ctx, self.result = stores, settings, ctx, result
        self.replay = replay
        self.model = replay.model if replay else settings.score.model
        self.pv = prompt_version(settings.extract)
        self.budget = Budget(settings.score)
        self.touched: set[tuple[str, ...]] = set()
        self.runner = (
            BatchRunner(client, settings.score, stores.meta, run_id=ctx.run_id, now=ctx.now,
                        model=self.model, prompt_version=self.pv, sleep=sleep)
            if client is not None and replay is None
            else None
        )  # fmt: skip
        result.model, result.prompt_version = self.model, self.pv
        result.label = REPLAY_LABEL + f" ({replay.label})" if replay else None

    # -- the run ---------------------------------------------------------------------------

    def execute(self) -> None:
        done = done_sessions(self.stores.meta)
        sessions, unchanged = load_sessions(
            self.stores, self.settings.extract, model=self.model, prompt_version=self.pv,
            done=done,
        )  # fmt: skip
        plans = pack_requests(
            sessions, self.settings.extract, model=self.model, prompt_version=self.pv
        )
        plans = self._bound_invalid(plans)
        self.result.sessions_pending = len(sessions)
        self.result.sessions_unchanged = unchanged
        self.result.requests_planned = len(plans)
        self.result.request_input_tokens = sum(estimate_usage(p.params).input_tokens for p in plans)
        self.pending = {p.request_hash: p for p in plans}
        self.open_records: list[BatchRecord] = []
        in_flight = self._resume()
        self._from_cache(in_flight)
        todo = [p for h, p in self.pending.items() if h not in in_flight]
        if self.ctx.dry_run:
            return
        if self.replay is not None and todo:
            self.result.mode = "replay"
            self._replay(todo)
        elif todo or self.open_records:
            self.result.mode = "batch"
            self._batch(todo)
        else:
            return
        self._ledger_outcome()

    def _bound_invalid(self, plans: list[RequestPlan]) -> list[RequestPlan]:
        """Drop requests whose answers failed the schema ``MAX_INVALID_ANSWERS`` times; count
        the ones sent again after one invalid answer."""
        bad = invalid_answers(self.stores.meta, "extract")
        keep = []
        for plan in plans:
            n = bad.get(plan.request_hash, 0)
            if n >= MAX_INVALID_ANSWERS:
                self.result.given_up[plan.custom_id] = f"{n} invalid answers"
                continue
            if n:
                self.result.retried_invalid.append(plan.custom_id)
            keep.append(plan)
        return keep

    def _resume(self) -> set[str]:
        """Collect extraction batches left open by earlier runs; returns in-flight hashes."""
        if self.runner is None:
            return set()
        records = [r for r in open_batches(self.stores.meta)
                   if r.prompt_version.startswith(EXTRACT_PROMPT)]  # fmt: skip
        if not records:
            return set()
        self.result.resumed_batch_ids = [r.batch_id for r in records]
        polled = self.runner.poll(records, wait=False)
        for outcome in polled.collected:
            self._apply_outcome(outcome, resumed=True)
        self.open_records = list(polled.pending)  # waited on with this run's own batches
        flying = {i.content_hash for r in polled.pending for i in r.items}
        self.result.in_flight = sorted(h for h in flying if h in self.pending)
        return flying

    def _from_cache(self, in_flight: set[str]) -> None:
        if self.replay is not None:
            return  # replayed answers are never cached, so never served from the cache
        wanted = [h for h in self.pending if h not in in_flight]
        hits = get_cached_scores(self.stores.meta, wanted, model=self.model, prompt_version=self.pv)
        applied: list[tuple[RequestPlan, Any]] = []
        for h, hit in sorted(hits.items()):
            plan = self.pending[h]
            applied.append((plan, _CachedMessage(hit.body)))
        if applied:
            self.result.cache_hits = len(applied)
            self.result.mode = "cache"
            self._write(applied, source="anthropic", cache=False)

    def _replay(self, todo: list[RequestPlan]) -> None:
        assert self.replay is not None
        answered = []
        for plan in todo:
            message = self.replay.message(plan.custom_id)
            if message is None:
                self.result.no_recorded_answer.append(plan.custom_id)
                continue
            answered.append((plan, message))
        self.result.replayed = len(answered)
        self._write(answered, source="replay", cache=False)

    def _batch(self, todo: list[RequestPlan]) -> None:
        assert self.runner is not None
        requests = []
        self.estimates: dict[str, Usage] = {}
        for plan in todo:
            estimate = estimate_usage(plan.params)
            refusal = self.budget.reserve(estimate, batch=True)
            if refusal is not None:
                self.result.over_budget[plan.custom_id] = refusal
                continue
            self.estimates[plan.custom_id] = estimate
            requests.append((plan.custom_id, plan.request_hash, plan.params))
        records, failure, left = self.runner.submit(requests) if requests else ([], None, [])
        if records:
            crash_point("extract.submitted")
        self.result.batch_ids = [r.batch_id for r in records]
        self.result.submitted = sum(len(r.items) for r in records)
        if failure is not None:
            target = (
                self.result.deferred
                if failure.kind is FailureKind.transient
                else self.result.failed
            )
            for cid in left:
                target[cid] = failure.reason
        polled = self.runner.poll([*records, *self.open_records], wait=True)
        for outcome in polled.collected:
            self._apply_outcome(outcome, resumed=outcome.record.run_id != self.ctx.run_id)
        for record in polled.lost:
            for item in record.items:
                self.result.deferred[item.custom_id] = f"batch {record.batch_id} lost"
        self.result.in_flight = sorted(i.custom_id for r in polled.pending for i in r.items)
        if polled.stop is not None:
            self.result.warnings.append(f"polling stopped: {polled.stop.reason}")

    # -- applying answers --------------------------------------------------------------------

    def _apply_outcome(self, outcome: BatchOutcome, *, resumed: bool) -> None:
        crash_point("extract.collected")
        record = outcome.record
        current_key = record.model == self.model and record.prompt_version == self.pv
        answered: list[tuple[RequestPlan, Any]] = []
        stale_cache: list[CachedScore] = []
        for cid, message in outcome.messages.items():
            estimate = self.estimates.pop(cid, None) if hasattr(self, "estimates") else None
            if estimate is not None:
                self.budget.settle(estimate, Usage.from_api(message.usage), batch=True)
            plan = self.pending.get(outcome.content_hash(cid) or "")
            if plan is not None and current_key:
                answered.append((plan, message))
                continue
            try:  # changed content or another prompt: still paid for, so cached for reuse
                answer = parse_extraction(message.content, message.stop_reason)
            except InvalidExtraction:
                continue
            stale_cache.append(
                CachedScore(content_hash=outcome.content_hash(cid) or "", model=record.model,
                            prompt_version=record.prompt_version, candidate_id=cid, score=0.0,
                            body=answer.model_dump(mode="json"))
            )  # fmt: skip
        for cid, failure in outcome.failures.items():
            if resumed and failure.kind is FailureKind.transient:
                continue  # this is the next run: the request is sent again below
            target = (
                self.result.deferred
                if failure.kind is FailureKind.transient
                else self.result.failed
            )
            target[cid] = failure.reason
        self.result.usage = self.result.usage + outcome.usage
        entry = LedgerEntry(
            run_id=self.ctx.run_id, logged_at=self.ctx.now, mode="batch",
            batch_id=record.batch_id, requests=len(record.items),
            input_tokens=outcome.usage.input_tokens, output_tokens=outcome.usage.output_tokens,
            cache_read_tokens=outcome.usage.cache_read_tokens,
            cache_write_tokens=outcome.usage.cache_write_tokens,
            cost_usd=outcome.usage.cost_usd(self.settings.score, batch=True),
            detail={"purpose": "extract", "prompt_version": record.prompt_version,
                    "counts": outcome.counts, "resumed": resumed,
                    "submitted_by_run": record.run_id},
        )  # fmt: skip
        self._write(answered, source="anthropic", cache=True, entries=[entry],
                    collected=[record.batch_id], extra_cache=stale_cache)  # fmt: skip

    def _write(
        self,
        answered: list[tuple[RequestPlan, Any]],
        *,
        source: str,
        cache: bool,
        entries: list[LedgerEntry] | None = None,
        collected: list[str] | None = None,
        extra_cache: list[CachedScore] | None = None,
    ) -> None:
        """Parse, check and store every answer of one outcome in one transaction."""
        facts: list[ExtractedFactRow] = []
        sessions: list[DoneSession] = []
        cached: list[CachedScore] = list(extra_cache or [])
        entries = list(entries or [])
        for plan, message in answered:
            try:
                answer = parse_extraction(message.content, message.stop_reason)
            except InvalidExtraction as invalid:
                self.result.invalid[plan.custom_id] = invalid.error
                entries.append(
                    LedgerEntry(run_id=self.ctx.run_id, logged_at=self.ctx.now, mode="invalid",
                                detail={"purpose": "extract", "request_hash": plan.request_hash,
                                        "custom_id": plan.custom_id,
                                        "error": invalid.error[:500]})
                )  # fmt: skip
                continue
            checked = check_answer(
                answer, plan, source=source,
                model=None if source == "replay" else self.model, prompt_version=self.pv,
            )  # fmt: skip
            self.result.dropped.update(checked.dropped)
            self.result.corrected.update(checked.corrected)
            facts.extend(checked.facts)
            per_session = Counter(f.session_key for f in checked.facts)
            sessions.extend(
                DoneSession(tenant_id=plan.tenant_id, namespace=plan.namespace,
                            session_key=s.session_key, content_hash=s.content_hash,
                            model=self.model, prompt_version=self.pv, custom_id=plan.custom_id,
                            facts=per_session.get(s.session_key, 0))
                for s in plan.sessions
            )  # fmt: skip
            if cache:
                cached.append(
                    CachedScore(content_hash=plan.request_hash, model=self.model,
                                prompt_version=self.pv, candidate_id=plan.custom_id, score=0.0,
                                body=answer.model_dump(mode="json"))
                )  # fmt: skip
            self.pending.pop(plan.request_hash, None)
            self.result.applied += 1
        self.result.facts_written += len(facts)
        self.result.blocked_facts += sum(f.authority == "none" for f in facts)
        self.touched |= {(f.tenant_id, f.namespace, f.subject_id) for f in facts}

        def also(con: Any) -> None:
            write_extraction(con, sessions, facts, run_id=self.ctx.run_id, now=self.ctx.now)

        record_answers_and_spend(
            self.stores.meta, cached, entries, collected=collected or [],
            now=self.ctx.now, also=also if (sessions or facts) else None,
        )  # fmt: skip
        crash_point("extract.written")

    def _ledger_outcome(self) -> None:
        r = self.result
        detail = {
            "purpose": "extract", "mode": r.mode, "label": r.label,
            "requests_planned": r.requests_planned, "applied": r.applied,
            "facts": r.facts_written, "deferred": len(r.deferred), "failed": len(r.failed),
            "invalid": len(r.invalid), "retried_invalid": len(r.retried_invalid),
            "given_up": len(r.given_up), "over_budget": len(r.over_budget),
            "no_recorded_answer": len(r.no_recorded_answer), "budget": self.budget.as_dict(),
        }  # fmt: skip
        if r.mode == "replay":
            detail["request_input_tokens_estimate"] = r.request_input_tokens
        record_answers_and_spend(
            self.stores.meta, [],
            [LedgerEntry(run_id=self.ctx.run_id, logged_at=self.ctx.now, mode="outcome",
                         detail=detail)],
            now=self.ctx.now,
        )  # fmt: skip


def _CachedMessage(body: dict[str, Any]) -> ReplayMessage:  # noqa: N802
    """A cached, validated answer shaped like a message, for the one parser."""
    return ReplayMessage([TextBlock(json.dumps(body))], id="cache")
