"""Named groups of record statuses, defined once.

A Lance row's status (``models.Status``) says whether agents are served it and whether newer
knowledge may replace it. The groups below were defined beside each of their users (the read
path, promotion, staleness, revocation); here they have one definition each, so a new status
is placed in every group it belongs to at once.

Groups
------
``SERVED``      what the read path serves now: ``active``, ``contested`` (with a conflict
                marker) and ``canary`` (to its cohort). Staleness re-checks exactly these.
``STALE``       bound to an outdated source revision: served only when asked for.
``HISTORICAL``  no longer current but the truth for its valid time: served for a past as-of.
``CURRENT``     what a newly promoted record of the same key supersedes: ``active``, and
                ``contested`` or ``stale`` ones (a new statement meeting the bar replaces
                them as it would an active one). ``canary`` is not current: it is on trial.
``WITHDRAWN``   taken back on purpose (``revoked``, ``deleted``): nothing may rest on it, and
                revoking it again changes nothing.
``FINAL``       no way back to being served: withdrawn, expired, superseded, compacted or
                deprecated.
"""

from __future__ import annotations

from memory_core.models import Status

__all__ = ["CURRENT", "FINAL", "HISTORICAL", "SERVED", "STALE", "WITHDRAWN"]

SERVED: tuple[str, ...] = (Status.active.value, Status.contested.value, Status.canary.value)
STALE: tuple[str, ...] = (Status.stale.value,)
HISTORICAL: tuple[str, ...] = (Status.superseded.value, Status.deprecated.value)
CURRENT: frozenset[str] = frozenset({Status.active, Status.contested, Status.stale})
WITHDRAWN: frozenset[str] = frozenset({Status.revoked, Status.deleted})
FINAL: frozenset[str] = WITHDRAWN | {
    Status.expired,
    Status.superseded,
    Status.compacted,
    Status.deprecated,
}
