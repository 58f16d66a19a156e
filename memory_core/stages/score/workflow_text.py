"""Workflow text for a procedure: Claude writes it, code checks it against the evidence.

Why: a rule-made procedure reads like a log ("get_user_details(user_id=$user_id), then
cancel_reservation(...)"); a reviewer and an agent read a named workflow with when to use it
and its pitfalls more easily. The model only *words* what the support shows: every step it
names must be one of the observed abstract steps of the candidate's supporting episodes, and
the steps must come in an order some supporting episode shows. Anything else (an invented
step, a step out of order) is dropped and counted; an answer left with no valid step is not
used. Offline (no key) or on any failure the candidate keeps its rule-made text: nothing is
presented as the model's that the model did not write.

This module holds the request, the structured answer and the check (pure), and the run: one
request per candidate that passed the policy, answers cached in the score cache by the
request's content hash, model and prompt version, spend in the LLM ledger. The transport
follows the score stage's rule: at least ``score.batch_min_requests`` requests go through
Message Batches on the score stage's ``BatchRunner`` (recorded before polling, resumed after a
crash); fewer go through the plain Messages API, one by one, each answer cached with its spend
as soon as it arrives (a handful of requests should not wait up to a day on a batch).
"""

from __future__ import annotations

import functools
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, ValidationError

from memory_core.config import ScoreConfig
from memory_core.context import RunContext
from memory_core.crash import crash_point
from memory_core.models import Candidate, CandidateStatus, content_hash
from memory_core.stages.score.anthropic_scorer import FailureKind, classify_error
from memory_core.stages.score.batches import BatchOutcome, BatchRunner
from memory_core.stages.score.budget import Budget, estimate_usage
from memory_core.stages.score.results import Usage
from memory_core.step_abstract import step_signature
from memory_core.stores import Stores
from memory_core.stores.candidates import list_candidates, merge_candidate_stats
from memory_core.stores.llm import (
    WORKFLOW_PROMPT,
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
    "PROMPT_VERSION",
    "CheckedWorkflow",
    "WorkflowAnswer",
    "WorkflowResult",
    "check_workflow",
    "parse_workflow",
    "workflow_request",
    "write_workflow_texts",
]

PROMPT_VERSION = WORKFLOW_PROMPT + "-2"  # 2: Message Batches, cached by request hash
TOOL_NAME = "record_workflow"

SYSTEM = (
    "You name and describe a workflow that an AI agent learned from its own successful runs. "
    "Use only the steps listed as observed, written exactly as given (with their $variables), "
    "in an order the runs show. Do not add steps. Pitfalls must come from the failures given."
)


class WorkflowAnswer(BaseModel):
    """The structured answer: what the model is asked to fill in."""

    name: str = Field(min_length=1, max_length=120)
    when_to_use: str = Field(min_length=1, max_length=400)
    steps: list[str] = Field(min_length=1, max_length=30)
    pitfalls: list[str] = Field(default_factory=list, max_length=10)


@dataclass
class CheckedWorkflow:
    """An answer after the check: the steps kept, and what was dropped and why."""

    answer: WorkflowAnswer
    steps: list[str]
    dropped: list[dict[str, str]] = field(default_factory=list)

    @property
    def usable(self) -> bool:
        return bool(self.steps)

    def as_stats(self) -> dict[str, Any]:
        return {
            "name": self.answer.name,
            "when_to_use": self.answer.when_to_use,
            "steps": self.steps,
            "pitfalls": self.answer.pitfalls,
            "dropped_steps": len(self.dropped),
            "dropped": self.dropped,
            "prompt_version": PROMPT_VERSION,
        }


@functools.cache
def _answer_schema() -> str:
    """The answer's JSON schema, built once (pydantic builds it anew on every call: ~3-6 ms,
    once per eligible candidate every night)."""
    return json.dumps(WorkflowAnswer.model_json_schema())


