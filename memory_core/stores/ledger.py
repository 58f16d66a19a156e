"""Runs, the stage ledger and per-partition watermarks: what makes a rerun converge.

A stage records (stage, partition, input hash) when it finishes; a rerun with the same input
finds the entry and skips the work. Watermarks say up to which transaction time a partition's
episodes have been consolidated.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

import pyarrow as pa

from memory_core.stores.meta import MetaStore, registered
from memory_core.stores.status_writes import MetaStatuses, write_status

__all__ = [
    "StageEntry",
    "Watermark",
    "finish_run",
    "get_watermarks",
    "ledger_done",
    "ledger_has",
    "record_stages",
    "set_watermarks",
    "start_run",
]

_TIMESTAMP = pa.timestamp("us", tz="UTC")


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


def ledger_done(meta: MetaStore, keys: Sequence[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
    """Those of ``keys`` (stage, partition key, input hash) that ``ledger_has``, in one read.

    Why: the process pool's one writer asked ``ledger_has`` once per partition, ~2 ms a
    statement whatever the ledger's size (~0.2 s of the 1M 1% night's critical path,
    BENCHMARKS.md s48); a night's units are distinct and only its own writer ledgers them, so
    one read before its writes gives each the same answer."""
    if not keys:
        return set()
    wanted = pa.table(
        {
            "stage": pa.array([k[0] for k in keys], pa.string()),
            "partition_key": pa.array([k[1] for k in keys], pa.string()),
            "input_hash": pa.array([k[2] for k in keys], pa.string()),
        }
    )
    with meta.connect() as con, registered(con, _wanted_entries=wanted):
        rows = con.execute(
            """SELECT l.stage, l.partition_key, l.input_hash FROM stage_ledger l
            SEMI JOIN _wanted_entries w USING (stage, partition_key, input_hash)
            WHERE l.status = 'done'"""
        ).fetchall()
    return {(stage, key, chash) for stage, key, chash in rows}


class StageEntry(NamedTuple):
    """A finished unit of stage work, as the ledger keeps it."""

    stage: str
    partition_key: str
    input_hash: str
    run_id: str
    started_at: datetime
    finished_at: datetime
    result: dict[str, Any]


def record_stages(meta: MetaStore, entries: Sequence[StageEntry]) -> None:
    """Record finished work, one statement for all of it (an existing entry is kept)."""
    if not entries:
        return
    rows = pa.table(
        {
            "stage": pa.array([e.stage for e in entries], pa.string()),
            "partition_key": pa.array([e.partition_key for e in entries], pa.string()),
            "input_hash": pa.array([e.input_hash for e in entries], pa.string()),
            "run_id": pa.array([e.run_id for e in entries], pa.string()),
            "started_at": pa.array([e.started_at for e in entries], _TIMESTAMP),
            "finished_at": pa.array([e.finished_at for e in entries], _TIMESTAMP),
            "result": pa.array(
                [json.dumps(e.result, default=str, sort_keys=True) for e in entries], pa.string()
            ),
        }
    )
    with meta.transaction() as con, registered(con, _stage_entries=rows):
        con.execute(
            """INSERT INTO stage_ledger SELECT stage, partition_key, input_hash, run_id,
            'done', started_at, finished_at, result FROM _stage_entries
            ON CONFLICT (stage, partition_key, input_hash) DO NOTHING"""
        )


def get_watermarks(meta: MetaStore, *, stage: str) -> dict[tuple[str, str], datetime]:
    with meta.connect() as con:
        rows = con.execute(
            "SELECT tenant_id, namespace, recorded_at FROM watermarks WHERE stage = ?", [stage]
        ).fetchall()
    return {(t, n): r for t, n, r in rows}


class Watermark(NamedTuple):
    """How far one partition's episodes are consolidated by a stage."""

    tenant_id: str
    namespace: str
    stage: str
    recorded_at: datetime


def set_watermarks(
    meta: MetaStore, marks: Sequence[Watermark], *, run_id: str, now: datetime
) -> None:
    """Move watermarks forward (never back), one statement for all of them."""
    if not marks:
        return
    rows = pa.table(
        {
            "tenant_id": pa.array([m.tenant_id for m in marks], pa.string()),
            "namespace": pa.array([m.namespace for m in marks], pa.string()),
            "stage": pa.array([m.stage for m in marks], pa.string()),
            "recorded_at": pa.array([m.recorded_at for m in marks], _TIMESTAMP),
        }
    )
    with meta.transaction() as con, registered(con, _watermarks_new=rows):
        con.execute(
            """INSERT INTO watermarks SELECT tenant_id, namespace, stage, recorded_at, ?, ?
            FROM _watermarks_new
            ON CONFLICT (tenant_id, namespace, stage) DO UPDATE SET
            recorded_at = greatest(watermarks.recorded_at, excluded.recorded_at),
            run_id = excluded.run_id, updated_at = excluded.updated_at""",
            [run_id, now],
        )
