"""Mining state per unit in DuckDB: what a night needs to skip units whose input is unchanged.

One row per (tenant, namespace, unit key): the fingerprint of the unit's input when it was
last mined and what that mining produced (candidate ids and counts, ``produced`` JSON). The
rows are derived data: a missing or different row only makes the unit be mined again, so the
mining stage writes them after its candidates (a crash in between re-mines the unit).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pyarrow as pa

from memory_core.stores.meta import MetaStore

__all__ = ["load_units", "save_units"]


def load_units(meta: MetaStore, tenant_id: str, namespace: str) -> dict[str, tuple[str, dict]]:
    """``{unit key: (fingerprint, produced)}`` of one partition."""
    with meta.connect() as con:
        rows = con.execute(
            "SELECT unit_key, fingerprint, produced FROM mine_units "
            "WHERE tenant_id = ? AND namespace = ?",
            [tenant_id, namespace],
        ).fetchall()
    return {key: (fp, json.loads(produced)) for key, fp, produced in rows}


def save_units(
    meta: MetaStore,
    tenant_id: str,
    namespace: str,
    units: dict[str, tuple[str, dict[str, Any]]],
    *,
    keep: set[str],
    run_id: str,
    now: datetime,
) -> None:
    """Upsert ``units`` and delete the partition's other rows not in ``keep``, in one
    transaction (units that no longer exist must not be carried forward)."""
    rows = pa.table(
        {
            "unit_key": pa.array(list(units), pa.string()),
            "fingerprint": pa.array([fp for fp, _ in units.values()], pa.string()),
            "produced": pa.array(
                [json.dumps(p, sort_keys=True) for _, p in units.values()], pa.string()
            ),
        }
    )
    alive = pa.table({"unit_key": pa.array(sorted(keep | set(units)), pa.string())})
    with meta.transaction() as con:
        con.register("_mine_units_new", rows)
        con.register("_mine_units_alive", alive)
        try:
            con.execute(
                "DELETE FROM mine_units WHERE tenant_id = ? AND namespace = ? "
                "AND unit_key NOT IN (SELECT unit_key FROM _mine_units_alive)",
                [tenant_id, namespace],
            )
            con.execute(
                "INSERT INTO mine_units SELECT ?, ?, unit_key, fingerprint, produced, ?, ? "
                "FROM _mine_units_new ON CONFLICT (tenant_id, namespace, unit_key) DO UPDATE "
                "SET fingerprint = excluded.fingerprint, produced = excluded.produced, "
                "run_id = excluded.run_id, mined_at = excluded.mined_at",
                [tenant_id, namespace, run_id, now],
            )
        finally:
            con.unregister("_mine_units_new")
            con.unregister("_mine_units_alive")
