"""Claude as importance scorer, one Messages API request per candidate (the sync path).

The batch path (``batches.py``) shares the error classification, the answer handling and the
one retry of an invalid answer with this module.

What happens on failure, after the SDK's own retries (``score.max_retries``, with backoff):

========================  ==========  =====================================================
error                     action      why
========================  ==========  =====================================================
401 / 403 / 404 / 402     fallback    the key, the permission or the model is wrong; every
                          (all left)  further request would fail the same way: stop calling
429, 529, 5xx, timeout,   defer       temporary; a heuristic score now would freeze a weaker
connection                (all left)  score in review. Stop calling (do not hammer an
                                      overloaded API); the next run tries again
400 / 413 / 422           fallback    this request is refused; the others may be fine
invalid answer            retry once  then fallback, flagged ``llm_invalid_answer``
========================  ==========  =====================================================

Whatever the path, a score labelled ``anthropic`` always comes from a validated answer.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from memory_core.config import ScoreConfig
from memory_core.stages.score.budget import Budget, estimate_usage
from memory_core.stages.score.heuristic import deterministic_flags
from memory_core.stages.score.prompt import (
    InvalidAnswer,
    ScoreAnswer,
    parse_answer,
    request_params,
    retry_params,
)
from memory_core.stages.score.results import (
    Scored,
    ScoreInput,
    ScorerName,
    ScoreSource,
    ScoringReport,
    Usage,
)

if TYPE_CHECKING:
    import anthropic

__all__ = [
    "API_KEY_ENV",
    "NO_KEY_MESSAGE",
    "AnthropicScorer",
    "ApiFailure",
    "FailureKind",
    "build_client",
    "classify_error",
    "classify_error_type",
    "scored_from_answer",
]

logger = logging.getLogger(__name__)

API_KEY_ENV = "ANTHROPIC_API_KEY"
NO_KEY_MESSAGE = f"no {API_KEY_ENV}: scoring with the heuristic scorer (labelled heuristic)"
INVALID_FLAG = "llm_invalid_answer"


class FailureKind(StrEnum):
    fatal = "fatal"  # every request will fail: fall back for all, stop calling
    transient = "transient"  # may pass later: defer all, stop calling
    request = "request"  # only this request: fall back for it, go on


@dataclass(frozen=True)
class ApiFailure:
    kind: FailureKind
    reason: str


def build_client(config: ScoreConfig) -> anthropic.Anthropic | None:
    """A client from ANTHROPIC_API_KEY with the configured timeout and retries, or None."""
    key = os.environ.get(API_KEY_ENV, "").strip()
    if not key:
        return None
    import anthropic  # here, not at the top: a night without a key never loads the SDK

    return anthropic.Anthropic(
        api_key=key, timeout=config.timeout_s, max_retries=config.max_retries
    )


def classify_error(exc: Exception, config: ScoreConfig) -> ApiFailure:
    """Map an SDK exception (raised after its own retries) to what the stage should do."""
    import anthropic  # here, not at the top: a night without a key never loads the SDK

    retries = f"after {config.max_retries} retries"
    if isinstance(exc, anthropic.APITimeoutError):
        return ApiFailure(FailureKind.transient, f"timed out ({config.timeout_s:g}s) {retries}")
    if isinstance(exc, anthropic.APIConnectionError):
        return ApiFailure(FailureKind.transient, f"connection failed {retries}: {exc}")
    if isinstance(exc, anthropic.AuthenticationError):
        return ApiFailure(FailureKind.fatal, f"authentication failed (401): check {API_KEY_ENV}")
    if isinstance(exc, anthropic.PermissionDeniedError):
        return ApiFailure(FailureKind.fatal, "permission denied (403) for this key")
    if isinstance(exc, anthropic.NotFoundError):
        return ApiFailure(
            FailureKind.fatal, f"not found (404): is score.model {config.model!r} right?"
        )
    if isinstance(exc, anthropic.RateLimitError):
        return ApiFailure(FailureKind.transient, f"rate limited (429) {retries}")
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        if status == 402:  # billing: nothing passes until someone pays
            return ApiFailure(FailureKind.fatal, "billing problem (402)")
        if status >= 500 or status in (408, 409):
            name = "overloaded" if status == 529 else "server error"
            return ApiFailure(FailureKind.transient, f"{name} ({status}) {retries}")
        return ApiFailure(FailureKind.request, f"request refused ({status}): {exc.message}")
    return ApiFailure(FailureKind.request, f"unexpected {type(exc).__name__}: {exc}")


_TRANSIENT_TYPES = {
    "rate_limit_error",
    "api_error",
    "overloaded_error",
    "timeout_error",
    "gateway_timeout_error",
}


def classify_error_type(error_type: str, message: str = "") -> ApiFailure:
    """The same decision for a batch result's ``error.type`` string."""
    detail = f"{error_type}: {message}" if message else error_type
    if error_type in _TRANSIENT_TYPES:
        return ApiFailure(FailureKind.transient, f"batch request errored ({detail})")
    return ApiFailure(FailureKind.request, f"batch request errored ({detail})")


