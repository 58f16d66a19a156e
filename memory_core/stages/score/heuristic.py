"""The deterministic scorer: the default without an API key and the fallback when the API fails.

Same candidate, evidence and clock give the same score, so a run stays reproducible (invariant
10) whichever scorer served it. Every score it gives is labelled ``heuristic``; it never passes
for an LLM score (DESIGN.md section 7).

Importance is a weighted mean of features in [0, 1], scaled by ``1 - counterexample rate`` and
mapped onto the same 1-5 integer scale the LLM uses::

    support      log-scaled count of distinct supporting episodes (12 or more = 1)
    breadth      distinct subjects, tenant scope only (1 subject = 0, 4 or more = 1)
    recency      half-life of 30 days since the last supporting episode
    outcome      the miner's success rate, else the share of supporting episodes that
                 succeeded, else the miner's confidence
    feedback     Laplace-smoothed share of positive feedback, when there is any
    authority    who vouches: human_approved 1 ... observation 0.2, none 0

An unknown feature (no dates, no feedback) is left out and the weights renormalised, rather
than guessed at.

The same module computes the risk flags code can see for itself (single source, sensitive,
instruction-like, speculative); the stage adds them to the LLM's flags too, so a flag the code
can prove never disappears because the model missed it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import datetime

from memory_core.models import Authority, Candidate
from memory_core.stages.score.evidence import Evidence
from memory_core.stages.score.results import Scored, ScoreInput, ScorerName, ScoringReport

__all__ = ["WEIGHTS", "HeuristicScorer", "deterministic_flags", "heuristic_features"]

WEIGHTS = {
    "support": 0.25,
    "breadth": 0.15,
    "recency": 0.15,
    "outcome": 0.15,
    "feedback": 0.10,
    "authority": 0.20,
}
RECENCY_HALF_LIFE_DAYS = 30.0
_SUPPORT_SATURATION = 12

_INSTRUCTION = re.compile(
    r"\b(ignore (all |any )?(previous|prior|above|earlier) (instructions|rules)|disregard|"
    r"system prompt|you must|always (run|execute|send|share|grant|approve)|"
    r"do not (tell|inform|log)|override|jailbreak|grant (me )?(admin|access|permission))\b",
    re.IGNORECASE,
)
_SPECULATIVE = re.compile(
    r"\b(maybe|might|perhaps|possibly|probably|i think|i guess|not sure|unsure|could be|"
    r"seems? to|rumou?r)\b",
    re.IGNORECASE,
)


def _text_of(candidate: Candidate) -> str:
    parts = [candidate.text]
    if candidate.claim is not None:
        parts += [candidate.claim.predicate, candidate.claim.object]
    if candidate.procedure is not None:
        parts += [candidate.procedure.name, *candidate.procedure.steps]
    return "\n".join(p for p in parts if p)


def deterministic_flags(candidate: Candidate, evidence: Evidence) -> tuple[str, ...]:
    """Risk flags that follow from the record itself, in a fixed order."""
    text = _text_of(candidate)
    flags: list[str] = []
    if evidence.sensitivity == "high":
        flags.append("sensitive")
    if _INSTRUCTION.search(text):
        flags.append("instruction_like")
    if _SPECULATIVE.search(text):
        flags.append("speculative")
    tenant_scope = candidate.subject_id is None
    if evidence.support < 2 or (tenant_scope and evidence.subjects < 2):
        flags.append("single_source")
    return tuple(flags)


def heuristic_features(
    candidate: Candidate, evidence: Evidence, *, now: datetime
) -> dict[str, float | None]:
    """Each feature in [0, 1], or None when the evidence does not say."""
    support = min(1.0, math.log1p(evidence.support) / math.log1p(_SUPPORT_SATURATION))
    breadth = None if candidate.subject_id is not None else min(1.0, (evidence.subjects - 1) / 3)
    recency = None
    if evidence.last_seen is not None:
        age_days = max(0.0, (now - evidence.last_seen).total_seconds() / 86400)
        recency = 0.5 ** (age_days / RECENCY_HALF_LIFE_DAYS)
    known = evidence.successes + evidence.failures
    if evidence.success_rate is not None:  # the miner's rate covers failures outside support
        outcome = evidence.success_rate
    else:
        outcome = evidence.successes / known if known else candidate.confidence
    votes = evidence.feedback_positive + evidence.feedback_negative
    feedback = (evidence.feedback_positive + 1) / (votes + 2) if votes else None
    authority = candidate.authority.rank / Authority.human_approved.rank
    return {
        "support": support,
        "breadth": max(0.0, breadth) if breadth is not None else None,
        "recency": recency,
        "outcome": outcome,
        "feedback": feedback,
        "authority": authority,
    }


def heuristic_importance(features: dict[str, float | None], counterexample_rate: float) -> float:
    """Weighted mean of the known features, discounted by counterexamples: in [0, 1]."""
    known = {k: v for k, v in features.items() if v is not None}
    weight = sum(WEIGHTS[k] for k in known)
    mean = sum(WEIGHTS[k] * v for k, v in known.items()) / weight if weight else 0.0
    return mean * (1.0 - counterexample_rate)


class HeuristicScorer:
    """Deterministic 1-5 importance; labelled ``heuristic`` on every score it gives."""

    name: ScorerName = "heuristic"

    def __init__(self, *, now: datetime) -> None:
        self.now = now

    def score_one(self, candidate: Candidate, evidence: Evidence) -> Scored:
        features = heuristic_features(candidate, evidence, now=self.now)
        raw = heuristic_importance(features, evidence.counterexample_rate)
        importance = max(1, min(5, 1 + round(4 * raw)))
        shown = ", ".join(f"{k}={v:.2f}" for k, v in features.items() if v is not None)
        rationale = (
            f"heuristic: {shown}; counterexample_rate={evidence.counterexample_rate:.2f} "
            f"-> {raw:.2f}"
        )
        return Scored(
            importance=importance,
            scorer="heuristic",
            rationale=rationale,
            kind_check=candidate.kind.value,
            risk_flags=deterministic_flags(candidate, evidence),
            source="heuristic",
            extra={"heuristic_raw": round(raw, 4)},
        )

    def score(self, inputs: Sequence[ScoreInput]) -> ScoringReport:
        report = ScoringReport()
        for item in inputs:
            report.scores[item.candidate.candidate_id] = self.score_one(
                item.candidate, item.evidence
            )
        return report