def _tool_schema() -> dict[str, Any]:
    return {
        "name": TOOL_NAME,
        "description": "Record the workflow's name, when to use it, its steps and pitfalls.",
        "input_schema": json.loads(_answer_schema()),  # a copy of its own per request
    }


def workflow_request(
    candidate: Candidate, observed: Sequence[str], pitfalls: Sequence[str], model: str,
    max_tokens: int = 600,
) -> dict[str, Any]:  # fmt: skip
    """Messages API parameters for one candidate (the same body goes into a batch request)."""
    assert candidate.procedure is not None
    body = {
        "procedure_steps": candidate.procedure.steps,
        "observed_steps": list(observed),
        "preconditions": candidate.procedure.preconditions,
        "evidence": {
            "supporting_runs": len(candidate.support_ids),
            "failed_runs_with_same_steps": len(candidate.counterexample_ids),
        },
        "pitfalls": list(pitfalls),
    }
    return {
        "model": model,
        "max_tokens": max_tokens,
        "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        "tools": [_tool_schema()],
        "tool_choice": {"type": "tool", "name": TOOL_NAME},
        "messages": [{"role": "user", "content": json.dumps(body, sort_keys=True)}],
    }


def parse_workflow(content: Sequence[Any]) -> WorkflowAnswer | None:
    """The tool-use block's input as a validated answer; None if there is none or it is bad."""
    for block in content:
        raw = block if isinstance(block, dict) else {}
        kind = getattr(block, "type", None) or raw.get("type")
        if kind != "tool_use":
            continue
        data = getattr(block, "input", None) or raw.get("input")
        try:
            return WorkflowAnswer.model_validate(data)
        except ValidationError:
            return None
    return None


_ARG_KEY = re.compile(r"(?:^|,)\s*([A-Za-z_][\w.\-]*)\s*=")


def _key(step: str) -> str:
    """Compare a named step on its tool and argument keys, as signatures are compared."""
    text = step.strip().strip("`").strip()
    if "(" not in text or not text.endswith(")"):
        return text
    tool, _, inner = text[:-1].partition("(")
    keys = sorted(set(_ARG_KEY.findall(inner)))
    return step_signature({"tool": tool.strip(), "args": dict.fromkeys(keys, "")})


def _in_order(seq: Sequence[str], run: Sequence[str]) -> bool:
    """``seq`` is a subsequence of ``run``."""
    it = iter(run)
    return all(any(s == r for r in it) for s in seq)


def check_workflow(
    answer: WorkflowAnswer, observed: Sequence[str], runs: Sequence[Sequence[str]]
) -> CheckedWorkflow:
    """Keep the named steps that were observed, in an order a supporting run shows.

    ``observed`` are the support's abstract step texts (``AbstractStep.text()``), ``runs``
    each supporting episode's step signatures in order. A step not observed is dropped
    (``invented``); then steps are kept greedily while the kept sequence is still a
    subsequence of some run, and the rest dropped (``order``).
    """
    by_key = {_key(s): s for s in observed}
    checked = CheckedWorkflow(answer, [])
    sigs: list[str] = []
    for step in answer.steps:
        key = _key(step)
        if key not in by_key:
            checked.dropped.append({"step": step[:200], "why": "invented"})
            continue
        trial = [*sigs, key]
        if not any(_in_order(trial, run) for run in runs):
            checked.dropped.append({"step": step[:200], "why": "order"})
            continue
        sigs = trial
        checked.steps.append(by_key[key])
    return checked


@dataclass
class WorkflowResult:
    """What one run did; every eligible candidate lands in exactly one bucket."""

    eligible: int = 0
    mode: str = "none"  # none | offline | sync | batch
    written: int = 0
    cached: int = 0
    offline: int = 0
    refused_budget: int = 0
    failed: int = 0
    deferred: int = 0
    in_flight: int = 0
    invalid: int = 0
    given_up: int = 0
    unusable: int = 0
    dropped_steps: int = 0
    batch_ids: list[str] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


