"""Pure metric functions of the evaluation suite: plain values in, one number out.

Why pure: every figure in EVALUATION.md comes from one of these, and each has a tiny hand-made
test whose value is known in advance (tests/eval/test_metrics.py). The harness gathers rows
and recall results from real stores; the arithmetic that turns them into figures lives here,
with no store, clock or randomness, so a reviewer can check a figure by hand.

Conventions: a rate over an empty population is ``None`` (not measured), never 0 or 1, so "no
questions" is never mistaken for "perfect"; callers report it as n/a.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

__all__ = [
    "answer_in_context",
    "budget_utilisation",
    "duplicate_rows",
    "hit_at_k",
    "mean",
    "provenance_complete",
    "rate",
    "recall_at_k",
    "secret_hits",
    "stale_record",
    "wrong_scope_record",
]


def rate(numerator: int | float, denominator: int | float, *, digits: int = 4) -> float | None:
    """``numerator / denominator`` rounded; ``None`` when there is nothing to measure."""
    if not denominator:
        return None
    return round(numerator / denominator, digits)


def mean(values: Iterable[float], *, digits: int = 4) -> float | None:
    """Arithmetic mean rounded; ``None`` for no values."""
    items = list(values)
    return round(sum(items) / len(items), digits) if items else None


def hit_at_k(ranked: Sequence[str], relevant: Iterable[str], k: int) -> bool:
    """True when one of the first ``k`` ranked ids is relevant."""
    wanted = set(relevant)
    return any(item in wanted for item in ranked[:k])


def recall_at_k(
    ranked_lists: Sequence[Sequence[str]], relevant_sets: Sequence[Iterable[str]], k: int
) -> float | None:
    """Share of queries with a relevant id in their top ``k`` (queries without any relevant
    id are skipped: nothing could be found for them)."""
    if len(ranked_lists) != len(relevant_sets):
        msg = f"{len(ranked_lists)} ranked lists for {len(relevant_sets)} relevant sets"
        raise ValueError(msg)
    pairs = [(r, set(s)) for r, s in zip(ranked_lists, relevant_sets, strict=True) if set(s)]
    return rate(sum(hit_at_k(r, s, k) for r, s in pairs), len(pairs))


def answer_in_context(answer: str | None, context: str) -> bool:
    """Case-insensitive containment of the gold answer in the packed context text."""
    if not answer or not str(answer).strip():
        return False
    return " ".join(str(answer).split()).casefold() in " ".join(context.split()).casefold()


def budget_utilisation(used_tokens: int, budget_tokens: int) -> float:
    """Share of the context budget the packed records fill (0 when nothing was packed)."""
    if budget_tokens <= 0:
        msg = f"budget_tokens must be positive, got {budget_tokens}"
        raise ValueError(msg)
    return round(used_tokens / budget_tokens, 4)


def _parse_json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return None
    return value


def provenance_complete(row: Mapping[str, Any], known_sources: Mapping[str, str]) -> bool:
    """A derived row's provenance is complete when it names at least one source, each entry
    has a ``source_id`` and a ``content_hash``, and every episode source it names exists with
    that content hash (``known_sources``: episode id -> content hash)."""
    entries = _parse_json(row.get("provenance"))
    if not isinstance(entries, list) or not entries:
        return False
    for entry in entries:
        if not isinstance(entry, Mapping):
            return False
        sid, digest = entry.get("source_id"), entry.get("content_hash")
        if not sid or not digest:
            return False
        if entry.get("source_kind", "episode") == "episode" and known_sources.get(sid) != digest:
            return False
    return True


def secret_hits(texts: Iterable[str], needles: Iterable[str]) -> dict[str, int]:
    """How many of ``texts`` contain each needle (only needles found are listed)."""
    wanted = [n for n in dict.fromkeys(needles) if n]
    found: Counter[str] = Counter()
    for text in texts:
        if not text:
            continue
        for needle in wanted:
            if needle in text:
                found[needle] += 1
    return dict(found)


def duplicate_rows(keys: Iterable[Any]) -> int:
    """Rows beyond the first for each key: 0 when every current row has its own key."""
    return sum(n - 1 for n in Counter(keys).values() if n > 1)


def _as_time(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def stale_record(
    record: Mapping[str, Any], now: datetime, *, as_of: datetime | None = None
) -> bool:
    """A served record is stale when it is not current knowledge at the time asked about:
    a status other than active (for a past ``as_of``, superseded is history and fine), an
    ``expires_at`` at or before ``now``, a valid time that ended at or before the time asked
    about, or a closed transaction time."""
    at = as_of or now
    status = record.get("status")
    allowed = {"active", "superseded", "deprecated"} if as_of is not None else {"active"}
    if status not in allowed:
        return True
    expires = _as_time(record.get("expires_at"))
    if expires is not None and expires <= now:
        return True
    valid_to = _as_time(record.get("valid_to"))
    if valid_to is not None and valid_to <= at:
        return True
    return record.get("recorded_to") is not None


def wrong_scope_record(record: Mapping[str, Any], tenant_id: str, subject_id: str | None) -> bool:
    """A served record is out of scope when it belongs to another tenant, or to a subject other
    than the one asked for (tenant-scope records, with no subject, serve everyone)."""
    if record.get("tenant_id") != tenant_id:
        return True
    owner = record.get("subject_id")
    return owner is not None and owner != subject_id
