"""Run history for the report, read from the control plane (DuckDB) and the Lance tables.

Sources, all written by the pipeline itself:

* ``runs`` -- one row per nightly run; its summary holds candidates by status after the run,
  per-partition stage seconds and (from this report's writer on) ``rows_by_status``, the Lance
  rows per table and status when the run finished;
* ``receipts`` of kind ``expire`` -- forgetting volumes per pass (expired, deleted, folded
  into digests) and the pass's stage seconds; other kinds (user deletion, revocation) counted;
* ``llm_ledger`` -- requests, tokens and cost per run, and how many candidates Claude scored,
  the score cache answered or the labelled heuristic scored (the run's outcome line);
* ``audit_log`` -- actions by kind.

Nothing here writes; ``rows_by_status`` is what a run calls to stamp its summary (and hands
to ``collect_report``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow.compute as pc

from memory_core.stores import Stores
from memory_core.stores.schemas import TABLES

__all__ = ["ReportData", "collect_report", "rows_by_status"]


def rows_by_status(stores: Stores) -> dict[str, dict[str, int]]:
    """Lance rows per table and status now (tables that do not exist yet are left out)."""
    existing = set(stores.lance.table_names())
    out: dict[str, dict[str, int]] = {}
    for name in TABLES:
        if name not in existing:
            continue
        # counted in Arrow: the status of every row as a Python string was ~0.3 s of each
        # call at 1M episodes, and a night calls this twice (its summary, its report)
        column = stores.lance.scan(name, columns=["status"]).column("status")
        counts = pc.value_counts(column).to_pylist()
        out[name] = dict(sorted((c["values"], c["counts"]) for c in counts))
    return out


@dataclass
class RunRow:
    """One nightly run as the report shows it."""

    run_id: str
    label: str
    status: str
    clock: str | None
    wall_s: float | None
    summary: dict[str, Any]


@dataclass
class ReportData:
    lance_uri: str
    meta_path: str
    runs: list[RunRow] = field(default_factory=list)
    rows_now: dict[str, dict[str, int]] = field(default_factory=dict)
    forgetting: list[dict[str, Any]] = field(default_factory=list)
    receipts_by_kind: dict[str, int] = field(default_factory=dict)
    llm: list[dict[str, Any]] = field(default_factory=list)
    audit_by_action: dict[str, int] = field(default_factory=dict)
    candidates_now: dict[str, int] = field(default_factory=dict)


def _label(clock: Any, run_id: str) -> str:
    when = clock.strftime("%m-%d %H:%M") if clock is not None else "?"
    return f"{when} {run_id.removeprefix('run_')[:4]}"


def collect_report(
    stores: Stores, *, max_runs: int = 60, rows_now: dict[str, dict[str, int]] | None = None
) -> ReportData:
    """Everything the report draws, oldest run first (the last ``max_runs`` nightly runs).

    ``rows_now``: ``rows_by_status`` as the caller just counted it, with no Lance write
    since (a night stamps its summary with it and then writes the report: a scan of every
    table's status column, ~0.06 s at 1M episodes, once instead of twice)."""
    data = ReportData(lance_uri=stores.lance.uri, meta_path=str(stores.meta.path))
    data.rows_now = rows_by_status(stores) if rows_now is None else rows_now
    with stores.meta.connect() as con:
        runs = con.execute(
            """SELECT run_id, status, clock, started_at, finished_at, summary FROM runs
            WHERE flow = 'nightly-consolidation' ORDER BY started_at DESC LIMIT ?""",
            [max_runs],
        ).fetchall()
        receipts = con.execute(
            "SELECT kind, issued_at, run_id, body FROM receipts ORDER BY issued_at, receipt_id"
        ).fetchall()
        llm = con.execute(
            """SELECT coalesce(run_id, '?'), min(logged_at), sum(requests), sum(input_tokens),
            sum(output_tokens), sum(cache_read_tokens), sum(cache_write_tokens), sum(cost_usd),
            sum(fallbacks), string_agg(DISTINCT mode, ',') FROM llm_ledger
            GROUP BY 1 ORDER BY 2"""
        ).fetchall()
        outcomes = con.execute(
            "SELECT coalesce(run_id, '?'), detail FROM llm_ledger WHERE mode = 'outcome'"
        ).fetchall()
        data.audit_by_action = dict(
            con.execute("SELECT action, count(*) FROM audit_log GROUP BY 1 ORDER BY 1").fetchall()
        )
        data.candidates_now = dict(
            con.execute("SELECT status, count(*) FROM candidates GROUP BY 1 ORDER BY 1").fetchall()
        )
    for run_id, status, clock, started, finished, summary in reversed(runs):
        wall = (finished - started).total_seconds() if started and finished else None
        data.runs.append(
            RunRow(
                run_id=run_id,
                label=_label(clock, run_id),
                status=status,
                clock=clock.isoformat() if clock else None,
                wall_s=wall,
                summary=json.loads(summary) if summary else {},
            )
        )
    for kind, issued, run_id, body in receipts:
        data.receipts_by_kind[kind] = data.receipts_by_kind.get(kind, 0) + 1
        if kind != "expire":
            continue
        receipt = json.loads(body) if body else {}
        data.forgetting.append(
            {
                "label": _label(issued, run_id or receipt.get("receipt_id", "?")),
                "expired": sum(receipt.get("expired", {}).values()),
                "deleted": sum(receipt.get("deleted", {}).values()),
                "folded": receipt.get("compaction", {}).get("episodes_folded", 0),
                "digests": receipt.get("compaction", {}).get("digests", 0),
                "seconds": receipt.get("seconds", {}),
            }
        )
    scored: dict[str, dict[str, int]] = {}
    for run_id, detail in outcomes:
        body = json.loads(detail) if detail else {}
        into = scored.setdefault(run_id, {})
        for key in ("scored_llm", "cache_hits", "heuristic"):
            into[key] = into.get(key, 0) + int(body.get(key) or 0)
    data.llm = [
        {
            "run_id": r[0],
            "label": _label(r[1], r[0]),
            "requests": int(r[2] or 0),
            "input_tokens": int(r[3] or 0),
            "output_tokens": int(r[4] or 0),
            "cache_read_tokens": int(r[5] or 0),
            "cache_write_tokens": int(r[6] or 0),
            "cost_usd": float(r[7] or 0.0),
            "fallbacks": int(r[8] or 0),
            "modes": r[9] or "",
            **{
                k: scored.get(r[0], {}).get(k, 0) for k in ("scored_llm", "cache_hits", "heuristic")
            },
        }
        for r in llm
    ]
    return data
