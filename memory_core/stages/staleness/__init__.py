"""Staleness and demotion: the nightly stage that takes back what is no longer true.

Promotion alone makes memory an old map. This stage, run once per nightly flow after review
batches are built, demotes with evidence (one module per job):

* ``revisions``: records bound to an older revision of a corpus source become ``stale`` and go
  to a ``revalidate`` batch; a deleted source revokes what depends on it alone;
* ``contested``: a confirmed preference contradicted by weaker evidence becomes ``contested``
  (served with a conflict marker) and goes to a ``settle`` batch;
* ``outcomes``: a procedure version whose reported outcomes turn to failure is deprecated and
  the previous approved version served again; a ``failures`` batch shows why;
* ``canary``: a new version served to a fraction of subjects first is promoted or rolled back.

``settle`` applies reviewers' decisions on those batches (``stages.review.decide_batch``
dispatches to it by batch kind).
"""

from __future__ import annotations

import time
from typing import Any

from memory_core.config import Settings
from memory_core.context import RunContext
from memory_core.stores import Stores

__all__ = ["run_staleness"]


def run_staleness(stores: Stores, settings: Settings, ctx: RunContext) -> dict[str, Any]:
    """All four jobs, in order; returns what each did (and how long it took)."""
    from memory_core.stages.staleness.contested import detect_contests
    from memory_core.stages.staleness.outcomes import judge_procedures
    from memory_core.stages.staleness.revisions import apply_source_revisions

    if not settings.staleness.enabled:
        return {"enabled": False}
    # one DuckDB connection for the stage's many small reads and writes (as consolidation does)
    with stores.meta.session():
        t0 = time.perf_counter()
        revisions = apply_source_revisions(stores, settings, ctx)
        t1 = time.perf_counter()
        contests = detect_contests(stores, settings, ctx)
        t2 = time.perf_counter()
        outcomes = judge_procedures(stores, settings, ctx)
        t3 = time.perf_counter()
    seconds = {
        "revisions": round(t1 - t0, 3),
        "contested": round(t2 - t1, 3),
        "outcomes": round(t3 - t2, 3),
    }
    return {
        "enabled": True,
        "run_id": ctx.run_id,
        "revisions": revisions.as_dict(),
        "contested": contests.as_dict(),
        "outcomes": outcomes.as_dict(),
        "seconds": seconds,
    }
