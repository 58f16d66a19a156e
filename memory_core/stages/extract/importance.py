"""Importance of an extracted fact on the 1-5 rubric, and which route proposes a fact.

Who scores: Claude scores each fact's importance in the extraction answer itself, with the
rubric in ``prompt.RUBRIC`` (same Batches request, no second call). When an answer carries
no importance -- replayed dataset annotations, or a model that left the field out -- the
deterministic fallback below scores the fact and every report labels that score
``heuristic``. The heuristic is never written over an answer's score and never stored: it is
computed when the proposal rule reads the fact, so a later real score replaces it.

The heuristic follows the rubric's wording (5 = durable, agents would act wrongly without it;
1 = trivia): the kind sets a base (preferences and decisions are meant to last, events
happen once), words naming durable traits (identity, health, family, work, home, lasting
likes) raise it, and words that tie the statement to one moment lower it. It reads only the
fact's own words, the same way for any conversation.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "HEURISTIC_LABEL",
    "ProposalRoutes",
    "fact_importance",
    "heuristic_importance",
    "proposal_routes",
]

HEURISTIC_LABEL = "heuristic scores, not Claude"

_BASE = {"preference": 4, "decision": 4, "plan": 3, "fact": 3, "event": 2}
_DURABLE = re.compile(
    r"\b(allerg\w*|diet\w*|vegan|vegetarian|religio\w*|faith|married|wife|husband|partner|"
    r"spouse|divorc\w*|kids?|child(?:ren)?|sons?|daughters?|parents?|mother|father|mom|dad|"
    r"sisters?|brothers?|family|pets?|dogs?|cats?|job|works?|worked|career|profession\w*|"
    r"employ\w*|lives|living|moved|home|born|identif\w*|identity|transgender|gay|lesbian|"
    r"name[ds]?|degree|stud(?:y|ies|ying)|school|university|goals?|dreams?|always|never|"
    r"favou?rite|prefers?|likes?|loves?|hates?|dislikes?|passion\w*|hobb(?:y|ies)|values?|"
    r"disabilit\w*|condition|diagnos\w*|medication|language|nationality|citizen\w*|owns?)\b",
    re.IGNORECASE,
)
_MOMENT = re.compile(
    r"\b(yesterday|today|tonight|tomorrow|last (?:night|week|weekend|month)|this (?:morning|"
    r"afternoon|evening|week|weekend)|recently|just|once|earlier|the other day)\b",
    re.IGNORECASE,
)


def heuristic_importance(kind: str, predicate: str, obj: str) -> int:
    """The deterministic 1-5 score of one fact (see the module docstring)."""
    text = f"{predicate.replace('_', ' ')} {obj}"
    score = _BASE.get(kind, 3)
    if _DURABLE.search(text):
        score += 1
    if _MOMENT.search(text):
        score -= 1
    return max(1, min(5, score))


def fact_importance(fact: Any) -> tuple[int, str]:
    """(importance, source) of an extracted fact row: the answer's own score when it has one
    (``answer``), else the heuristic (``heuristic``)."""
    if fact.importance is not None:
        return int(fact.importance), "answer"
    return heuristic_importance(fact.kind, fact.predicate, fact.object), "heuristic"


@dataclass
class ProposalRoutes:
    """How many objects (one subject's statements of one predicate + object) each route
    proposes; an object proposed by evidence is not counted again under importance."""

    objects: int = 0
    by_evidence: int = 0
    by_answer_importance: int = 0
    by_heuristic_importance: int = 0
    not_proposed: int = 0

    @property
    def proposed(self) -> int:
        return self.by_evidence + self.by_answer_importance + self.by_heuristic_importance

    def as_dict(self) -> dict[str, int]:
        return {
            "objects": self.objects,
            "proposed": self.proposed,
            "by_evidence": self.by_evidence,
            "by_answer_importance": self.by_answer_importance,
            "by_heuristic_importance": self.by_heuristic_importance,
            "not_proposed": self.not_proposed,
        }


def proposal_routes(facts: Iterable[Any], config: Any) -> ProposalRoutes:
    """Apply the proposal rule (``statements.proposal_rule``'s logic) to extracted facts with
    user authority, grouped as the claims path groups them, and say which route proposed
    each object: distinct evidence (``min_sessions`` and ``min_episodes``), or one explicit
    self-statement whose importance (the answer's, else the heuristic's) reaches
    ``single_statement_min_importance``."""
    groups: dict[tuple[str, ...], list[Any]] = {}
    for f in facts:
        if f.authority != "user_statement" or not f.self_evidence:
            continue
        key = (f.tenant_id, f.namespace, f.subject_id, f.group_predicate or f.predicate,
               (f.group_object or f.object).casefold())  # fmt: skip
        groups.setdefault(key, []).append(f)
    routes = ProposalRoutes(objects=len(groups))
    for members in groups.values():
        sessions = {f.session_key for f in members}
        episodes = {e for f in members for e in f.self_evidence}
        if len(sessions) >= config.min_sessions and len(episodes) >= config.min_episodes:
            routes.by_evidence += 1
            continue
        scored: Sequence[tuple[int, str]] = [fact_importance(f) for f in members]
        best = [src for score, src in scored if score >= config.single_statement_min_importance]
        if "answer" in best:
            routes.by_answer_importance += 1
        elif best:
            routes.by_heuristic_importance += 1
        else:
            routes.not_proposed += 1
    return routes
