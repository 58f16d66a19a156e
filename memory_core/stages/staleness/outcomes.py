"""Procedure outcomes: a version whose reported outcomes turn to failure is rolled back.

Episodes may name the procedure they followed (``procedure_id``: a procedure row id, or the
procedure's name; ``procedure_version``). Per procedure version, the nightly run counts the
outcomes reported *under its preconditions* (an episode whose conditions break a precondition
says nothing about the procedure); ``partial`` counts as not a success and ``unknown`` not at
all. With at least ``staleness.outcome_min`` outcomes, a version whose Wilson upper bound of
the success rate is below ``staleness.outcome_threshold`` is deprecated: even the most
favourable reading of the evidence says it fails too often.

Rollback, in one Lance commit so a reader sees the old or the new state, never neither:

* the failing row is closed and a ``deprecated`` version of it inserted (valid until now);
* the previous approved version (the row it superseded) is served again: its superseded row is
  closed and a restored, ``active`` copy inserted, valid from now;
* a canary that fails is just deprecated: the stable version never stopped serving.

A receipt and an audit event say what was done and on which evidence (episode ids, counts, the
bound); a ``failures`` review batch shows the failures to a person. A canary with enough
successes and no breach is promoted (``canary.promote_canary``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from memory_core.config import Settings
from memory_core.context import RunContext
from memory_core.models import stable_id
from memory_core.stages.promote.supersede import normalise, row_hash, superseded_version
from memory_core.stages.staleness.canary import promote_canary, register_canary
from memory_core.stages.staleness.common import current_rows, queue_batches, wilson_upper
from memory_core.stores import Stores
from memory_core.stores.audit import record_audit, store_receipt
from memory_core.stores.facts import rows_by_ids
from memory_core.stores.lineage import Edge, add_edges
from memory_core.stores.sources import CanaryRow, upsert_canary
from memory_core.stores.status_writes import RowVersions, write_status

__all__ = ["OutcomeResult", "judge_procedures", "version_outcomes"]

logger = logging.getLogger(__name__)

_EPISODE_COLUMNS = [
    "episode_id", "tenant_id", "namespace", "procedure_id", "procedure_version", "outcome",
    "conditions",
]  # fmt: skip
Key = tuple[str, str, str, str]  # tenant, namespace, normalised name, version


@dataclass
class OutcomeResult:
    judged: dict[str, dict[str, Any]] = field(default_factory=dict)
    rolled_back: list[dict[str, Any]] = field(default_factory=list)
    canaries_promoted: list[dict[str, Any]] = field(default_factory=list)
    batches: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "judged": dict(sorted(self.judged.items())),
            "rolled_back": list(self.rolled_back),
            "canaries_promoted": list(self.canaries_promoted),
            "failure_batches": list(self.batches),
        }


def _holds(preconditions: dict[str, Any], conditions: dict[str, str]) -> bool:
    for key, expected in preconditions.items():
        allowed = [str(v) for v in expected] if isinstance(expected, list) else [str(expected)]
        if conditions.get(key) not in allowed:
            return False
    return True


def version_outcomes(stores: Stores) -> dict[Key, list[dict[str, Any]]]:
    """Reported outcomes per procedure version: {key: [episode rows]}."""
    names = stores.lance.scan(
        "procedures", columns=["procedure_id", "tenant_id", "namespace", "name", "version"]
    ).to_pylist()
    by_id = {
        r["procedure_id"]: (r["tenant_id"], r["namespace"], normalise(r["name"]), r["version"])
        for r in names
    }
    where = "procedure_id IS NOT NULL AND outcome IN ('success', 'failure', 'partial')"
    out: dict[Key, list[dict[str, Any]]] = {}
    for ep in stores.lance.scan("episodes", where=where, columns=_EPISODE_COLUMNS).to_pylist():
        key = by_id.get(ep["procedure_id"])
        if key is None:
            key = (
                ep["tenant_id"], ep["namespace"], normalise(ep["procedure_id"]),
                ep.get("procedure_version") or "",
            )  # fmt: skip
        elif key[0] != ep["tenant_id"]:
            continue  # another tenant's procedure id: never counted across tenants
        out.setdefault(key, []).append(ep)
    return out


def judge_procedures(stores: Stores, settings: Settings, ctx: RunContext) -> OutcomeResult:
    """Deprecate failing versions (with rollback), promote canaries that earned it."""
    cfg = settings.staleness
    result = OutcomeResult()
    rows = current_rows(stores, "procedures", statuses=("active", "canary"))
    if not rows:
        return result
    outcomes = version_outcomes(stores)
    failing: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for row in sorted(rows, key=lambda r: r["procedure_id"]):
        key = (row["tenant_id"], row["namespace"], normalise(row["name"]), row["version"])
        pre = json.loads(row.get("preconditions") or "{}")
        eps = [
            e for e in outcomes.get(key, [])
            if _holds(pre, json.loads(e.get("conditions") or "{}"))
        ]  # fmt: skip
        wins = sum(1 for e in eps if e["outcome"] == "success")
        upper = wilson_upper(wins, len(eps), cfg.outcome_z)
        breach = len(eps) >= cfg.outcome_min and upper < cfg.outcome_threshold
        stats = {
            "outcomes": len(eps), "successes": wins, "upper_bound": round(upper, 4),
            "threshold": cfg.outcome_threshold, "min_outcomes": cfg.outcome_min,
            "failures": sorted(e["episode_id"] for e in eps if e["outcome"] != "success"),
        }  # fmt: skip
        result.judged[row["procedure_id"]] = {k: v for k, v in stats.items() if k != "failures"}
        if row["status"] == "canary" and not ctx.dry_run:
            register_canary(stores, row, cfg.canary_fraction)
        if breach:
            failing.append((row, stats))
        elif row["status"] == "canary" and wins >= cfg.canary_successes and not ctx.dry_run:
            result.canaries_promoted.append(promote_canary(stores, ctx, row, stats))
    for row, stats in failing:
        result.rolled_back.append(_roll_back(stores, ctx, row, stats))
    result.batches = queue_batches(
        stores, settings, ctx, "failures",
        [(r["tenant"], r["namespace"], r["deprecated_row"]) for r in result.rolled_back],
    )  # fmt: skip
    return result


def _roll_back(
    stores: Stores, ctx: RunContext, row: dict[str, Any], stats: dict[str, Any]
) -> dict[str, Any]:
    now = ctx.now
    canary = row["status"] == "canary"
    previous = None
    if not canary and row.get("supersedes"):
        found = rows_by_ids(stores.lance, "procedures", [row["supersedes"]])
        previous = next((r for r in found if r["recorded_to"] is None), None)
    restored = None
    close: list[dict[str, Any]] = []
    insert: list[dict[str, Any]] = []
    edges: list[Edge] = []
    scope = {"tenant_id": row["tenant_id"], "subject_id": row.get("subject_id")}
    if previous is not None:
        restored_id = stable_id("proc", previous["procedure_id"], "restored", now.isoformat())
        restored = {
            **previous,
            "procedure_id": restored_id,
            "status": "active", "valid_from": now, "valid_to": None, "superseded_by": None,
            "recorded_at": now, "recorded_to": None,
        }  # fmt: skip
    closed, deprecated = superseded_version(
        "procedures", row, now=now, valid_to=now,
        superseded_by=restored["procedure_id"] if restored else "",
    )  # fmt: skip
    deprecated["status"] = "deprecated"
    deprecated["superseded_by"] = restored["procedure_id"] if restored else None
    deprecated["content_hash"] = row_hash("procedures", deprecated)
    close.append(closed)
    insert.append(deprecated)
    edges.append(Edge(deprecated["procedure_id"], "procedure", row["procedure_id"], "procedure",
                      None, **scope))  # fmt: skip
    if restored is not None and previous is not None:
        restored["supersedes"] = deprecated["procedure_id"]
        restored["content_hash"] = row_hash("procedures", restored)
        close.append({**previous, "recorded_to": now})
        insert.append(restored)
        edges.append(Edge(restored["procedure_id"], "procedure", previous["procedure_id"],
                          "procedure", None, **scope))  # fmt: skip
    receipt_id = stable_id("rcpt", "rollback", row["procedure_id"], now.isoformat())
    receipt = {
        "receipt_id": receipt_id,
        "kind": "procedure_rollback",
        "procedure": row["name"],
        "tenant": row["tenant_id"],
        "namespace": row["namespace"],
        "version": row["version"],
        "was": row["status"],
        "deprecated_row": deprecated["procedure_id"],
        "restored_version": restored["version"] if restored else None,
        "restored_row": restored["procedure_id"] if restored else None,
        "at": now.isoformat(),
        "run_id": ctx.run_id,
        "evidence": stats,
    }
    if ctx.dry_run:
        return receipt
    write_status(
        stores,
        RowVersions("procedures", close=close, insert=insert),
        at=ctx.now,
        run_id=ctx.run_id,
        actor=ctx.actor,
    )
    with stores.meta.transaction() as con:
        add_edges(con, edges, now=now)
        store_receipt(con, receipt_id=receipt_id, kind="procedure_rollback", at=now,
                      run_id=ctx.run_id, body=receipt)  # fmt: skip
        record_audit(
            con, at=now, action="procedure_rollback", run_id=ctx.run_id, actor=ctx.actor,
            target=row["procedure_id"], tenant_id=row["tenant_id"],
            counts={"outcomes": stats["outcomes"], "successes": stats["successes"]},
            detail={"receipt_id": receipt_id, "restored": receipt["restored_row"],
                    "upper_bound": stats["upper_bound"]},
        )  # fmt: skip
        if canary:
            upsert_canary(
                con,
                CanaryRow(
                    row["procedure_id"], row["tenant_id"], row["namespace"], row["name"],
                    row["version"], row.get("supersedes"), 0.0, row["recorded_at"],
                    "rolled_back", now, stats,
                ),
            )  # fmt: skip
    logger.info("rolled back %s %s: %s", row["name"], row["version"], stats)
    return receipt
