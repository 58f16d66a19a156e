"""Access statistics: the read path's access log folded into hits and last access per record.

Forgetting uses them so unused, unimportant memories go first (decay and per-subject caps).
"""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa

from memory_core.stores.meta import MetaStore

__all__ = ["ACCESS_STAGE", "access_stats", "decay_victims", "fold_access_rows", "folded_files"]

ACCESS_STAGE = "access_fold"


def folded_files(meta: MetaStore, keys: list[str]) -> set[str]:
    """Which access-log files (by name + content hash key) were already folded."""
    if not keys:
        return set()
    with meta.connect() as con:
        rows = con.execute(
            "SELECT partition_key FROM stage_ledger WHERE stage = ? "
            "AND list_contains(?, partition_key)",
            [ACCESS_STAGE, keys],
        ).fetchall()
    return {r[0] for r in rows}


def fold_access_rows(
    meta: MetaStore, rows: pa.Table, *, file_keys: list[str], run_id: str, now: datetime
) -> int:
    """Add hits and last access per record, and mark the files folded, in one transaction.

    ``rows`` has record_id, table, tenant_id, subject_id, at (one row per read); marking the
    files in the same transaction is what makes a crash between fold and file move harmless.
    """
    with meta.transaction() as con:
        con.register("_reads", rows)
        try:
            con.execute(
                """INSERT INTO access_stats
                SELECT record_id, any_value("table"), any_value(tenant_id), any_value(subject_id),
                       count(*), max("at") FROM _reads GROUP BY record_id
                ON CONFLICT (record_id) DO UPDATE SET hits = access_stats.hits + excluded.hits,
                last_access = greatest(access_stats.last_access, excluded.last_access)"""
            )
        finally:
            con.unregister("_reads")
        con.executemany(
            "INSERT INTO stage_ledger VALUES (?, ?, 'file', ?, 'done', ?, ?, ?) "
            "ON CONFLICT DO NOTHING",
            [(ACCESS_STAGE, key, run_id, now, now, "{}") for key in file_keys],
        )
    return rows.num_rows


def access_stats(meta: MetaStore, table_name: str) -> pa.Table:
    """record_id, hits, last_access of one Lance table's records."""
    with meta.connect() as con:
        return con.execute(
            "SELECT record_id, hits, last_access FROM access_stats WHERE table_name = ?",
            [table_name],
        ).to_arrow_table()


def decay_victims(
    meta: MetaStore,
    rows: pa.Table,
    *,
    table_name: str,
    now: datetime,
    half_life_days: float,
    default_importance: float,
    floor: float | None,
    cap: int | None,
) -> list[str]:
    """Ids to expire by decay or by the per-subject cap, lowest score first.

    ``rows``: id, tenant_id, subject_id, importance, basis (the row's valid time). Score =
    importance x recency x access, recency = 0.5 ** (days since max(basis, last access) /
    half life), access = 1 + ln(1 + hits): unused, unimportant memories go first.
    """
    if rows.num_rows == 0 or (floor is None and cap is None):
        return []
    with meta.connect() as con:
        con.register("_rows", rows)
        try:
            victims = con.execute(
                """WITH scored AS (
                    SELECT r.id, r.tenant_id, r.subject_id,
                        coalesce(r.importance, ?) * pow(0.5, greatest(0,
                            epoch(?::TIMESTAMPTZ - greatest(r.basis, coalesce(a.last_access,
                            r.basis))) / 86400.0) / ?) * (1 + ln(1 + coalesce(a.hits, 0))) AS score
                    FROM _rows r LEFT JOIN access_stats a
                    ON a.record_id = r.id AND a.table_name = ?),
                ranked AS (SELECT *, row_number() OVER (PARTITION BY tenant_id, subject_id
                    ORDER BY score DESC, id) AS rank FROM scored)
                SELECT id FROM ranked WHERE (? IS NOT NULL AND score < ?)
                    OR (? IS NOT NULL AND rank > ?) ORDER BY id""",
                [default_importance, now, half_life_days, table_name, floor, floor, cap, cap],
            ).fetchall()
        finally:
            con.unregister("_rows")
    return [v[0] for v in victims]
