"""A compact, content-free summary of the episodes a candidate rests on.

Both scorers read it: the heuristic computes its features from it, and the LLM prompt shows it
instead of raw episodes, so a request costs a few hundred tokens whatever the episodes say and no
episode text (or secret that slipped past redaction) is sent for scoring.

The summary comes from the candidate itself (support ids, provenance, mining stats) and, when the
episodes table is there, from the supporting episodes in Lance (time, outcome, feedback,
sensitivity). The Lance read is scoped by tenant, so nothing crosses tenants.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from memory_core.errors import StoreError
from memory_core.models import Candidate, utc
from memory_core.stores.lance import LanceStore, sql_quote

__all__ = ["Evidence", "feedback_polarity", "load_evidence"]

logger = logging.getLogger(__name__)

_SENSITIVITY_RANK = {"low": 0, "medium": 1, "high": 2}
_POSITIVE = re.compile(
    r"\b(thanks?|thank you|worked|works|great|perfect|solved|fixed|helpful|correct|exactly)\b",
    re.IGNORECASE,
)
_NEGATIVE = re.compile(
    r"\b(wrong|didn'?t work|doesn'?t work|not work|broke|broken|useless|incorrect|bad|"
    r"not helpful|failed|still fails?)\b",
    re.IGNORECASE,
)
_CHUNK = 500
_SCAN_OVER = 5_000  # ids of one tenant above which one tenant scan replaces IN lists


def feedback_polarity(text: str | None) -> int:
    """+1, -1 or 0 from a feedback line; negative wins a tie ("thanks, but still broken")."""
    if not text:
        return 0
    if _NEGATIVE.search(text):
        return -1
    return 1 if _POSITIVE.search(text) else 0


@dataclass(frozen=True)
class Evidence:
    """Counts and dates only; ``None`` where a feature is unknown (the scorer skips it)."""

    support: int
    counterexamples: int
    subjects: int
    last_seen: datetime | None = None
    successes: int = 0
    failures: int = 0
    feedback_positive: int = 0
    feedback_negative: int = 0
    sensitivity: str = "low"
    success_rate: float | None = None  # the miner's pattern success rate, when it gave one

    @property
    def counterexample_rate(self) -> float:
        total = self.support + self.counterexamples
        return self.counterexamples / total if total else 0.0

    @classmethod
    def from_candidate(
        cls, candidate: Candidate, support_subjects: AbstractSet[str] | None = None
    ) -> Evidence:
        """What the candidate record alone tells; mining stats fill the gaps when present.

        ``support_subjects``: the subjects of the pins of supporting episodes, when the
        candidate was read without its pins (``list_candidates(pins=False)``); taken from
        ``candidate.provenance`` otherwise.

        Stats keys read (from the miners, all optional): ``support_subjects`` /
        ``distinct_subjects``, ``last_stated_at`` / ``last_seen``, ``success_rate``,
        ``successes``, ``failures``, ``feedback_positive``, ``feedback_negative``,
        ``sensitivity``.
        """
        stats = candidate.stats
        support = set(candidate.support_ids)
        if support_subjects is None:
            subjects = {p.subject_id for p in candidate.provenance if p.source_id in support}
            subjects.discard(None)
        else:
            subjects = set(support_subjects)
        n_subjects = (
            _int(stats.get("support_subjects"))
            or _int(stats.get("distinct_subjects"))
            or len(subjects)
        )
        rate = stats.get("success_rate")
        if candidate.subject_id is not None:
            n_subjects = max(n_subjects, 1)
        return cls(
            support=len(support),
            counterexamples=len(set(candidate.counterexample_ids)),
            subjects=n_subjects,
            last_seen=_time(
                stats.get("last_stated_at") or stats.get("last_seen") or stats.get("last_at")
            ),
            successes=_int(stats.get("successes")),
            failures=_int(stats.get("failures")),
            feedback_positive=_int(stats.get("feedback_positive")),
            feedback_negative=_int(stats.get("feedback_negative")),
            sensitivity=str(stats.get("sensitivity") or "low"),
            success_rate=float(rate) if isinstance(rate, int | float) else None,
        )

    def summary(self) -> dict[str, Any]:
        """The evidence block the LLM sees (no ids, no episode text)."""
        out: dict[str, Any] = {
            "supporting_episodes": self.support,
            "counterexamples": self.counterexamples,
            "distinct_subjects": self.subjects,
        }
        if self.last_seen is not None:
            out["last_seen"] = self.last_seen.date().isoformat()
        if self.successes or self.failures:
            out["outcomes"] = {"success": self.successes, "failure": self.failures}
        if self.success_rate is not None:
            out["success_rate"] = round(self.success_rate, 3)
        if self.feedback_positive or self.feedback_negative:
            out["feedback"] = {
                "positive": self.feedback_positive,
                "negative": self.feedback_negative,
            }
        if self.sensitivity != "low":
            out["sensitivity"] = self.sensitivity
        return out


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return utc(value) if value.tzinfo else None
    if isinstance(value, str) and value:
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return utc(parsed) if parsed.tzinfo else None
    return None


def load_evidence(
    lance: LanceStore | None,
    candidates: Sequence[Candidate],
    *,
    support_subjects: Mapping[str, AbstractSet[str]] | None = None,
) -> dict[str, Evidence]:
    """Evidence per candidate id; episodes in Lance refine what the candidate record says.

    ``support_subjects`` (by candidate id) when the candidates were read without their pins:
    see :meth:`Evidence.from_candidate`.

    A missing or unreachable episodes table is not an error here: scoring still works from the
    candidate record, and the read path's errors surface in the stages that own that table.
    """
    subjects = support_subjects if support_subjects is not None else {}
    base = {
        c.candidate_id: Evidence.from_candidate(
            c, subjects.get(c.candidate_id, set()) if support_subjects is not None else None
        )
        for c in candidates
    }
    if lance is None or not candidates:
        return base
    by_tenant: dict[str, set[str]] = defaultdict(set)
    for cand in candidates:
        by_tenant[cand.tenant_id].update(cand.support_ids)
    try:
        rows = {
            (tenant, r["episode_id"]): r
            for tenant, ids in by_tenant.items()
            for r in _episode_rows(lance, tenant, sorted(ids))
        }
    except (StoreError, OSError, ValueError) as exc:
        logger.debug("episode evidence unavailable, scoring from candidate records: %s", exc)
        return base
    out: dict[str, Evidence] = {}
    for cand in candidates:
        found = [rows[(cand.tenant_id, e)] for e in cand.support_ids if (cand.tenant_id, e) in rows]
        out[cand.candidate_id] = (
            _refine(base[cand.candidate_id], found) if found else base[cand.candidate_id]
        )
    return out


def _episode_rows(lance: LanceStore, tenant: str, ids: list[str]) -> Iterable[dict[str, Any]]:
    columns = ["episode_id", "subject_id", "occurred_at", "outcome", "feedback", "sensitivity"]
    if len(ids) > _SCAN_OVER:
        # many ids (a first night at scale: ~500k at 1M episodes): one scan of the tenant's
        # narrow columns filtered in Arrow beats hundreds of IN-list scans of the table
        table = lance.scan("episodes", where=f"tenant_id = {sql_quote(tenant)}", columns=columns)
        keep = pc.is_in(table.column("episode_id"), value_set=pa.array(ids, pa.string()))
        yield from table.filter(keep).to_pylist()
        return
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        where = (
            f"tenant_id = {sql_quote(tenant)} AND episode_id IN "
            f"({', '.join(sql_quote(i) for i in chunk)})"
        )
        yield from lance.scan("episodes", where=where, columns=columns).to_pylist()


def _refine(base: Evidence, rows: list[dict[str, Any]]) -> Evidence:
    times = [_time(r.get("occurred_at")) for r in rows]
    times_known = [t for t in times if t is not None]
    polarity = [feedback_polarity(r.get("feedback")) for r in rows]
    subjects = {r.get("subject_id") for r in rows if r.get("subject_id")}
    sensitivity = max(
        [base.sensitivity, *(str(r.get("sensitivity") or "low") for r in rows)],
        key=lambda s: _SENSITIVITY_RANK.get(s, 0),
    )
    return replace(
        base,
        subjects=max(base.subjects, len(subjects)),
        last_seen=max(times_known) if times_known else base.last_seen,
        successes=sum(r.get("outcome") == "success" for r in rows) or base.successes,
        failures=sum(r.get("outcome") == "failure" for r in rows) or base.failures,
        feedback_positive=sum(p > 0 for p in polarity) or base.feedback_positive,
        feedback_negative=sum(p < 0 for p in polarity) or base.feedback_negative,
        sensitivity=sensitivity,
    )