_PASSED = (CandidateStatus.pending_score.value, CandidateStatus.pending_review.value)
MAX_INVALID_ANSWERS = 1  # an answer that fails the schema is not asked for again: no resend
_PURPOSE = "workflow_text"


@dataclass
class _Plan:
    candidate: Candidate
    params: dict[str, Any]
    request_hash: str


def _plans(cands: Sequence[Candidate], model: str) -> dict[str, _Plan]:
    plans: dict[str, _Plan] = {}
    for cand in sorted(cands, key=lambda c: c.candidate_id):
        params = workflow_request(
            cand, cand.stats["observed_steps"], cand.stats.get("pitfall_texts", []), model
        )
        # the request's own content is the cache key: a re-mine that rewrites the candidate's
        # stats with the same evidence asks the same question, and is answered from the cache
        request_hash = content_hash([PROMPT_VERSION, cand.candidate_id, params])
        plans[request_hash] = _Plan(cand, params, request_hash)
    return plans


class _Run:
    """One run: answers from the cache, open batches resumed, the rest sent in a batch."""

    def __init__(
        self, stores: Stores, config: ScoreConfig, ctx: RunContext,
        client: anthropic.Anthropic | None, sleep: Callable[[float], None],
    ) -> None:  # fmt: skip
        self.stores, self.config, self.ctx = stores, config, ctx
        self.result = WorkflowResult()
        self.budget = Budget(config)
        self.total = Usage()
        self.updated: dict[str, dict[str, Any]] = {}
        self.estimates: dict[str, Usage] = {}
        self.client = client
        self.runner = (
            BatchRunner(client, config, stores.meta, run_id=ctx.run_id, now=ctx.now,
                        model=config.model, prompt_version=PROMPT_VERSION, sleep=sleep)
            if client is not None
            else None
        )  # fmt: skip

    def execute(self, plans: dict[str, _Plan]) -> WorkflowResult:
        self.plans = plans
        self.result.eligible = len(plans)
        for h, plan in list(plans.items()):
            if (plan.candidate.stats.get("workflow") or {}).get("key") == h:
                self.result.cached += 1  # already applied
                del plans[h]
        self._from_cache()
        bad = invalid_answers(self.stores.meta, _PURPOSE)
        for h in [h for h in plans if bad.get(h, 0) >= MAX_INVALID_ANSWERS]:
            self.result.given_up += 1
            del plans[h]
        if self.runner is None or self.ctx.dry_run:
            self.result.offline += len(plans)
            self.result.mode = "offline" if plans else self.result.mode
            return self._finish()
        in_flight, open_records = self._resume()
        todo = [p for h, p in plans.items() if h not in in_flight]
        if len(todo) < self.config.batch_min_requests:
            # the score stage's rule: a handful of requests is not worth a batch's wait
            if todo:
                self.result.mode = "sync"
            self._sync(todo)
            if open_records:
                self._collect([], open_records)
            return self._finish()
        self.result.mode = "batch"
        requests = []
        for plan in todo:
            estimate = estimate_usage(plan.params)
            if self.budget.reserve(estimate, batch=True) is not None:
                self.result.refused_budget += 1
                continue
            self.estimates[plan.candidate.candidate_id] = estimate
            requests.append((plan.candidate.candidate_id, plan.request_hash, plan.params))
        records, failure, left = self.runner.submit(requests) if requests else ([], None, [])
        if records:
            crash_point("workflow.submitted")
        self.result.batch_ids = [r.batch_id for r in records]
        if failure is not None:
            if failure.kind is FailureKind.transient:
                self.result.deferred += len(left)
            else:
                self.result.failed += len(left)
        self._collect(records, open_records)
        return self._finish()

    def _collect(self, records: list[BatchRecord], open_records: list[BatchRecord]) -> None:
        assert self.runner is not None
        polled = self.runner.poll([*records, *open_records], wait=True)
        for outcome in polled.collected:
            self._apply(outcome)
        self.result.in_flight = sum(
            1 for r in polled.pending for i in r.items if i.content_hash in self.plans
        )

    def _sync(self, todo: list[_Plan]) -> None:
        """One Messages API request per plan; each answer cached with its spend at once.

        A temporary failure defers this and the remaining requests to a later run, a fatal
        one (key, billing, model) fails them; a refused request fails only itself.
        """
        import anthropic  # here, not at the top: a night without a key never loads the SDK

        assert self.client is not None
        client = self.client.with_options(timeout=self.config.timeout_s,
                                          max_retries=self.config.max_retries)  # fmt: skip
        for index, plan in enumerate(todo):
            estimate = estimate_usage(plan.params)
            if self.budget.reserve(estimate, batch=False) is not None:
                self.result.refused_budget += 1
                continue
            cid, h = plan.candidate.candidate_id, plan.request_hash
            try:
                message = client.messages.create(**plan.params)
            except anthropic.APIError as exc:
                self.budget.settle(estimate, Usage(), batch=False)
                failure = classify_error(exc, self.config)
                self._ledger_sync(Usage(requests=1), cid, h, error=failure.reason)
                if failure.kind is FailureKind.request:
                    self.result.failed += 1
                    continue
                rest = len(todo) - index
                if failure.kind is FailureKind.transient:
                    self.result.deferred += rest
                else:
                    self.result.failed += rest
                return
            usage = Usage.from_api(message.usage)
            self.budget.settle(estimate, usage, batch=False)
            answer = parse_workflow(message.content)
            if answer is None:
                self.result.invalid += 1
                self._ledger_sync(usage, cid, h, invalid=True)
                continue
            cached = CachedScore(content_hash=h, model=self.config.model,
                                 prompt_version=PROMPT_VERSION, candidate_id=cid, score=0.0,
                                 body=answer.model_dump(mode="json"))  # fmt: skip
            self._ledger_sync(usage, cid, h, cached=[cached])
            crash_point("workflow.cached")
            self.plans.pop(h, None)
            self._use(plan, answer, h)

    def _ledger_sync(
        self, usage: Usage, cid: str, request_hash: str, *, cached: list[CachedScore] | None = None,
        invalid: bool = False, error: str | None = None,
    ) -> None:  # fmt: skip
        """The request's spend (and its answer, if any) in one transaction; an invalid answer
        also gets the ``invalid`` row that keeps it from being asked for again."""
        self.total = self.total + usage
        detail: dict[str, Any] = {"stage": _PURPOSE, "purpose": _PURPOSE,
                                  "prompt_version": PROMPT_VERSION, "custom_id": cid,
                                  "request_hash": request_hash}  # fmt: skip
        if error is not None:
            detail["error"] = error
        entries = [
            LedgerEntry(
                run_id=self.ctx.run_id, logged_at=self.ctx.now, mode="sync",
                requests=usage.requests, input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens, cache_read_tokens=usage.cache_read_tokens,
                cache_write_tokens=usage.cache_write_tokens,
                cost_usd=round(usage.cost_usd(self.config, batch=False), 6), detail=detail,
            )
        ]  # fmt: skip
        if invalid:
            entries.append(LedgerEntry(run_id=self.ctx.run_id, logged_at=self.ctx.now,
                                       mode="invalid", detail=detail))  # fmt: skip
        record_answers_and_spend(self.stores.meta, cached or [], entries, now=self.ctx.now)

    def _from_cache(self) -> None:
        hits = get_cached_scores(self.stores.meta, list(self.plans), model=self.config.model,
                                 prompt_version=PROMPT_VERSION)  # fmt: skip
        for h, hit in sorted(hits.items()):
            plan = self.plans.pop(h)
            if self._use(plan, WorkflowAnswer.model_validate(hit.body), h, cached=True):
                self.result.cached += 1

    def _resume(self) -> tuple[set[str], list[BatchRecord]]:
        """Collect workflow batches left open by earlier runs; (in-flight hashes, still open)."""
        assert self.runner is not None
        records = [r for r in open_batches(self.stores.meta)
                   if r.prompt_version.startswith(WORKFLOW_PROMPT)]  # fmt: skip
        if not records:
            return set(), []
        polled = self.runner.poll(records, wait=False)
        for outcome in polled.collected:
            self._apply(outcome)
        return {i.content_hash for r in polled.pending for i in r.items}, list(polled.pending)

    def _use(self, plan: _Plan, answer: WorkflowAnswer, key: str, *, cached: bool = False) -> bool:
        """Check an answer against the evidence and keep it for the candidate; True if used."""
        cand = plan.candidate
        checked = check_workflow(answer, cand.stats["observed_steps"],
                                 cand.stats.get("support_runs", []))  # fmt: skip
        self.result.dropped_steps += len(checked.dropped)
        if not checked.usable:
            self.result.unusable += 1
            return False
        self.updated[cand.candidate_id] = {
            "workflow": {**checked.as_stats(), "key": key, "model": self.config.model,
                         "written_by": "claude"}
        }  # fmt: skip
        if not cached:
            self.result.written += 1
        return True

    def _apply(self, outcome: BatchOutcome) -> None:
        """Cache every valid answer and write the batch's spend in one transaction, then use
        the answers for the candidates still asking the same question."""
        crash_point("workflow.collected")
        record = outcome.record
        cached: list[CachedScore] = []
        entries: list[LedgerEntry] = []
        usable: list[tuple[_Plan, WorkflowAnswer, str]] = []
        for cid, message in outcome.messages.items():
            estimate = self.estimates.pop(cid, None)
            if estimate is not None:
                self.budget.settle(estimate, Usage.from_api(message.usage), batch=True)
            h = outcome.content_hash(cid) or ""
            answer = parse_workflow(message.content)
            if answer is None:
                # asked once this run: a later run may ask again (MAX_INVALID_ANSWERS), this one
                # must not (a batch resumed after a crash would otherwise be sent a second time)
                self.plans.pop(h, None)
                self.result.invalid += 1
                entries.append(
                    LedgerEntry(run_id=self.ctx.run_id, logged_at=self.ctx.now, mode="invalid",
                                detail={"purpose": _PURPOSE, "stage": _PURPOSE,
                                        "request_hash": h, "custom_id": cid})
                )  # fmt: skip
                continue
            cached.append(
                CachedScore(content_hash=h, model=record.model,
                            prompt_version=record.prompt_version, candidate_id=cid, score=0.0,
                            body=answer.model_dump(mode="json"))
            )  # fmt: skip
            plan = self.plans.pop(h, None)
            if plan is not None and record.model == self.config.model:
                usable.append((plan, answer, h))
        for failure in outcome.failures.values():
            if failure.kind is FailureKind.transient:
                self.result.deferred += 1
            else:
                self.result.failed += 1
        self.total = self.total + outcome.usage
        entries.append(
            LedgerEntry(
                run_id=self.ctx.run_id, logged_at=self.ctx.now, mode="batch",
                batch_id=record.batch_id, requests=len(record.items),
                input_tokens=outcome.usage.input_tokens,
                output_tokens=outcome.usage.output_tokens,
                cache_read_tokens=outcome.usage.cache_read_tokens,
                cache_write_tokens=outcome.usage.cache_write_tokens,
                cost_usd=round(outcome.usage.cost_usd(self.config, batch=True), 6),
                detail={"stage": _PURPOSE, "purpose": _PURPOSE,
                        "prompt_version": record.prompt_version,
                        "submitted_by_run": record.run_id, "answers": len(cached)},
            )
        )  # fmt: skip
        record_answers_and_spend(self.stores.meta, cached, entries,
                                 collected=[record.batch_id], now=self.ctx.now)  # fmt: skip
        crash_point("workflow.cached")
        for plan, answer, h in usable:
            self._use(plan, answer, h)

    def count_offline(self, eligible: int) -> WorkflowResult:
        """What ``execute`` returns when every eligible candidate can only be offline
        (``_offline_only``), without planning them."""
        self.result.eligible = self.result.offline = eligible
        self.result.mode = "offline" if eligible else self.result.mode
        return self._finish()

    def _finish(self) -> WorkflowResult:
        self.result.usage = {k: int(v) for k, v in self.total.__dict__.items()}
        if self.updated and not self.ctx.dry_run:
            merge_candidate_stats(self.stores.meta, self.updated, now=self.ctx.now)
        return self.result


