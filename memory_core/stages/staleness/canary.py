"""Canary: a newly approved procedure version is served to a fraction of subjects first.

With ``staleness.canary_fraction`` > 0, approving a new version of a procedure that has an
active version does not supersede it at once (``PromotionPlan.hold_back_canaries``, in the
promotion commit): the new row is written with status ``canary`` and ``supersedes`` pointing at
the stable row, which stays active. The read path serves the canary to the subjects
``read.canary.in_canary`` picks (deterministic by subject hash) and the stable version to
everyone else.

The nightly run (``outcomes.judge_procedures``) then either promotes the canary
(``promote_canary``: at least ``staleness.canary_successes`` reported successes and no breach
of the threshold; the stable row is superseded as a reviewer's approval would have done) or
rolls it back (deprecated; the stable version simply keeps serving). Both are audited.
"""

from __future__ import annotations

from typing import Any

from memory_core.context import RunContext
from memory_core.models import stable_id
from memory_core.stages.promote.supersede import procedure_key, row_hash, superseded_version
from memory_core.stores import Stores
from memory_core.stores.facts import rows_by_ids
from memory_core.stores.lineage import Edge, add_edges
from memory_core.stores.sources import CanaryRow, upsert_canary
from memory_core.stores.status_writes import RowVersions, write_status

__all__ = ["promote_canary", "register_canary", "unused_version"]


def register_canary(stores: Stores, row: dict[str, Any], fraction: float) -> None:
    """Remember a canary the first time the nightly run sees it."""
    with stores.meta.transaction() as con:
        found = con.execute(
            "SELECT 1 FROM canaries WHERE procedure_id = ?", [row["procedure_id"]]
        ).fetchone()
        if found is None:
            upsert_canary(
                con,
                CanaryRow(
                    row["procedure_id"], row["tenant_id"], row["namespace"], row["name"],
                    row["version"], row.get("supersedes"), fraction, row["recorded_at"], "running",
                ),
            )  # fmt: skip


def promote_canary(
    stores: Stores, ctx: RunContext, row: dict[str, Any], detail: dict[str, Any]
) -> dict[str, Any]:
    """The canary becomes the version for everyone; the stable row is superseded (one commit)."""
    stable_id = row.get("supersedes")
    stable = [
        r
        for r in rows_by_ids(stores.lance, "procedures", [stable_id] if stable_id else [])
        if r["recorded_to"] is None and r["status"] == "active"
    ]
    close: list[dict[str, Any]] = []
    insert: list[dict[str, Any]] = []
    promoted = {**row, "status": "active", "supersedes": None}
    edges = []
    if stable:
        closed, version = superseded_version(
            "procedures", stable[0], now=ctx.now, valid_to=ctx.now,
            superseded_by=row["procedure_id"],
        )  # fmt: skip
        close.append(closed)
        insert.append(version)
        promoted["supersedes"] = version["procedure_id"]
        edges.append(
            Edge(version["procedure_id"], "procedure", stable[0]["procedure_id"], "procedure",
                 None, tenant_id=row["tenant_id"], subject_id=row.get("subject_id"))
        )  # fmt: skip
    promoted["content_hash"] = row_hash("procedures", promoted)
    close.append(promoted)
    write_status(
        stores,
        RowVersions("procedures", close=close, insert=insert),
        at=ctx.now,
        run_id=ctx.run_id,
        actor=ctx.actor,
    )
    with stores.meta.transaction() as con:
        add_edges(con, edges, now=ctx.now)
        upsert_canary(
            con,
            CanaryRow(
                row["procedure_id"], row["tenant_id"], row["namespace"], row["name"],
                row["version"], stable_id, 0.0, row["recorded_at"], "promoted", ctx.now, detail,
            ),
        )  # fmt: skip
    return {"promoted": row["procedure_id"], "superseded": stable_id if stable else None}


def unused_version(stores: Stores, row: dict[str, Any], version: str, old: str | None) -> str:
    """``version``, or the next one up when a deprecated row already holds its number.

    Row ids are derived from (scope, name, version): after a rollback, the next approval would
    otherwise get the id of the deprecated row and be skipped as already written. A row of the
    same candidate is a rerun of this very commit and keeps its number.
    """
    parts = _parts(version)
    level = next((i for i, (a, b) in enumerate(zip(parts, _parts(old), strict=True)) if a != b), 2)
    for _ in range(100):
        pid = stable_id("proc", row["tenant_id"], row["namespace"], procedure_key(row)[2], version)
        found = rows_by_ids(stores.lance, "procedures", [pid])
        if not found or any(r.get("candidate_id") == row.get("candidate_id") for r in found):
            return version
        parts = [*parts[:level], parts[level] + 1, *([0] * (2 - level))]
        version = ".".join(str(p) for p in parts)
    return version


def _parts(version: str | None) -> list[int]:
    try:
        major, minor, patch = (int(p) for p in str(version).split("."))
    except ValueError:
        return [1, 0, 0] if version is not None else [0, 0, 0]
    return [major, minor, patch]
