"""Importance scoring of candidates: Claude through Message Batches, or an honest heuristic.

We score candidates, not episodes, so spend grows with what is worth promoting rather than with
traffic (DESIGN.md section 7). Modules:

    stage.py             score_candidates: resume, select, cache, budget, score, write
    prompt.py            rubric, user message, ScoreAnswer (the validated structured answer)
    anthropic_scorer.py  one Messages API request per candidate; error policy (fallback/defer)
    batches.py           Message Batches: submit, record before polling, poll, collect
    heuristic.py         the deterministic scorer (no key, or fallback), labelled "heuristic"
    evidence.py          a content-free evidence summary both scorers read
    budget.py            per-run token and cost limits
    report.py            ScoreResult, candidate updates and ledger rows
"""

from memory_core.stages.score.anthropic_scorer import NO_KEY_MESSAGE, AnthropicScorer
from memory_core.stages.score.budget import Budget
from memory_core.stages.score.evidence import Evidence
from memory_core.stages.score.heuristic import HeuristicScorer
from memory_core.stages.score.prompt import ScoreAnswer, prompt_version
from memory_core.stages.score.report import MAX_DEFERRALS, ScoreResult
from memory_core.stages.score.results import Scored, ScoreInput, Scorer, ScoringReport, Usage
from memory_core.stages.score.stage import score_candidates

__all__ = [
    "MAX_DEFERRALS",
    "NO_KEY_MESSAGE",
    "AnthropicScorer",
    "Budget",
    "Evidence",
    "HeuristicScorer",
    "ScoreAnswer",
    "ScoreInput",
    "ScoreResult",
    "Scored",
    "Scorer",
    "ScoringReport",
    "Usage",
    "prompt_version",
    "score_candidates",
]