def write_workflow_texts(
    stores: Stores,
    config: ScoreConfig,
    ctx: RunContext,
    *,
    client: anthropic.Anthropic | None,
    tenant_id: str | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> WorkflowResult:
    """One request per procedural candidate that passed the policy: Message Batches from
    ``config.batch_min_requests`` requests on, the Messages API below (the score stage's rule).

    Answers are cached by the request's content hash, model and prompt version (the score
    cache), in the same transaction as the batch's spend, so no crash point and no re-mine
    that rewrites the candidate's stats makes a second request for the same question; a batch
    left open by a crashed run is collected, not sent again. Budgeted by the ``[score]``
    per-run limits; an answer that fails the schema is ledgered and the request is given up
    after :data:`MAX_INVALID_ANSWERS`. Without a client only cached answers are used, and the
    rule-made text stays.
    """
    run = _Run(stores, config, ctx, client, sleep)
    eligible = _offline_only(stores, config.model, tenant_id) if client is None else None
    if eligible is not None:
        return run.count_offline(eligible)
    return run.execute(_plans(_eligible(stores, tenant_id), config.model))


def _eligible(stores: Stores, tenant_id: str | None) -> list[Candidate]:
    """The procedural candidates that passed the policy and carry their observed steps."""
    return [
        c
        for status in _PASSED
        for c in list_candidates(
            stores.meta, status=status, kind="procedural", tenant_id=tenant_id, pins=False
        )
        if c.procedure is not None and c.stats.get("observed_steps")
    ]


def _offline_only(stores: Stores, model: str, tenant_id: str | None) -> int | None:
    """How many candidates are eligible, when a run without a client can do nothing but count
    them offline: no answer of this model and prompt version is cached, no invalid answer is
    ledgered, and no eligible candidate holds workflow text (so none counts as cached or given
    up). None otherwise (the run reads and plans every candidate, as with a client).

    Why: reading every passed procedure's body and planning its request only to find no
    cached answer was ~0.3 s of a 1M home's night without a key (1,472 procedures), and grows
    with the store, not with the night (BENCHMARKS.md s47). Three small reads decide it."""
    where = "kind = 'procedural' AND status IN (?, ?)" + (" AND tenant_id = ?" if tenant_id else "")
    params = [*_PASSED, *([tenant_id] if tenant_id else [])]
    if invalid_answers(stores.meta, _PURPOSE):
        return None
    with stores.meta.connect() as con:
        cached = con.execute(
            "SELECT count(*) FROM score_cache WHERE model = ? AND prompt_version = ?",
            [model, PROMPT_VERSION],
        ).fetchall()[0][0]
        if cached:
            return None
        rows = con.execute(
            "SELECT json_type(body, '$.procedure'), body->'$.stats.observed_steps', "
            f"json_type(body, '$.stats.workflow') FROM candidates WHERE {where}",
            params,
        ).fetchall()
    eligible = 0
    for procedure, steps, workflow in rows:
        if procedure in (None, "NULL") or not (json.loads(steps) if steps else None):
            continue
        if workflow not in (None, "NULL"):
            return None  # text applied earlier: the run counts it as cached
        eligible += 1
    return eligible
