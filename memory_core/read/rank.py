"""Ranking after the hard filters: fused relevance plus priors, minus penalties, with reasons.

Relevance is reciprocal rank fusion (RRF) of two legs over the whole candidate pool: the vector
leg (cosine distance, comparable across tables since every table shares the embedder) and the
full-text leg (BM25 over ``text``, where the table has an index), so an exact error code or
identifier in the query lifts the records that contain it. Both legs are ranked over the whole
pool (the text leg by BM25 score, not per table: a small table's weak best match must not tie
with a big table's strong one). RRF is normalised by its best possible value for the legs that
ran, which keeps relevance in 0..1 like the other components:

    score = w_rel * relevance + w_entity * entity + w_recency * recency
          + w_importance * importance + w_authority * authority + w_outcome * outcome
          - p_conflict * conflict - p_stale * stale

Each component is in 0..1, so the weights (``[recall]`` in the config) read as exchange rates.
A prior nobody measured is neutral: a record without an importance, or an episode whose outcome
is unknown (a chat turn), takes the mean of the candidates that have one, so a class whose rows
carry the prior (facts: importance, confidence) is not lifted over one whose rows cannot (raw
turns) by the default alone. Entity matching ignores the query terms that name the record's own
subject: the scope already chose the subject, so its name says nothing about which record
answers (every fact about "Caroline" names her; her own turns do not).
``reason`` names the components that drove the score, for the agent and for whoever debugs it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memory_core.config import RecallConfig
from memory_core.models import Authority

__all__ = ["Candidate", "fuse", "query_terms", "score_candidates"]

_TOKEN = re.compile(r"[a-z0-9][a-z0-9_.\-]*[a-z0-9]|[a-z0-9]")
_STOP_WORDS = (
    "a an and are as at be by for from how i in is it my of on or the to was what when where "
    "which who why with do does did can should we you your me our this that"
)
_STOP = frozenset(_STOP_WORDS.split())
_MAX_AUTHORITY = max(a.rank for a in Authority)
_OUTCOME = {"success": 1.0, "partial": 0.5, "unknown": 0.5, "failure": 0.25}


def query_terms(text: str) -> list[str]:
    """Lower-case terms without stop words; identifiers (err_720, v2.1) stay whole."""
    return [t for t in _TOKEN.findall(text.lower()) if t not in _STOP]


@dataclass
class Candidate:
    """One row that passed the hard filters, with what the legs and the ranking said of it."""

    table: str
    record_id: str
    row: dict[str, Any]
    vector_rank: int | None = None
    distance: float | None = None
    text_rank: int | None = None
    text_score: float | None = None  # the text leg's own score (BM25), ranked over the pool
    relevance: float = 0.0
    components: dict[str, float] = field(default_factory=dict)
    score: float = 0.0
    reason: str = ""
    conflict_with: list[str] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str]:
        return (self.table, self.record_id)


def fuse(candidates: list[Candidate], *, rrf_k: int, text_leg: bool) -> None:
    """Global per-leg ranks over the pool, then normalised RRF into ``relevance``.

    A text hit without a score keeps the rank its table's search gave it."""
    by_distance = sorted(
        (c for c in candidates if c.distance is not None),
        key=lambda c: (c.distance, c.table, c.record_id),
    )
    for rank, cand in enumerate(by_distance, start=1):
        cand.vector_rank = rank
    by_text_score = sorted(
        (c for c in candidates if c.text_score is not None),
        key=lambda c: (-(c.text_score or 0.0), c.table, c.record_id),
    )
    for rank, cand in enumerate(by_text_score, start=1):
        cand.text_rank = rank
    legs = 1 + int(text_leg)
    best = legs / (rrf_k + 1)
    for cand in candidates:
        rrf = 0.0
        if cand.vector_rank is not None:
            rrf += 1.0 / (rrf_k + cand.vector_rank)
        if cand.text_rank is not None:
            rrf += 1.0 / (rrf_k + cand.text_rank)
        cand.relevance = rrf / best


def _key_text(table: str, row: Mapping[str, Any]) -> str:
    """The fields an entity or predicate lives in, per table."""
    if table == "facts":
        parts = [row.get("predicate"), row.get("object"), row.get("conditions")]
    elif table == "procedures":
        parts = [row.get("name"), row.get("preconditions"), row.get("effect")]
    elif table == "episodes":
        parts = [row.get("goal"), row.get("conditions"), " ".join(row.get("actions") or [])]
    else:
        parts = [row.get("text")]
    return " ".join(p for p in parts if isinstance(p, str))


def _entity(terms: list[str], table: str, row: Mapping[str, Any]) -> tuple[float, list[str]]:
    """Share of query terms found in the key fields; identifiers (with digits) count double."""
    own = set(query_terms(str(row.get("subject_id") or "")))
    terms = [t for t in terms if t not in own]
    if not terms:
        return 0.0, []
    keys: set[str] = set()
    for token in query_terms(_key_text(table, row).replace('"', " ")):
        keys.add(token)  # error_720_cause matches "error_720_cause", "720" and "cause"
        keys.update(p for p in re.split(r"[_.\-]", token) if p)
    weight = {t: 2.0 if any(ch.isdigit() for ch in t) or "_" in t else 1.0 for t in terms}
    hits = [t for t in dict.fromkeys(terms) if t in keys]
    total = sum(weight[t] for t in dict.fromkeys(terms))
    return (sum(weight[t] for t in hits) / total if total else 0.0), hits


