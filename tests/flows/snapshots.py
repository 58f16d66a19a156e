"""Final rows of every table, minus what legitimately differs between two runs of one input.

Run ids, wall-clock timestamps/durations and a receipt's body (a report of its run) differ;
everything else (Lance rows, clusters, candidates, evidence, lineage, review batches, receipt
and audit-event ids, watermarks' positions, ledger input hashes) must be identical when two runs
see the same input, config and clock, whichever task runner ran them.
"""

from __future__ import annotations

import json
from typing import Any

from memory_core.stores import Stores
from memory_core.stores.schemas import ID_COLUMN, TABLES

# Columns holding run ids, uuids or wall-clock times.
VOLATILE_COLUMNS = {
    "run_id",
    "entry_id",
    "flow_run_id",
    "started_at",
    "finished_at",
    "logged_at",
    "issued_at",
    "applied_at",
}
# Whole tables whose rows embed run ids or durations (counted instead).
COUNTED_TABLES = {"runs", "schema_version", "llm_ledger"}
# Columns that report what one run did (its run id, its durations), not the state it leaves.
REPORT_COLUMNS = {"receipts": {"body"}}


def snapshot(stores: Stores) -> dict[str, Any]:
    out: dict[str, Any] = {}
    existing = set(stores.lance.table_names())
    for name in TABLES:
        if name not in existing:
            continue
        rows = stores.lance.scan(name).sort_by(ID_COLUMN[name]).to_pylist()
        out[f"lance.{name}"] = rows
    with stores.meta.connect() as con:
        tables = [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables ORDER BY table_name"
            ).fetchall()
        ]
        for table in tables:
            if table in COUNTED_TABLES:
                out[table] = con.execute(f"SELECT count(*) FROM {table}").fetchone()
                continue
            cols = [
                r[0]
                for r in con.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                    "ORDER BY ordinal_position",
                    [table],
                ).fetchall()
                if r[0] not in VOLATILE_COLUMNS and r[0] not in REPORT_COLUMNS.get(table, ())
            ]
            select = ", ".join(f'"{c}"' for c in cols)
            rows = con.execute(f"SELECT {select} FROM {table}").fetchall()
            if table == "stage_ledger":
                rows = [_without_timings(dict(zip(cols, r, strict=True))) for r in rows]
            out[table] = sorted(map(repr, rows))
    return out


def _without_timings(row: dict[str, Any]) -> dict[str, Any]:
    """A ledger row's result minus its stage durations (``seconds``)."""
    result = json.loads(row["result"]) if row.get("result") else None
    if isinstance(result, dict):
        result.pop("seconds", None)
    return {**row, "result": result}


def diff(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Names of the tables whose rows differ (for a readable assertion message)."""
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
