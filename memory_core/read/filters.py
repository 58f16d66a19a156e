"""Hard filters of the read path, compiled into one Lance prefilter expression per table.

Every rule here is applied *before* ranking (``.where(expr, prefilter=True)``), so no score,
however high, can bring back a record of another tenant or subject, a forgotten record, or one
the caller may not see. The same rules exist once more as plain Python (``why_excluded``): the
property tests use it as the oracle of the compiled expression, and ``explain`` uses it to say
which rule kept a near miss out.

Rules (DESIGN.md sections 3-4, schemas.py for the bitemporal columns):

- scope: ``tenant_id = T``; the subject's own records plus tenant-scope ones
  (``subject_id IS NULL``); without a subject, tenant-scope records only.
- class: the table (episodic = episodes + digests, semantic = facts, procedural = procedures).
- status: ``active`` for the present, and ``contested`` (served, marked as a conflict) and
  ``canary`` (procedure versions on trial; pack.py serves them to their cohort only); a past
  valid time (``as_of < now``) also admits ``superseded``/``deprecated`` rows, which were the
  truth then; ``stale`` only when asked (``include_stale``), marked. Expired, revoked, deleted
  and compacted rows never.
- transaction time: current knowledge (``recorded_to IS NULL``), or what was recorded at
  ``known_at``.
- valid time: ``valid_from <= V AND (valid_to IS NULL OR valid_to > V)``, V = as_of or now.
- retention: ``expires_at IS NULL OR expires_at > now``.
- sensitivity in the caller's allowed set; purpose null or the caller's purpose.
- procedures: authority ``human_approved`` (invariant 5: only people approve a procedure).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from memory_core.lifecycle import HISTORICAL, SERVED, STALE
from memory_core.models import Authority
from memory_core.stores.filters import in_list, ts_literal
from memory_core.stores.lance import sql_quote

__all__ = [
    "CLASS_TABLES",
    "FilterSpec",
    "MemoryType",
    "compile_where",
    "scope_where",
    "why_excluded",
]


class MemoryType(StrEnum):
    """Memory classes a caller asks for (``memctl recall --type``)."""

    episodic = "episodic"
    semantic = "semantic"
    procedural = "procedural"


CLASS_TABLES: dict[MemoryType, tuple[str, ...]] = {
    MemoryType.episodic: ("episodes", "digests"),
    MemoryType.semantic: ("facts",),
    MemoryType.procedural: ("procedures",),
}


@dataclass(frozen=True)
class FilterSpec:
    """Who asks, for what time, under which rules: everything the hard filters need."""

    tenant_id: str
    subject_id: str | None
    now: datetime
    as_of: datetime | None = None
    known_at: datetime | None = None
    sensitivity: frozenset[str] = frozenset({"low", "medium"})
    purpose: str | None = None
    namespace: str | None = None
    include_stale: bool = False

    def __post_init__(self) -> None:
        for name in ("now", "as_of", "known_at"):
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                msg = f"{name} must be timezone-aware (UTC), got {value!r}"
                raise ValueError(msg)
        if not self.tenant_id:
            msg = "tenant_id is required: recall never reads across tenants"
            raise ValueError(msg)

    @property
    def valid_at(self) -> datetime:
        return self.as_of if self.as_of is not None else self.now

    @property
    def historical(self) -> bool:
        """A past valid time: rows superseded since then were the truth at that time."""
        return self.as_of is not None and self.as_of < self.now

    def statuses(self) -> tuple[str, ...]:
        out: tuple[str, ...] = SERVED
        if self.historical:
            out += HISTORICAL
        if self.include_stale:
            out += STALE
        return out


def scope_where(spec: FilterSpec) -> str:
    """Tenant and subject scope alone: what ``explain`` searches to find near misses."""
    tenant = f"tenant_id = {sql_quote(spec.tenant_id)}"
    if spec.subject_id is not None:
        return f"{tenant} AND (subject_id = {sql_quote(spec.subject_id)} OR subject_id IS NULL)"
    return f"{tenant} AND subject_id IS NULL"


def compile_where(spec: FilterSpec, table: str) -> str:
    """The Lance prefilter for ``table``: scope first, so the scalar indices cut it early."""
    parts = [scope_where(spec)]
    if spec.namespace is not None:
        parts.append(f"namespace = {sql_quote(spec.namespace)}")
    parts.append(in_list("status", spec.statuses()))
    if spec.known_at is None:
        parts.append("recorded_to IS NULL")
    else:
        known = ts_literal(spec.known_at)
        parts.append(f"recorded_at <= {known}")
        parts.append(f"(recorded_to IS NULL OR recorded_to > {known})")
    valid = ts_literal(spec.valid_at)
    parts.append(f"valid_from <= {valid}")
    parts.append(f"(valid_to IS NULL OR valid_to > {valid})")
    parts.append(f"(expires_at IS NULL OR expires_at > {ts_literal(spec.now)})")
    if not spec.sensitivity:
        parts.append("false")  # nothing is allowed: say so rather than fall back to anything
    else:
        parts.append(in_list("sensitivity", spec.sensitivity))
    if spec.purpose is not None:
        parts.append(f"(purpose IS NULL OR purpose = {sql_quote(spec.purpose)})")
    if table == "procedures":
        parts.append(f"authority = {sql_quote(Authority.human_approved.value)}")
    return " AND ".join(parts)


def _utc(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    msg = f"expected a timestamp, got {value!r}"
    raise TypeError(msg)


def why_excluded(row: Mapping[str, Any], spec: FilterSpec, table: str) -> str | None:
    """The first hard filter ``row`` fails, as a short reason; None when it passes them all.

    Mirrors ``compile_where`` rule for rule (the property tests hold them to the same answer).
    """
    if row.get("tenant_id") != spec.tenant_id:
        return "other tenant"
    subject = row.get("subject_id")
    if subject is not None and subject != spec.subject_id:
        return "other subject"
    if spec.namespace is not None and row.get("namespace") != spec.namespace:
        return f"namespace {row.get('namespace')}"
    status = row.get("status")
    if status not in spec.statuses():
        return f"status {status}"
    recorded_at, recorded_to = _utc(row.get("recorded_at")), _utc(row.get("recorded_to"))
    if spec.known_at is None:
        if recorded_to is not None:
            return "not current knowledge (recorded_to set)"
    else:
        if recorded_at is None or recorded_at > spec.known_at:
            return "recorded after known_at"
        if recorded_to is not None and recorded_to <= spec.known_at:
            return "replaced before known_at"
    valid_from, valid_to = _utc(row.get("valid_from")), _utc(row.get("valid_to"))
    if valid_from is None or valid_from > spec.valid_at:
        return "not yet valid at as-of"
    if valid_to is not None and valid_to <= spec.valid_at:
        return "no longer valid at as-of"
    expires_at = _utc(row.get("expires_at"))
    if expires_at is not None and expires_at <= spec.now:
        return "expired"
    if row.get("sensitivity") not in spec.sensitivity:
        return f"sensitivity {row.get('sensitivity')} not allowed"
    purpose = row.get("purpose")
    if spec.purpose is not None and purpose is not None and purpose != spec.purpose:
        return f"purpose {purpose}"
    if table == "procedures" and row.get("authority") != Authority.human_approved.value:
        return "procedure not human-approved"
    return None