def _recency(row: Mapping[str, Any], at: datetime, half_life_days: float) -> tuple[float, float]:
    when = row.get("valid_from") or row.get("recorded_at")
    if not isinstance(when, datetime):
        return 0.0, math.inf
    age_days = max((at - when).total_seconds() / 86400.0, 0.0)
    return 0.5 ** (age_days / half_life_days), age_days


def _authority(row: Mapping[str, Any]) -> float:
    try:
        return Authority(row.get("authority") or "none").rank / _MAX_AUTHORITY
    except ValueError:
        return 0.0


def _outcome(table: str, row: Mapping[str, Any]) -> float:
    if table == "episodes":
        return _OUTCOME.get(str(row.get("outcome")), 0.5)
    if table == "digests":
        count = row.get("episode_count") or 0
        return ((row.get("success_count") or 0) + 1) / (count + 2)  # Laplace: 0 of 0 is 0.5
    confidence = row.get("confidence")
    return float(confidence) if confidence is not None else 0.5


def _importance(row: Mapping[str, Any], unknown: float = 0.5) -> float:
    value = row.get("importance")
    return min(max(float(value), 0.0), 1.0) if value is not None else unknown


def _unknown_outcome(table: str, row: Mapping[str, Any]) -> bool:
    return table == "episodes" and str(row.get("outcome") or "unknown") == "unknown"


def _neutral_priors(candidates: list[Candidate]) -> tuple[float, float]:
    """The pool's mean importance and outcome over the candidates that have one (0.5 when
    none does): what a record without the prior is given (module docstring)."""
    importance = [_importance(c.row) for c in candidates if c.row.get("importance") is not None]
    outcome = [_outcome(c.table, c.row) for c in candidates if not _unknown_outcome(c.table, c.row)]
    return (
        sum(importance) / len(importance) if importance else 0.5,
        sum(outcome) / len(outcome) if outcome else 0.5,
    )


def _mark_conflicts(candidates: list[Candidate]) -> None:
    """Two served objects for one (subject, predicate, conditions) contradict each other."""
    groups: dict[tuple[Any, ...], list[Candidate]] = {}
    for cand in candidates:
        if cand.table != "facts":
            continue
        row = cand.row
        key = (row.get("subject_id"), row.get("predicate"), row.get("conditions") or "{}")
        groups.setdefault(key, []).append(cand)
    for group in groups.values():
        objects = {c.row.get("object") for c in group}
        if len(objects) < 2:
            continue
        for cand in group:
            cand.conflict_with = sorted(o.record_id for o in group if o is not cand)


def score_candidates(
    candidates: list[Candidate],
    *,
    query: str,
    at: datetime,
    config: RecallConfig,
) -> None:
    """Fill components, score and reason of every candidate (fuse() has run)."""
    terms = query_terms(query)
    _mark_conflicts(candidates)
    weights = {
        "relevance": config.weight_relevance,
        "entity": config.weight_entity,
        "recency": config.weight_recency,
        "importance": config.weight_importance,
        "authority": config.weight_authority,
        "outcome": config.weight_outcome,
    }
    neutral_importance, neutral_outcome = _neutral_priors(candidates)
    for cand in candidates:
        row = cand.row
        entity, hits = _entity(terms, cand.table, row)
        recency, age_days = _recency(row, at, config.recency_half_life_days)
        status = row.get("status")
        conflict = 1.0 if status == "contested" or cand.conflict_with else 0.0
        stale = 1.0 if status == "stale" else 0.0
        comps = {
            "relevance": cand.relevance,
            "entity": entity,
            "recency": recency,
            "importance": _importance(row, neutral_importance),
            "authority": _authority(row),
            "outcome": neutral_outcome if _unknown_outcome(cand.table, row)
            else _outcome(cand.table, row),
        }  # fmt: skip
        gains = {k: weights[k] * v for k, v in comps.items()}
        penalties = {
            "conflict": config.penalty_conflict * conflict,
            "stale": config.penalty_stale * stale,
        }
        cand.components = {k: round(v, 4) for k, v in comps.items()}
        cand.components.update(conflict=conflict, stale=stale)
        cand.score = round(sum(gains.values()) - sum(penalties.values()), 6)
        cand.reason = _reason(cand, gains, penalties, hits, age_days)


def _reason(
    cand: Candidate,
    gains: dict[str, float],
    penalties: dict[str, float],
    hits: list[str],
    age_days: float,
) -> str:
    """The components that carried the score, biggest first, in words an operator reads."""
    legs = []
    if cand.vector_rank is not None:
        legs.append(f"vector #{cand.vector_rank}")
    if cand.text_rank is not None:
        legs.append(f"text #{cand.text_rank}")
    parts = [f"relevance {cand.relevance:.2f} ({' + '.join(legs) or 'no leg'})"]
    total = sum(gains.values()) or 1.0
    for name, gain in sorted(gains.items(), key=lambda kv: -kv[1]):
        if name == "relevance" or gain < 0.1 * total or gain <= 0:
            continue
        if name == "entity":
            parts.append(f"matches {', '.join(hits)}")
        elif name == "recency":
            parts.append(f"recent ({age_days:.0f} d)")
        elif name == "authority":
            parts.append(f"authority {cand.row.get('authority')}")
        else:
            parts.append(f"{name} {gain:.2f}")
    for name, penalty in penalties.items():
        if penalty > 0:
            label = name
            if name == "conflict" and cand.conflict_with:
                label = "conflicts with " + ", ".join(cand.conflict_with)
            elif name == "conflict":
                label = "contested"
            parts.append(f"{label} -{penalty:.2f}")
    return "; ".join(parts)


def decode_json(value: Any) -> Any:
    """JSON-string columns (conditions, provenance, ...) as objects, for agents to read."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value
