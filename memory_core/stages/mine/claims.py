"""Claim aggregation: users' own statements -> preference candidates. Pure logic, no I/O.

Authority decides what may become a preference (invariant 5). Ingest stamped every claim with
the authority of its source role: ``user_statement`` for users, ``none`` for tools and agents.
Only ``user_statement`` claims are aggregated; ``none`` claims are *blocked* (counted, so the
audit log shows how often something tried to plant a preference); claims of other authorities
(``system``) are neither preferences nor attacks and are only counted as ignored.

Per (tenant, subject, predicate) -- never across subjects -- statements are ordered by valid
time (occurred_at, then episode id). Objects are compared case- and whitespace-insensitively.

* An *explicit change* is a statement whose span (or, without a span, the episode text)
  contains one of ``claims.explicit_change_markers`` as whole words, case-insensitive, and
  that follows an earlier statement of a different object: "Actually, from now on I prefer
  light mode" after "I prefer dark mode".
* The *current* object is the object of the latest explicit change; without one, the object
  with the most statements (ties: the one stated last).
* An object gets a candidate when it has >= ``claims.min_statements`` statements or was set by
  an explicit change. The current object's candidate is ``pending_score``; the others are kept
  as ``auto_rejected`` with the reason (superseded by a later explicit change, or outweighed
  by the current object), so a pending one from an earlier run does not stay pending.
* The current candidate ``supersedes`` the candidate of the object that was current before the
  latest explicit change, when that object had a candidate of its own.
* support_ids are the statements of the object; counterexample_ids the statements of other
  objects made after this object was first stated (what contradicted it).
* confidence = the object's share of the statements made since it was first stated.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memory_core.config import ClaimsConfig
from memory_core.models import (
    Authority,
    Candidate,
    CandidateKind,
    CandidateStatus,
    ClaimSpec,
    Provenance,
    stable_id,
)

__all__ = ["ClaimGroup", "ClaimsResult", "Statement", "aggregate_claims", "claim_candidate_id"]


@dataclass(frozen=True)
class Statement:
    """One user claim in one episode."""

    episode_id: str
    subject_id: str
    predicate: str
    object: str
    key: str
    occurred_at: datetime
    explicit: bool
    content_hash: str | None = None
    session_id: str | None = None
    extracted: bool = False  # from stages/extract, not a claim the writing agent structured
    importance: int | None = None  # the extraction's 1-5 importance, when it gave one
    importance_source: str | None = None  # "answer" (the model's or replayed) or "heuristic"


Proposal = Callable[[Sequence["Statement"]], bool]


@dataclass
class ClaimGroup:
    """All statements of one (tenant, subject, predicate), in valid-time order."""

    tenant_id: str
    subject_id: str
    predicate: str
    statements: list[Statement]
    current: str = ""
    changed_from: str | None = None

    @property
    def counts(self) -> dict[str, int]:
        return dict(Counter(s.key for s in self.statements))

    @property
    def conflicts(self) -> int:
        """How many objects beyond the first were stated (0 = consistent)."""
        return max(0, len(self.counts) - 1)


@dataclass
class ClaimsResult:
    candidates: list[Candidate] = field(default_factory=list)
    groups: list[ClaimGroup] = field(default_factory=list)
    blocked: dict[str, int] = field(default_factory=dict)
    ignored: int = 0

    @property
    def blocked_claims(self) -> int:
        return sum(self.blocked.values())


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def claim_candidate_id(
    tenant_id: str, namespace: str, subject_id: str, predicate: str, obj: str, version: str
) -> str:
    """Scope + content + policy version: the same statement pattern updates in place."""
    return stable_id(
        "cand", "semantic", tenant_id, namespace, subject_id, [predicate, _norm(obj)], version
    )


def _markers(config: ClaimsConfig) -> re.Pattern[str] | None:
    words = [re.escape(m.strip()) for m in config.explicit_change_markers if m.strip()]
    if not words:
        return None
    return re.compile(r"\b(?:" + "|".join(words) + r")\b", re.IGNORECASE)


def _claims(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if isinstance(value, str):
        return list(json.loads(value) or [])
    return [dict(c) for c in value]


def _authority(claim: Mapping[str, Any], role: str | None) -> str:
    if claim.get("authority"):
        return str(claim["authority"])
    return Authority.user_statement.value if role == "user" else Authority.none.value


def _statements(
    episodes: Iterable[Mapping[str, Any]], markers: re.Pattern[str] | None, result: ClaimsResult
) -> list[Statement]:
    out = []
    for ep in episodes:
        role = ep.get("source_role")
        for claim in _claims(ep.get("claims")):
            authority = _authority(claim, role)
            if authority == Authority.none.value:
                result.blocked[ep["episode_id"]] = result.blocked.get(ep["episode_id"], 0) + 1
                continue
            if authority != Authority.user_statement.value or role != "user":
                result.ignored += 1
                continue
            said = claim.get("span") or ep.get("text") or ""
            out.append(
                Statement(
                    episode_id=ep["episode_id"],
                    subject_id=ep["subject_id"],
                    predicate=str(claim["predicate"]).strip(),
                    object=str(claim["object"]).strip(),
                    key=_norm(str(claim["object"])),
                    occurred_at=ep["occurred_at"],
                    explicit=bool(markers and markers.search(said)),
                    content_hash=ep.get("content_hash"),
                    session_id=ep.get("session_id"),
                    extracted=bool(claim.get("extracted")),
                    importance=claim.get("importance"),
                    importance_source=claim.get("importance_source"),
                )
            )
    return out


def _resolve(group: ClaimGroup) -> list[int]:
    """Set current/changed_from; returns the indices of the statements that are changes."""
    changes = []
    for i, st in enumerate(group.statements):
        if st.explicit and any(p.key != st.key for p in group.statements[:i]):
            changes.append(i)
    if changes:
        last = changes[-1]
        group.current = group.statements[last].key
        before = [p.key for p in group.statements[:last] if p.key != group.current]
        group.changed_from = before[-1] if before else None
    else:
        last_seen = {s.key: i for i, s in enumerate(group.statements)}
        counts = group.counts
        group.current = max(counts, key=lambda k: (counts[k], last_seen[k]))
    return changes


def _candidate(
    group: ClaimGroup,
    key: str,
    changes: list[int],
    config: ClaimsConfig,
    *,
    namespace: str,
    version: str,
    proposal: Proposal | None = None,
) -> Candidate | None:
    mine = [s for s in group.statements if s.key == key]
    set_by_change = any(group.statements[i].key == key for i in changes)
    enough = len(mine) >= config.min_statements
    if proposal is not None and any(s.extracted for s in mine):
        enough = proposal(mine)  # extracted facts count sessions and episodes instead
    if not enough and not set_by_change:
        return None
    first = group.statements.index(mine[0])
    since = group.statements[first:]
    against = [s for s in since if s.key != key]
    display = mine[-1].object
    cid = claim_candidate_id(
        group.tenant_id, namespace, group.subject_id, group.predicate, display, version
    )
    current = key == group.current
    supersedes = None
    if current and group.changed_from is not None:
        old = [s for s in group.statements if s.key == group.changed_from]
        old_changed = any(group.statements[i].key == group.changed_from for i in changes)
        if len(old) >= config.min_statements or old_changed:
            supersedes = claim_candidate_id(
                group.tenant_id, namespace, group.subject_id, group.predicate, old[-1].object,
                version,
            )  # fmt: skip
    if current:
        status, reason = (
            CandidateStatus.pending_score,
            (f"user stated it {len(mine)} times" + ("; explicit change" if set_by_change else "")),
        )
    else:
        latest = next(s for s in reversed(group.statements) if s.key == group.current)
        status = CandidateStatus.auto_rejected
        reason = (
            f"superseded: a later explicit statement sets {group.predicate} to {latest.object}"
            if changes
            else f"outweighed: {latest.object} has more statements"
        )
    explicit = " (explicit change)" if set_by_change else ""
    return Candidate(
        candidate_id=cid,
        kind=CandidateKind.semantic,
        tenant_id=group.tenant_id,
        subject_id=group.subject_id,
        namespace=namespace,
        claim=ClaimSpec(predicate=group.predicate, object=display),
        support_ids=sorted({s.episode_id for s in mine}),
        counterexample_ids=sorted({s.episode_id for s in against} - {s.episode_id for s in mine}),
        confidence=round(len(mine) / len(since), 4),
        status=status,
        reason=reason,
        authority=Authority.user_statement,
        text=f"{group.subject_id}: {group.predicate} = {display}, "
        f"stated {len(mine)} time(s){explicit}",
        stats={
            "statements": len(mine),
            "objects": group.counts,
            "conflicts": group.conflicts,
            "explicit_change": set_by_change,
            "current": current,
            "valid_from": (
                group.statements[changes[-1]] if current and changes else mine[0]
            ).occurred_at.isoformat(),
            "last_stated_at": mine[-1].occurred_at.isoformat(),
            **(
                {
                    "extracted": True,
                    "sessions": len({s.session_id or s.episode_id for s in mine}),
                    "importance_extracted": max((s.importance or 0) for s in mine) or None,
                    "importance_source": sorted(
                        {s.importance_source for s in mine if s.importance_source}
                    ),
                }
                if any(s.extracted for s in mine)
                else {}
            ),
        },
        supersedes=supersedes,
        policy_version=version,
        provenance=_provenance([*mine, *against]),
    )


def _provenance(statements: Sequence[Statement]) -> list[Provenance]:
    seen: dict[str, Provenance] = {}
    for s in statements:
        seen.setdefault(
            s.episode_id,
            Provenance(
                source_id=s.episode_id, content_hash=s.content_hash, subject_id=s.subject_id
            ),
        )
    return [seen[k] for k in sorted(seen)]


def aggregate_claims(
    episodes: Iterable[Mapping[str, Any]],
    config: ClaimsConfig,
    *,
    tenant_id: str,
    namespace: str,
    policy_version: str,
    proposal: Proposal | None = None,
) -> ClaimsResult:
    """Preference candidates of one partition from its episodes (dicts as Lance returns them).

    Each episode needs ``episode_id``, ``subject_id``, ``source_role``, ``occurred_at``,
    ``claims`` (JSON or list) and optionally ``text``, ``content_hash`` and ``session_id``.
    ``proposal`` decides, instead of ``min_statements``, for objects with extracted
    statements (``stages/extract/statements.py``).
    """
    result = ClaimsResult()
    statements = _statements(episodes, _markers(config), result)
    grouped: dict[tuple[str, str], list[Statement]] = {}
    for st in statements:
        grouped.setdefault((st.subject_id, st.predicate), []).append(st)
    for (subject, predicate), items in sorted(grouped.items()):
        items.sort(key=lambda s: (s.occurred_at, s.episode_id))
        group = ClaimGroup(tenant_id, subject, predicate, items)
        changes = _resolve(group)
        result.groups.append(group)
        for key in sorted(group.counts):
            cand = _candidate(
                group,
                key,
                changes,
                config,
                namespace=namespace,
                version=policy_version,
                proposal=proposal,
            )
            if cand is not None:
                result.candidates.append(cand)
    return result
