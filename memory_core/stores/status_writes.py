"""The one writer of record status changes: checked against the lifecycle table, then audited.

Every change of a Lance row's status goes through ``write_status`` (a test scans the package
for any other writer). A change is one of:

``InPlace``      set ``to`` (and other columns) on every current row a filter selects whose
                 status is among ``was``: one Lance ``update``, whatever the number of rows
                 (expiry, revocation of a source);
``RowVersions``  full rows written in one commit: ``close`` rows update a current row in place
                 (its status may change: stale, contested, canary -> active) or close its
                 transaction time; ``insert`` rows are new row versions (created with their
                 status); ``upsert=True`` replaces rows by id instead (revocation rewrites).
``MetaStatuses`` new statuses of control-plane records (DuckDB: candidates, review batches,
                 deletion requests, canaries, LLM batches, runs), one ``UPDATE`` from an Arrow
                 table inside the caller's transaction (a candidate's body JSON too); callers
                 write the records' other columns themselves, never ``status``.

Before anything is written, the stored status of every row the change touches is read (ids and
status only, one scan) and each (old, new) pair is checked with ``lifecycle.check_transition``:
an illegal one raises ``IllegalTransition`` and nothing is written. After the write, one audit
row per call records the transitions counted by (old, new), with an id derived from the table,
the changed ids and the time, so a rerun of the same change writes the same event. Lance
changes are audited in a DuckDB transaction of their own after the Lance commit; candidate
changes in the caller's transaction.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from memory_core.lifecycle import KIND_OF_TABLE, check_transition
from memory_core.stores import Stores
from memory_core.stores.audit import record_audit
from memory_core.stores.facts import write_versions
from memory_core.stores.filters import in_list
from memory_core.stores.schemas import ID_COLUMN

if TYPE_CHECKING:
    import duckdb

__all__ = [
    "AUDIT_ACTION",
    "META_KINDS",
    "InPlace",
    "MetaStatuses",
    "RowVersions",
    "StatusWrite",
    "write_status",
]

AUDIT_ACTION = "status_change"
_ID_CHUNK = 5_000  # ids per IN list when reading stored statuses


@dataclass(frozen=True)
class InPlace:
    """Set ``to`` on the current rows of ``table`` matching ``where`` whose status is in ``was``."""

    table: str
    where: str
    was: tuple[str, ...]
    to: str
    values: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RowVersions:
    """Full rows of ``table`` written in one commit (see the module docstring)."""

    table: str
    close: Sequence[Mapping[str, Any]] = ()
    insert: Sequence[Mapping[str, Any]] = ()
    upsert: bool = False


@dataclass(frozen=True)
class MetaStatuses:
    """New status per record id of a DuckDB ``table``, written in the transaction of ``con``.

    Ids that are not stored are skipped (their caller found nothing to change either).
    ``stored``: the records' statuses as the caller read them in this transaction (it wrote
    no status since), so they are not read again; ``body_written``: the caller wrote each
    candidate's body with its new status in this transaction, so only the status column is
    set. Why: the miner's upsert reads the statuses and writes the bodies of a partition's
    ~150 rewritten candidates anyway; reading the statuses again and patching each ~10 KB
    body a second time was ~5 of the 1M 1% night's ~100 thread seconds (BENCHMARKS.md s30).
    """

    con: duckdb.DuckDBPyConnection
    to: Mapping[str, str]
    table: str = "candidates"
    stored: Mapping[str, str] | None = None
    body_written: bool = False


# DuckDB tables whose rows carry a status: (record kind, id column).
META_KINDS: Mapping[str, tuple[str, str]] = {
    "candidates": ("candidate", "candidate_id"),
    "review_batches": ("review_batch", "batch_id"),
    "deletion_requests": ("deletion_request", "request_id"),
    "canaries": ("canary", "procedure_id"),
    "llm_batches": ("llm_batch", "batch_id"),
    "runs": ("run", "run_id"),
}
# Bookkeeping of the pipeline's own processes: their tables are their history, not audited.
_UNAUDITED = frozenset({"llm_batches", "runs"})


@dataclass
class StatusWrite:
    """What one call changed: row count and transitions counted as ``"old->new"``."""

    rows: int = 0
    transitions: dict[str, int] = field(default_factory=dict)
    event_id: str | None = None


def _stored_status(stores: Stores, table: str, ids: Sequence[str]) -> dict[str, str]:
    id_col = ID_COLUMN[table]
    out: dict[str, str] = {}
    for start in range(0, len(ids), _ID_CHUNK):
        where = in_list(id_col, ids[start : start + _ID_CHUNK])
        found = stores.lance.scan(table, where=where, columns=[id_col, "status"])
        for rid, status in zip(
            found.column(id_col).to_pylist(), found.column("status").to_pylist(), strict=True
        ):
            out[rid] = status
    return out


def _plan_in_place(stores: Stores, change: InPlace) -> tuple[str, list[tuple[str, str, str]]]:
    kind = KIND_OF_TABLE[change.table]
    id_col = ID_COLUMN[change.table]
    was = ", ".join(f"'{s}'" for s in sorted(set(change.was)))
    where = f"({change.where}) AND status IN ({was})"
    found = stores.lance.scan(change.table, where=where, columns=[id_col, "status"])
    pairs = list(
        zip(found.column(id_col).to_pylist(), found.column("status").to_pylist(), strict=True)
    )
    for rid, old in pairs:
        check_transition(kind, rid, old, change.to)
    return where, [(rid, old, change.to) for rid, old in pairs]


def _plan_versions(stores: Stores, change: RowVersions) -> list[tuple[str, str | None, str]]:
    kind = KIND_OF_TABLE[change.table]
    id_col = ID_COLUMN[change.table]
    touched = [*change.close, *change.insert] if change.upsert else list(change.close)
    stored = _stored_status(stores, change.table, sorted({r[id_col] for r in touched}))
    out: list[tuple[str, str | None, str]] = []
    for row in touched:
        rid, new = row[id_col], row["status"]
        old = stored.get(rid)
        closing = not change.upsert and row.get("recorded_to") is not None
        if closing and old is not None:
            continue  # transaction time closed: the status stays what it was
        check_transition(kind, rid, old, new)
        out.append((rid, old, new))
    if not change.upsert:
        for row in change.insert:
            check_transition(kind, row[id_col], None, row["status"])
            out.append((row[id_col], None, row["status"]))
    return out


def _write_rows(stores: Stores, change: RowVersions) -> None:
    if change.upsert:
        rows = [dict(r) for r in (*change.close, *change.insert)]
        if rows:
            schema = stores.lance.table(change.table).schema
            stores.lance.upsert(change.table, pa.Table.from_pylist(rows, schema=schema))
        return
    write_versions(stores.lance, change.table, close=change.close, insert=change.insert)  # type: ignore[arg-type]


def _plan_meta(change: MetaStatuses) -> list[tuple[str, str | None, str]]:
    kind, id_col = META_KINDS[change.table]
    ids = sorted(change.to)
    if not ids:
        return []
    if change.stored is not None:
        return _checked(kind, ids, change.to, change.stored)
    # a join, not list_contains over the table (a full scan: ~40 s at 1M candidates)
    change.con.register("_status_ids", pa.table({"record_id": pa.array(ids, pa.string())}))
    try:
        stored = dict(
            change.con.execute(
                f"SELECT t.{id_col}, t.status FROM {change.table} t "
                f"JOIN _status_ids w ON t.{id_col} = w.record_id"
            ).fetchall()
        )
    finally:
        change.con.unregister("_status_ids")
    return _checked(kind, ids, change.to, stored)


def _checked(
    kind: str, ids: Sequence[str], to: Mapping[str, str], stored: Mapping[str, str]
) -> list[tuple[str, str | None, str]]:
    """(id, stored status, new status) of the stored ``ids``, each transition checked."""
    out: list[tuple[str, str | None, str]] = []
    for cid in ids:
        if cid not in stored:
            continue
        new = str(to[cid])
        check_transition(kind, cid, stored[cid], new)
        out.append((cid, stored[cid], new))
    return out


def _write_meta(
    change: MetaStatuses, changes: list[tuple[str, str | None, str]], at: datetime
) -> None:
    moved = [(cid, new) for cid, old, new in changes if old != new]
    if not moved:
        return
    _, id_col = META_KINDS[change.table]
    data = pa.table({"record_id": [c for c, _ in moved], "status": [n for _, n in moved]})
    also, params = "", []
    if change.table == "candidates" and change.body_written:
        also, params = ", updated_at = ?", [at]  # the body was written with the new status
    elif change.table == "candidates":  # the body JSON repeats the status
        also = ", updated_at = ?, body = json_merge_patch(body, json_object('status', o.status))"
        params = [at]
    change.con.register("_status_changes", data)
    try:
        change.con.execute(
            f"UPDATE {change.table} SET status = o.status{also} FROM _status_changes o "
            f"WHERE {change.table}.{id_col} = o.record_id",
            params,
        )
    finally:
        change.con.unregister("_status_changes")


def _audit(
    target: Stores | duckdb.DuckDBPyConnection,
    table: str,
    changes: list[tuple[str, str | None, str]],
    *,
    at: datetime,
    run_id: str | None,
    actor: str | None,
    reason: str | None,
) -> str | None:
    moved = [(rid, old, new) for rid, old, new in changes if old != new]
    if not moved or table in _UNAUDITED:
        return None
    counts = Counter(f"{old or 'new'}->{new}" for _, old, new in moved)
    digest = hashlib.sha256("\n".join(sorted(f"{r}:{o}:{n}" for r, o, n in moved)).encode())
    kind = KIND_OF_TABLE[table] if table in KIND_OF_TABLE else META_KINDS[table][0]
    detail: dict[str, Any] = {"kind": kind, "ids_sha256": digest.hexdigest()}
    if reason:
        detail["reason"] = reason
    audit: dict[str, Any] = {
        "at": at, "action": AUDIT_ACTION, "run_id": run_id, "actor": actor, "target": table,
        "counts": dict(sorted(counts.items())), "detail": detail,
    }  # fmt: skip
    if isinstance(target, Stores):
        with target.meta.transaction() as con:
            return record_audit(con, **audit)
    return record_audit(target, **audit)


def write_status(
    stores: Stores | None,
    change: InPlace | RowVersions | MetaStatuses,
    *,
    at: datetime,
    run_id: str | None = None,
    actor: str | None = None,
    reason: str | None = None,
) -> StatusWrite:
    """Check, write and audit one batch of status changes; see the module docstring.

    ``stores`` may be None for ``MetaStatuses`` (they carry the caller's connection).
    Raises ``IllegalTransition`` (nothing written) when any row may not take its new status.
    """
    target: Stores | duckdb.DuckDBPyConnection
    if isinstance(change, MetaStatuses):
        target = change.con
        changes = _plan_meta(change)
        _write_meta(change, changes, at)
    elif stores is None:
        msg = f"a change of {change.table} needs the stores"
        raise TypeError(msg)
    else:
        target = stores
        if isinstance(change, InPlace):
            where, changes = _plan_in_place(stores, change)
            if changes:
                stores.lance.update(change.table, where, {**change.values, "status": change.to})
        else:
            changes = _plan_versions(stores, change)
            _write_rows(stores, change)
    result = StatusWrite(rows=len(changes))
    for _, old, new in changes:
        if old != new:
            key = f"{old or 'new'}->{new}"
            result.transitions[key] = result.transitions.get(key, 0) + 1
    result.event_id = _audit(
        target, change.table, changes, at=at, run_id=run_id, actor=actor, reason=reason
    )
    return result
