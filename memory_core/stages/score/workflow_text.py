"""Workflow text for a procedure: Claude writes it, code checks it against the evidence.

Why: a rule-made procedure reads like a log ("get_user_details(user_id=$user_id), then
cancel_reservation(...)"); a reviewer and an agent read a named workflow with when to use it
and its pitfalls more easily. The model only *words* what the support shows: every step it
names must be one of the observed abstract steps of the candidate's supporting episodes, and
the steps must come in an order some supporting episode shows. Anything else (an invented
step, a step out of order) is dropped and counted; an answer left with no valid step is not
used. Offline (no key) or on any failure the candidate keeps its rule-made text: nothing is
presented as the model's that the model did not write.

This module holds the request, the structured answer and the check (pure, no I/O); sending
goes through the Anthropic SDK client the score stage builds (``build_client``), one request
per candidate that passed the policy.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import anthropic
from pydantic import BaseModel, Field, ValidationError

from memory_core.config import ScoreConfig
from memory_core.context import RunContext
from memory_core.models import Candidate, CandidateStatus
from memory_core.stages.score.budget import Budget, estimate_usage
from memory_core.stages.score.results import Usage
from memory_core.step_abstract import step_signature
from memory_core.stores import Stores
from memory_core.stores.candidates import list_candidates, merge_candidate_stats
from memory_core.stores.llm import LedgerEntry, record_ledger

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

PROMPT_VERSION = "workflow-1"
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


def _tool_schema() -> dict[str, Any]:
    return {
        "name": TOOL_NAME,
        "description": "Record the workflow's name, when to use it, its steps and pitfalls.",
        "input_schema": WorkflowAnswer.model_json_schema(),
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
    written: int = 0
    cached: int = 0
    offline: int = 0
    refused_budget: int = 0
    failed: int = 0
    invalid: int = 0
    unusable: int = 0
    dropped_steps: int = 0
    usage: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


_PASSED = (CandidateStatus.pending_score.value, CandidateStatus.pending_review.value)


def _usage(message: Any) -> Usage:
    u = message.usage
    return Usage(
        requests=1,
        input_tokens=int(u.input_tokens or 0),
        output_tokens=int(u.output_tokens or 0),
        cache_read_tokens=int(getattr(u, "cache_read_input_tokens", 0) or 0),
        cache_write_tokens=int(getattr(u, "cache_creation_input_tokens", 0) or 0),
    )


def write_workflow_texts(
    stores: Stores,
    config: ScoreConfig,
    ctx: RunContext,
    *,
    client: anthropic.Anthropic | None,
    tenant_id: str | None = None,
) -> WorkflowResult:
    """One request per procedural candidate that passed the policy and has no current text.

    Cached: a candidate whose content hash, model and prompt version match its stored
    workflow is not sent again. Budgeted by the ``[score]`` per-run limits, and every request
    is in the LLM ledger. Without a client nothing is sent and the rule-made text stays.
    """
    result = WorkflowResult()
    budget = Budget(config)
    total = Usage()
    updated: dict[str, dict[str, Any]] = {}
    cands = [
        c
        for status in _PASSED
        for c in list_candidates(stores.meta, status=status, kind="procedural", tenant_id=tenant_id)
        if c.procedure is not None and c.stats.get("observed_steps")
    ]
    for cand in sorted(cands, key=lambda c: c.candidate_id):
        result.eligible += 1
        key = f"{cand.content_hash()}:{config.model}:{PROMPT_VERSION}"
        if (cand.stats.get("workflow") or {}).get("key") == key:
            result.cached += 1
            continue
        if client is None:
            result.offline += 1
            continue
        params = workflow_request(
            cand, cand.stats["observed_steps"], cand.stats.get("pitfall_texts", []), config.model
        )
        estimate = estimate_usage(params)
        if budget.reserve(estimate, batch=False) is not None:
            result.refused_budget += 1
            continue
        try:
            message = client.messages.create(**params)
        except anthropic.APIError:
            budget.settle(estimate, Usage(), batch=False)
            total = total + Usage(requests=1)
            result.failed += 1
            continue
        actual = _usage(message)
        budget.settle(estimate, actual, batch=False)
        total = total + actual
        answer = parse_workflow(message.content)
        if answer is None:
            result.invalid += 1
            continue
        checked = check_workflow(answer, cand.stats["observed_steps"],
                                 cand.stats.get("support_runs", []))  # fmt: skip
        result.dropped_steps += len(checked.dropped)
        if not checked.usable:
            result.unusable += 1
            continue
        workflow = {**checked.as_stats(), "key": key, "model": config.model,
                    "written_by": "claude"}  # fmt: skip
        updated[cand.candidate_id] = {"workflow": workflow}
        result.written += 1
    result.usage = {k: int(v) for k, v in total.__dict__.items()}
    if ctx.dry_run:
        return result
    if updated:
        merge_candidate_stats(stores.meta, updated, now=ctx.now)
    if total.requests:
        record_ledger(
            stores.meta,
            [
                LedgerEntry(
                    run_id=ctx.run_id, logged_at=ctx.now, mode="sync", requests=total.requests,
                    input_tokens=total.input_tokens, output_tokens=total.output_tokens,
                    cache_read_tokens=total.cache_read_tokens,
                    cache_write_tokens=total.cache_write_tokens,
                    cost_usd=round(total.cost_usd(config, batch=False), 6),
                    detail={"stage": "workflow_text", "written": result.written,
                            "dropped_steps": result.dropped_steps},
                )
            ],
            now=ctx.now,
        )  # fmt: skip
    return result
