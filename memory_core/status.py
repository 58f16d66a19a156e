"""`memctl status`: what is stored, by table and status, and what ran last."""

from __future__ import annotations

import json
from typing import Any

from memory_core.stores import Stores
from memory_core.stores.schemas import TABLES

__all__ = ["collect_status"]

_META_TABLES = (
    "candidates",
    "clusters",
    "cluster_members",
    "review_batches",
    "lineage",
    "quarantine",
    "audit_log",
    "score_cache",
    "llm_ledger",
    "deletion_requests",
    "receipts",
)


def collect_status(stores: Stores, *, last_runs: int = 5) -> dict[str, Any]:
    existing = set(stores.lance.table_names())
    tables: dict[str, Any] = {}
    for name in TABLES:
        if name not in existing:
            tables[name] = {"exists": False, "rows": 0, "by_status": {}}
            continue
        scan = stores.lance.scan(name, columns=["status"])
        by_status: dict[str, int] = {}
        for value in scan.column("status").to_pylist():
            by_status[value] = by_status.get(value, 0) + 1
        tables[name] = {
            "exists": True,
            "rows": scan.num_rows,
            "by_status": dict(sorted(by_status.items())),
            "version": stores.lance.version(name),
        }
    with stores.meta.connect() as con:
        meta_counts = {
            t: int(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in _META_TABLES
        }
        candidates = dict(
            con.execute("SELECT status, count(*) FROM candidates GROUP BY 1 ORDER BY 1").fetchall()
        )
        runs = con.execute(
            "SELECT run_id, flow, status, started_at, finished_at, clock, summary FROM runs "
            "ORDER BY started_at DESC LIMIT ?",
            [last_runs],
        ).fetchall()
    live = _live_holder(stores)
    return {
        "lance_uri": stores.lance.uri,
        "meta_path": str(stores.meta.path),
        "tables": tables,
        "control_plane": meta_counts,
        "candidates_by_status": candidates,
        "last_runs": [
            {
                "run_id": r[0],
                "flow": r[1],
                "status": "crashed" if r[2] == "running" and r[0] != live else r[2],
                "started_at": r[3].isoformat() if r[3] else None,
                "finished_at": r[4].isoformat() if r[4] else None,
                "now": r[5].isoformat() if r[5] else None,
                "summary": json.loads(r[6]) if r[6] else None,
            }
            for r in runs
        ],
    }


def _live_holder(stores: Stores) -> str | None:
    """The run id holding the pipeline lease, if its holder is alive. A run recorded as
    running holds that lease from before it starts until after it finishes (flows/nightly.py),
    so a running run that is not this holder was killed: ``crashed``."""
    from memory_core.lease import current_holder, is_live

    info = current_holder(stores.meta)
    return info.holder if info is not None and is_live(info) else None
