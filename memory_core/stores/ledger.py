"""Runs, the stage ledger and per-partition watermarks: what makes a rerun converge.

A stage records (stage, partition, input hash) when it finishes; a rerun with the same input
finds the entry and skips the work. Watermarks say up to which transaction time a partition's
episodes have been consolidated.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from memory_core.stores.meta import MetaStore
from memory_core.stores.status_writes import MetaStatuses, write_status

__all__ = [
    "finish_run",
    "get_watermarks",
    "ledger_has",
    "record_stage",
    "set_watermark",
    "start_run",
]


def start_run(
    meta: MetaStore,
    *,
    run_id: str,
    flow: str,
    started_at: datetime,
    clock: datetime,
    params: dict[str, Any],
) -> None:
    with meta.transaction() as con:
        write_status(None, MetaStatuses(con, {run_id: "running"}, table="runs"), at=started_at)
        con.execute(
            """INSERT INTO runs VALUES (?, ?, ?, NULL, 'running', ?, ?, NULL)
            ON CONFLICT (run_id) DO NOTHING""",
            [run_id, flow, started_at, clock, json.dumps(params, default=str, sort_keys=True)],
        )


def finish_run(
    meta: MetaStore, *, run_id: str, finished_at: datetime, status: str, summary: dict[str, Any]
) -> None:
    with meta.transaction() as con:
        write_status(None, MetaStatuses(con, {run_id: status}, table="runs"), at=finished_at)
        con.execute(
            "UPDATE runs SET finished_at = ?, summary = ? WHERE run_id = ?",
            [finished_at, json.dumps(summary, default=str, sort_keys=True), run_id],
        )


def ledger_has(meta: MetaStore, *, stage: str, partition_key: str, input_hash: str) -> bool:
    with meta.connect() as con:
        row = con.execute(
            """SELECT 1 FROM stage_ledger WHERE stage = ? AND partition_key = ?
            AND input_hash = ? AND status = 'done'""",
            [stage, partition_key, input_hash],
        ).fetchone()
    return row is not None


def record_stage(
    meta: MetaStore,
    *,
    stage: str,
    partition_key: str,
    input_hash: str,
    run_id: str,
    started_at: datetime,
    finished_at: datetime,
    result: dict[str, Any],
) -> None:
    with meta.transaction() as con:
        con.execute(
            """INSERT INTO stage_ledger VALUES (?, ?, ?, ?, 'done', ?, ?, ?)
            ON CONFLICT (stage, partition_key, input_hash) DO NOTHING""",
            [
                stage,
                partition_key,
                input_hash,
                run_id,
                started_at,
                finished_at,
                json.dumps(result, default=str, sort_keys=True),
            ],
        )


def get_watermarks(meta: MetaStore, *, stage: str) -> dict[tuple[str, str], datetime]:
    with meta.connect() as con:
        rows = con.execute(
            "SELECT tenant_id, namespace, recorded_at FROM watermarks WHERE stage = ?", [stage]
        ).fetchall()
    return {(t, n): r for t, n, r in rows}


def set_watermark(
    meta: MetaStore,
    *,
    tenant_id: str,
    namespace: str,
    stage: str,
    recorded_at: datetime,
    run_id: str,
    now: datetime,
) -> None:
    with meta.transaction() as con:
        con.execute(
            """INSERT INTO watermarks VALUES (?, ?, ?, ?, ?, ?)
            ON CONFLICT (tenant_id, namespace, stage) DO UPDATE SET
            recorded_at = greatest(watermarks.recorded_at, excluded.recorded_at),
            run_id = excluded.run_id, updated_at = excluded.updated_at""",
            [tenant_id, namespace, stage, recorded_at, run_id, now],
        )
