"""Record statuses, the transitions allowed between them, and their named groups: defined once.

Every kind of record that carries a status is listed in ``STATUSES``; ``TRANSITIONS`` says, as
data, which status may follow which (``None`` is "no row yet": the statuses a record may be
created with). A status written again unchanged is not a transition and is always allowed (a
rewrite that keeps the status, such as dropping a revoked source from a fact's provenance).
The one writer of status changes, ``memory_core.stores.status_writes.write_status``, checks
every change against this table before it writes anything and raises ``IllegalTransition``.

Stage-ledger entries are created ``done`` and never change (a crashed stage leaves none), so
they have no row here; review items carry a decision, not a status.

Lance rows (``models.Status``): a record changes status in place (same id: stale, contested,
expired, revoked, canary -> active) or gets a new row version (new id, created ``superseded``
or ``deprecated`` as history, ``active`` for a restored or corrected one); closing a row's
transaction time is not a status change.

Groups
------
``SERVED``      what the read path serves now: ``active``, ``contested`` (with a conflict
                marker) and ``canary`` (to its cohort). Staleness re-checks exactly these.
``STALE``       bound to an outdated source revision: served only when asked for.
``HISTORICAL``  no longer current but the truth for its valid time: served for a past as-of.
``CURRENT``     what a newly promoted record of the same key supersedes: ``active``, and
                ``contested`` or ``stale`` ones (a new statement meeting the bar replaces
                them as it would an active one). ``canary`` is not current: it is on trial.
``WITHDRAWN``   taken back on purpose (``revoked``): nothing may rest on it, and revoking it
                again changes nothing.
``FINAL``       no way back to being served: withdrawn, expired, superseded or deprecated.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from memory_core.errors import TerminalError
from memory_core.models import CandidateStatus, Status

__all__ = [
    "CURRENT",
    "FINAL",
    "HISTORICAL",
    "KIND_OF_TABLE",
    "SERVED",
    "STALE",
    "STATUSES",
    "TRANSITIONS",
    "WITHDRAWN",
    "IllegalTransition",
    "allowed",
    "check_transition",
]

SERVED: tuple[str, ...] = (Status.active.value, Status.contested.value, Status.canary.value)
STALE: tuple[str, ...] = (Status.stale.value,)
HISTORICAL: tuple[str, ...] = (Status.superseded.value, Status.deprecated.value)
CURRENT: frozenset[str] = frozenset({Status.active, Status.contested, Status.stale})
WITHDRAWN: frozenset[str] = frozenset({Status.revoked})
FINAL: frozenset[str] = WITHDRAWN | {Status.expired, Status.superseded, Status.deprecated}


class IllegalTransition(TerminalError):
    """A status change the lifecycle table does not allow; nothing was written."""

    def __init__(self, kind: str, record_id: str, old: str | None, new: str) -> None:
        self.kind = kind
        self.record_id = record_id
        self.old = old
        self.new = new
        was = "(new record)" if old is None else old
        super().__init__(
            f"illegal status transition of {kind} {record_id}: {was} -> {new} "
            f"(allowed from {was}: {', '.join(sorted(_next(kind, old))) or 'nothing'})"
        )


def _table(rows: dict[str | None, set[str]]) -> Mapping[str | None, frozenset[str]]:
    return MappingProxyType(
        {None if k is None else str(k): frozenset(str(s) for s in v) for k, v in rows.items()}
    )


_S = Status
_C = CandidateStatus

# Lance rows. Revocation reaches any record not already revoked; expiry only an active one.
_EPISODE = _table(
    {None: {_S.active}, _S.active: {_S.expired, _S.revoked}, _S.expired: {_S.revoked}}
)
_FACT = _table(
    {
        None: {_S.active, _S.superseded},  # a new record, or the history version of one
        _S.active: {_S.expired, _S.revoked, _S.stale, _S.contested},
        _S.stale: {_S.active, _S.revoked},  # re-validated / its outdated source deleted
        _S.contested: {_S.active, _S.stale, _S.revoked},  # kept by a reviewer
        _S.expired: {_S.revoked},
        _S.superseded: {_S.revoked},
    }
)
_PROCEDURE = _table(
    {
        # new, held back as a canary, history of a superseded or rolled-back version
        None: {_S.active, _S.canary, _S.superseded, _S.deprecated},
        _S.active: {_S.expired, _S.revoked, _S.stale},
        _S.canary: {_S.active, _S.stale, _S.revoked},  # promoted to everyone
        _S.stale: {_S.active, _S.revoked},
        _S.expired: {_S.revoked},
        _S.superseded: {_S.revoked},
        _S.deprecated: {_S.revoked},
    }
)

# Candidates (DuckDB): mined, scored, reviewed, committed; re-mining may reopen an undecided one.
_CANDIDATE = _table(
    {
        None: {_C.pending_score, _C.pending_review, _C.auto_rejected, _C.approved},
        _C.pending_score: {_C.pending_review, _C.auto_rejected, _C.revoked},
        _C.pending_review: {
            _C.approved,
            _C.rejected,
            _C.promoted,
            _C.auto_rejected,
            _C.revoked,
            _C.pending_score,  # re-proposed for scoring
        },
        _C.auto_rejected: {_C.pending_score, _C.revoked},
        # committed, refused at commit, or back to the reviewer with a conflict found at commit
        _C.approved: {_C.promoted, _C.auto_rejected, _C.pending_review, _C.revoked},
        _C.rejected: {_C.revoked},
        _C.promoted: {_C.revoked},
    }
)

# Control-plane records (DuckDB). A review batch closes once; a deletion request found
# unverified after it was done says so; a canary ends promoted or rolled back.
_REVIEW_BATCH = _table(
    {
        None: {"open", "approved"},  # approved: the auto-approved batches of trusted kinds
        "open": {"approved", "rejected", "mixed", "expired"},
    }
)
_DELETION_REQUEST = _table(
    {None: {"pending"}, "pending": {"done", "unverified"}, "done": {"unverified"}}
)
_CANARY = _table({None: {"running"}, "running": {"promoted", "rolled_back"}})
# The pipeline's own bookkeeping: Message Batches as last polled, and runs.
_LLM_BATCH = _table(
    {
        None: {"submitted"},
        "submitted": {"in_progress", "ended", "collected", "lost"},
        "in_progress": {"ended", "collected", "lost"},
        "ended": {"collected", "lost"},
    }
)
_RUN = _table(
    {
        None: {"running"},
        "running": {"completed", "failed"},
        "failed": {"running"},  # the same run id started again
        "completed": {"running"},
    }
)

STATUSES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "episode": (_S.active.value, _S.expired.value, _S.revoked.value),
        "digest": (_S.active.value, _S.expired.value, _S.revoked.value),
        "fact": tuple(
            s.value
            for s in (
                _S.active,
                _S.stale,
                _S.contested,
                _S.superseded,
                _S.expired,
                _S.revoked,
            )
        ),
        "procedure": tuple(s.value for s in Status if s is not _S.contested),
        "candidate": tuple(s.value for s in CandidateStatus),
        "review_batch": ("open", "approved", "rejected", "mixed", "expired"),
        "deletion_request": ("pending", "done", "unverified"),
        "canary": ("running", "promoted", "rolled_back"),
        "llm_batch": ("submitted", "in_progress", "ended", "collected", "lost"),
        "run": ("running", "completed", "failed"),
    }
)

TRANSITIONS: Mapping[str, Mapping[str | None, frozenset[str]]] = MappingProxyType(
    {
        "episode": _EPISODE,
        "digest": _EPISODE,
        "fact": _FACT,
        "procedure": _PROCEDURE,
        "candidate": _CANDIDATE,
        "review_batch": _REVIEW_BATCH,
        "deletion_request": _DELETION_REQUEST,
        "canary": _CANARY,
        "llm_batch": _LLM_BATCH,
        "run": _RUN,
    }
)

# The record kind of each Lance table.
KIND_OF_TABLE: Mapping[str, str] = MappingProxyType(
    {"episodes": "episode", "facts": "fact", "procedures": "procedure", "digests": "digest"}
)


def _next(kind: str, old: str | None) -> frozenset[str]:
    return TRANSITIONS[kind].get(old, frozenset())


def allowed(kind: str, old: str | None, new: str) -> bool:
    """Whether a ``kind`` record may go from ``old`` (None: not yet written) to ``new``."""
    if kind not in TRANSITIONS:
        msg = f"unknown record kind {kind!r}: one of {', '.join(sorted(TRANSITIONS))}"
        raise ValueError(msg)
    return old == new or new in _next(kind, old)


def check_transition(kind: str, record_id: str, old: str | None, new: str) -> None:
    """Raise ``IllegalTransition`` unless record ``record_id`` may go ``old`` -> ``new``."""
    if not allowed(kind, old, new):
        raise IllegalTransition(kind, record_id, old, new)
