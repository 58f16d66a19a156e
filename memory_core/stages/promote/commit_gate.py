"""The commit-time gate: a candidate is committed only with the authority its kind needs.

Invariant 5, checked against the episodes themselves at commit time, whatever the candidate
record, the reviewer or auto-approval say:

* a preference (a semantic claim about a subject) needs the user's own statements: every
  supporting episode must be that subject's, from ``source_role = user``, carrying a
  ``user_statement`` claim of the predicate; and the committed object must be one the user
  stated (a reviewer may pick among the user's own statements or fix a mis-extracted object
  that appears in what the user said, but not put words in the user's mouth);
* a procedure, and a semantic insight mined with one, needs a human reviewer: never
  auto-approval;
* every supporting episode must still be there and active in the candidate's tenant: a memory
  is not derived from evidence that was forgotten or revoked since it was mined.

The gate returns a reason to refuse (naming episode ids and roles, never content) or None.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memory_core.models import Authority, Candidate, CandidateKind
from memory_core.stages.promote.supersede import normalise
from memory_core.stages.review.decisions import AUTO_REVIEWER, is_twin

__all__ = ["GateResult", "check_candidate"]


@dataclass(frozen=True)
class GateResult:
    """``refusal`` is None when the candidate may be committed, with ``authority`` and the
    episodes (``sources``) the committed record rests on."""

    refusal: str | None
    authority: Authority = Authority.none
    sources: tuple[str, ...] = ()


def _claims(value: Any) -> list[dict[str, Any]]:
    if not value:
        return []
    return list(json.loads(value)) if isinstance(value, str) else [dict(c) for c in value]


def _missing(
    candidate: Candidate, ids: Sequence[str], episodes: Mapping[str, Mapping[str, Any]]
) -> str | None:
    gone = [
        e
        for e in ids
        if e not in episodes
        or episodes[e].get("status") != "active"
        or episodes[e].get("tenant_id") != candidate.tenant_id
    ]
    if gone:
        return (
            f"{len(gone)} supporting episode(s) are gone or inactive ({', '.join(gone[:5])}); "
            "run consolidation again so the candidate reflects the evidence that remains"
        )
    return None


def _states(ep: Mapping[str, Any], predicate: str, obj: str) -> bool:
    """Did this episode's user claim say ``obj`` (or its text/span contain it)?"""
    want = normalise(obj)
    for claim in _claims(ep.get("claims")):
        if claim.get("predicate") != predicate:
            continue
        if normalise(str(claim.get("object", ""))) == want:
            return True
        if want and want in normalise(str(claim.get("span") or "")):
            return True
    return bool(want) and want in normalise(str(ep.get("text") or ""))


def _preference(candidate: Candidate, episodes: Mapping[str, Mapping[str, Any]]) -> GateResult:
    assert candidate.claim is not None
    predicate, obj = candidate.claim.predicate, candidate.claim.object
    if candidate.subject_id is None:
        return GateResult("a preference needs a subject: it cannot hold at tenant scope")
    for eid in candidate.support_ids:
        ep = episodes[eid]
        role = ep.get("source_role")
        if role != "user":
            return GateResult(
                f"episode {eid} is {role} output (source_role={role}): an observation is "
                "never a preference"
            )
        if ep.get("subject_id") != candidate.subject_id:
            return GateResult(
                f"episode {eid} belongs to another subject: preferences never aggregate "
                "across subjects"
            )
        authorities = {
            c.get("authority") for c in _claims(ep.get("claims")) if c.get("predicate") == predicate
        }
        if Authority.user_statement.value not in authorities:
            return GateResult(
                f"episode {eid} has no user statement of {predicate!r} (authority "
                f"{sorted(a or 'none' for a in authorities) or ['none']})"
            )
    pool = [*candidate.support_ids, *candidate.counterexample_ids]
    stating = [
        e
        for e in pool
        if e in episodes
        and episodes[e].get("source_role") == "user"
        and episodes[e].get("subject_id") == candidate.subject_id
        and _states(episodes[e], predicate, obj)
    ]
    if not stating:
        return GateResult(
            f"the user never stated this object for {predicate!r} in the evidence; "
            "a reviewer may correct an object only to what the user said"
        )
    return GateResult(None, Authority.user_statement, tuple(sorted(set(stating))))


def check_candidate(
    candidate: Candidate,
    episodes: Mapping[str, Mapping[str, Any]],
    *,
    reviewer: str,
) -> GateResult:
    """Refusal reason or the authority and sources of the record to commit."""
    if not reviewer.strip():
        return GateResult("no reviewer recorded")
    missing = _missing(candidate, candidate.support_ids, episodes)
    if missing:
        return GateResult(missing)
    human = reviewer != AUTO_REVIEWER
    if candidate.kind is CandidateKind.procedural or is_twin(candidate):
        if not human:
            return GateResult("procedures and their insights are never auto-approved")
        evidence = [
            e for e in (*candidate.support_ids, *candidate.counterexample_ids) if e in episodes
        ]
        return GateResult(None, Authority.human_approved, tuple(sorted(set(evidence))))
    if candidate.claim is None:
        return GateResult("a semantic candidate without a claim")
    if candidate.authority is not Authority.user_statement:
        return GateResult(
            f"a semantic claim with authority {candidate.authority.value} is not a user "
            "statement and not an insight of an approved procedure"
        )
    return _preference(candidate, episodes)
