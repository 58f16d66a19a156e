"""Score candidates against the demo's ground truth (labels are used only here, to score).

A procedural candidate is correct when its (tenant, namespace, steps) is a true procedure and
its preconditions include the true separating condition (or an equivalent one). A preference
candidate is correct when the user really stated that object for that (subject, predicate)
often enough, or as an explicit change of mind. An insight candidate is judged by its twin.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memory_core.models import Candidate, CandidateKind, CandidateStatus

__all__ = ["CandidateScore", "score_candidates_against_truth"]

_PROPOSED = {
    CandidateStatus.pending_score,
    CandidateStatus.pending_review,
    CandidateStatus.approved,
    CandidateStatus.promoted,
}


@dataclass
class CandidateScore:
    true_positives: int = 0
    false_positives: int = 0
    expected: int = 0
    found: int = 0
    wrong: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)

    @property
    def precision(self) -> float:
        proposed = self.true_positives + self.false_positives
        return self.true_positives / proposed if proposed else 1.0

    @property
    def recall(self) -> float:
        return self.found / self.expected if self.expected else 1.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "precision": round(self.precision, 4),
            "recall": round(self.recall, 4),
            "true_positives": self.true_positives,
            "false_positives": self.false_positives,
            "expected": self.expected,
            "found": self.found,
            "wrong": self.wrong[:20],
            "missed": self.missed[:20],
        }


def _includes(pre: dict[str, str], want: dict[str, str]) -> bool:
    return all(pre.get(k) == v for k, v in want.items())


def _procedure_ok(cand: Candidate, truth: list[dict[str, Any]]) -> str | None:
    assert cand.procedure is not None
    for proc in truth:
        if (
            proc["tenant_id"] == cand.tenant_id
            and proc["namespace"] == cand.namespace
            and proc["steps"] == cand.procedure.steps
        ):
            options = [proc["preconditions"], *proc.get("equivalent_preconditions", [])]
            if any(_includes(cand.procedure.preconditions, o) for o in options):
                return f"{proc['tenant_id']}/{proc['namespace']}/{proc['name']}"
    return None


def score_candidates_against_truth(
    candidates: list[Candidate], truth: dict[str, Any]
) -> dict[str, Any]:
    """Precision and recall per kind, plus the overall figure the issue asks for."""
    proposed = [c for c in candidates if c.status in _PROPOSED]
    procedures = CandidateScore(expected=len(truth["procedures"]))
    matched: set[str] = set()
    procedure_ok: dict[str, bool] = {}
    for cand in proposed:
        if cand.kind is CandidateKind.procedural:
            name = _procedure_ok(cand, truth["procedures"])
            procedure_ok[cand.candidate_id] = name is not None
            if name:
                procedures.true_positives += 1
                matched.add(name)
            else:
                procedures.false_positives += 1
                procedures.wrong.append(cand.text or cand.candidate_id)
    procedures.found = len(matched)
    every = {f"{p['tenant_id']}/{p['namespace']}/{p['name']}" for p in truth["procedures"]}
    procedures.missed = sorted(every - matched)

    qualifying = {
        (p["tenant_id"], p["subject_id"], p["predicate"]): p
        for p in truth["preferences"]
        if p["qualifies"]
    }
    preferences = CandidateScore(expected=len(qualifying))
    insights = CandidateScore()
    found_prefs: set[tuple[str, str, str]] = set()
    for cand in proposed:
        if cand.kind is not CandidateKind.semantic or cand.claim is None:
            continue
        twin = cand.stats.get("twin_of") or cand.stats.get("pitfall_of")
        if twin:  # an insight twin or a pitfall stands or falls with its procedure
            if procedure_ok.get(twin, False):
                insights.true_positives += 1
            else:
                insights.false_positives += 1
                insights.wrong.append(cand.text or cand.candidate_id)
            continue
        key = (cand.tenant_id, cand.subject_id or "", cand.claim.predicate)
        pref = qualifying.get(key)
        objects = {h["object"] for h in pref["history"]} if pref else set()
        if pref and cand.claim.object in objects:
            preferences.true_positives += 1
            if cand.claim.object == pref["current_object"]:
                found_prefs.add(key)
        else:
            preferences.false_positives += 1
            preferences.wrong.append(f"{key} -> {cand.claim.object}")
    preferences.found = len(found_prefs)
    preferences.missed = [str(k) for k in sorted(set(qualifying) - found_prefs)]

    tp = procedures.true_positives + preferences.true_positives + insights.true_positives
    fp = procedures.false_positives + preferences.false_positives + insights.false_positives
    expected = procedures.expected + preferences.expected
    found = procedures.found + preferences.found
    return {
        "precision": round(tp / (tp + fp), 4) if tp + fp else 1.0,
        "recall": round(found / expected, 4) if expected else 1.0,
        "procedural": procedures.as_dict(),
        "preferences": preferences.as_dict(),
        "insights": insights.as_dict(),
    }