def scored_from_answer(
    answer: ScoreAnswer,
    item: ScoreInput,
    *,
    model: str,
    source: ScoreSource,
    extra: dict[str, Any],
) -> Scored:
    """An LLM score; the flags code can prove are added to the ones the model gave."""
    flags = list(answer.risk_flags)
    flags += [f for f in deterministic_flags(item.candidate, item.evidence) if f not in flags]
    return Scored(
        importance=answer.score,
        scorer="anthropic",
        rationale=answer.rationale,
        kind_check=answer.kind_check,
        risk_flags=tuple(flags),
        source=source,
        model=model,
        extra={**extra, "llm_risk_flags": list(answer.risk_flags)},
        answer=answer.model_dump(mode="json"),
    )


class AnthropicScorer:
    """Scores candidates with Claude; every request passes the run's budget first."""

    name: ScorerName = "anthropic"

    def __init__(self, client: anthropic.Anthropic, config: ScoreConfig, *, budget: Budget) -> None:
        self.client = client.with_options(timeout=config.timeout_s, max_retries=config.max_retries)
        self.config = config
        self.budget = budget
        self.usage = Usage()  # every request this scorer sent, for the ledger's sync row

    def params_for(self, item: ScoreInput) -> dict[str, Any]:
        return request_params(item.candidate, item.evidence, self.config)

    def score(self, inputs: Sequence[ScoreInput]) -> ScoringReport:
        """Sync scoring; a fatal or transient failure stops the loop for the rest."""
        report = ScoringReport()
        for index, item in enumerate(inputs):
            stop = self._score_one(item, report)
            if stop is None:
                continue
            rest = [i.candidate.candidate_id for i in inputs[index:]]
            target = report.fallbacks if stop.kind is FailureKind.fatal else report.deferred
            for cid in rest:
                target[cid] = stop.reason
            logger.warning(
                "scoring stopped after %d of %d requests: %s; %s %d candidate(s)",
                index,
                len(inputs),
                stop.reason,
                "heuristic fallback for" if stop.kind is FailureKind.fatal else "deferred",
                len(rest),
            )
            break
        return report

    def _score_one(self, item: ScoreInput, report: ScoringReport) -> ApiFailure | None:
        cid = item.candidate.candidate_id
        params = self.params_for(item)
        result = self._call(params, report)
        if isinstance(result, str):
            report.over_budget[cid] = result
            return None
        if isinstance(result, ApiFailure):
            if result.kind is FailureKind.request:
                report.fallbacks[cid] = result.reason
                return None
            return result
        try:
            answer = parse_answer(result.content, result.stop_reason)
        except InvalidAnswer as invalid:
            return self.retry_invalid(item, params, invalid, report, source="sync")
        report.scores[cid] = scored_from_answer(
            answer, item, model=self.config.model, source="sync", extra={"message_id": result.id}
        )
        return None

    def retry_invalid(
        self,
        item: ScoreInput,
        params: dict[str, Any],
        invalid: InvalidAnswer,
        report: ScoringReport,
        *,
        source: ScoreSource,
    ) -> ApiFailure | None:
        """Retry an invalid answer once (sync); then fall back, flagged. Returns a stop."""
        cid = item.candidate.candidate_id
        logger.info("invalid answer for %s (%s); retrying once", cid, invalid.error)
        report.retries += 1
        result = self._call(retry_params(params, invalid.text, invalid.error), report)
        if isinstance(result, str):
            report.over_budget[cid] = f"{result} (before retrying an invalid answer)"
            return None
        if isinstance(result, ApiFailure):
            if result.kind is FailureKind.request:
                report.fallbacks[cid] = result.reason
                report.flags.setdefault(cid, []).append(INVALID_FLAG)
                return None
            return result
        try:
            answer = parse_answer(result.content, result.stop_reason)
        except InvalidAnswer as again:
            report.fallbacks[cid] = f"invalid answer twice: {invalid.error}; then {again.error}"
            report.flags.setdefault(cid, []).append(INVALID_FLAG)
            return None
        report.scores[cid] = scored_from_answer(
            answer,
            item,
            model=self.config.model,
            source=source,
            extra={"message_id": result.id, "retried_invalid_answer": invalid.error},
        )
        return None

    def _call(self, params: dict[str, Any], report: ScoringReport) -> Any:
        """One request: reserve, send, settle. Returns the message, an ApiFailure, or the
        budget refusal reason (a str) when the request does not fit."""
        import anthropic  # here, not at the top: a night without a key never loads the SDK

        estimate = estimate_usage(params)
        refusal = self.budget.reserve(estimate, batch=False)
        if refusal is not None:
            return refusal
        try:
            message = self.client.messages.create(**params)
        except anthropic.APIError as exc:
            self.budget.settle(estimate, Usage(), batch=False)
            self._count(report, Usage(requests=1))  # sent and failed: counted, not billed
            return classify_error(exc, self.config)
        actual = Usage.from_api(message.usage)
        self.budget.settle(estimate, actual, batch=False)
        self._count(report, actual)
        return message

    def _count(self, report: ScoringReport, usage: Usage) -> None:
        report.usage = report.usage + usage
        self.usage = self.usage + usage
