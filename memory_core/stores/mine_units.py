"""Mining state per unit in DuckDB: what a night needs to skip units whose input is unchanged.

One row per (tenant, namespace, unit key): the fingerprint of the unit's input when it was
last mined and what that mining produced (candidate ids and counts, ``produced`` JSON). The
rows are derived data: a missing or different row only makes the unit be mined again, so the
mining stage writes them after its candidates (a crash in between re-mines the unit).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, NamedTuple

import pyarrow as pa

from memory_core.stores.meta import MetaStore, registered

__all__ = ["UnitSave", "load_all_units", "load_units", "save_partitions_units"]


def load_units(meta: MetaStore, tenant_id: str, namespace: str) -> dict[str, tuple[str, dict]]:
    """``{unit key: (fingerprint, produced)}`` of one partition."""
    key = (tenant_id, namespace)
    return load_all_units(meta, key).get(key, {})


def load_all_units(
    meta: MetaStore, partition: tuple[str, str] | None = None
) -> dict[tuple[str, str], dict[str, tuple[str, dict]]]:
    """``load_units`` of every partition (or of ``partition`` alone), by (tenant, namespace),
    in one read."""
    where, params = "", []
    if partition is not None:
        where, params = "WHERE tenant_id = ? AND namespace = ?", list(partition)
    out: dict[tuple[str, str], dict[str, tuple[str, dict]]] = {}
    with meta.connect() as con:
        rows = con.execute(
            f"SELECT tenant_id, namespace, unit_key, fingerprint, produced FROM mine_units {where}",
            params,
        ).fetchall()
    for tenant, namespace, unit, fp, produced in rows:
        out.setdefault((tenant, namespace), {})[unit] = (fp, json.loads(produced))
    return out


class UnitSave(NamedTuple):
    """One partition's mined units: ``units`` upserted, its other rows not in ``keep``
    deleted (units that no longer exist must not be carried forward)."""

    tenant_id: str
    namespace: str
    units: dict[str, tuple[str, dict[str, Any]]]
    keep: set[str]


def save_partitions_units(
    meta: MetaStore, saves: list[UnitSave], *, run_id: str, now: datetime
) -> None:
    """Save several partitions' units (``UnitSave``) in one delete and one upsert, in one
    transaction. Why: the process pool's writer finishes a commit group's partitions together,
    and the two statements' fixed cost (~2-3 ms each, an upsert's ``ON CONFLICT`` most of it)
    was paid per partition (BENCHMARKS.md s44)."""
    if not saves:
        return
    rows = pa.table(
        {
            "tenant_id": pa.array([s.tenant_id for s in saves for _ in s.units], pa.string()),
            "namespace": pa.array([s.namespace for s in saves for _ in s.units], pa.string()),
            "unit_key": pa.array([u for s in saves for u in s.units], pa.string()),
            "fingerprint": pa.array([fp for s in saves for fp, _ in s.units.values()], pa.string()),
            "produced": pa.array(
                [json.dumps(p, sort_keys=True) for s in saves for _, p in s.units.values()],
                pa.string(),
            ),
        }
    )
    alive_keys = [(s.tenant_id, s.namespace, sorted(s.keep | set(s.units))) for s in saves]
    alive = pa.table(
        {
            "tenant_id": pa.array([t for t, _, keys in alive_keys for _ in keys], pa.string()),
            "namespace": pa.array([n for _, n, keys in alive_keys for _ in keys], pa.string()),
            "unit_key": pa.array([k for _, _, keys in alive_keys for k in keys], pa.string()),
        }
    )
    parts = pa.table(
        {
            "tenant_id": pa.array([s.tenant_id for s in saves], pa.string()),
            "namespace": pa.array([s.namespace for s in saves], pa.string()),
        }
    )
    with (
        meta.transaction() as con,
        registered(con, _mine_units_new=rows, _mine_units_alive=alive, _mine_units_parts=parts),
    ):
        con.execute(
            "DELETE FROM mine_units m WHERE (m.tenant_id, m.namespace) IN "
            "(SELECT tenant_id, namespace FROM _mine_units_parts) AND NOT EXISTS ("
            "SELECT 1 FROM _mine_units_alive a WHERE a.tenant_id = m.tenant_id "
            "AND a.namespace = m.namespace AND a.unit_key = m.unit_key)"
        )
        con.execute(
            "INSERT INTO mine_units SELECT tenant_id, namespace, unit_key, fingerprint, "
            "produced, ?, ? FROM _mine_units_new ON CONFLICT (tenant_id, namespace, unit_key) "
            "DO UPDATE SET fingerprint = excluded.fingerprint, produced = excluded.produced, "
            "run_id = excluded.run_id, mined_at = excluded.mined_at",
            [run_id, now],
        )
