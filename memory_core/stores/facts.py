"""Lance reads and writes of facts and procedures, including bitemporal queries.

Valid time is [valid_from, valid_to): when something was true in the world. Transaction time is
[recorded_at, recorded_to): when we believed it. "As of valid time V, known at T" is::

    recorded_at <= T AND (recorded_to IS NULL OR recorded_to > T)
    AND (valid_from IS NULL OR valid_from <= V) AND (valid_to IS NULL OR valid_to > V)

and current knowledge is ``recorded_to IS NULL``. A change is written as ONE ``merge_insert``
that closes the old row's ``recorded_to`` (the only column ever changed in place) and inserts
the new row versions, so a reader sees the state before or after it, never two current objects
for one key.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

import pyarrow as pa

from memory_core.stores.filters import in_list, sql_quote, ts_literal
from memory_core.stores.lance import LanceStore
from memory_core.stores.schemas import ID_COLUMN

__all__ = [
    "JSON_COLUMNS",
    "MemoryTable",
    "bitemporal_filter",
    "current_rows",
    "episodes_by_ids",
    "existing_ids",
    "list_rows",
    "rows_by_ids",
    "write_versions",
]

MemoryTable = Literal["facts", "procedures"]

JSON_COLUMNS = frozenset({"conditions", "provenance", "sources", "preconditions"})


def bitemporal_filter(as_of: datetime | None, known_at: datetime | None) -> str:
    """Lance SQL filter for rows valid at ``as_of`` as believed at ``known_at``.

    ``known_at=None`` means current knowledge (``recorded_to IS NULL``); ``as_of=None`` puts no
    bound on valid time (every current row, superseded history included). Pure: no I/O.

    Examples
    --------
    >>> from datetime import datetime, UTC
    >>> bitemporal_filter(None, None)
    'recorded_to IS NULL'
    >>> where = bitemporal_filter(datetime(2026, 7, 5, tzinfo=UTC), None)
    >>> where.split(" AND ")[1]
    "(valid_from IS NULL OR valid_from <= TIMESTAMP '2026-07-05T00:00:00.000000Z')"
    """
    parts: list[str] = []
    if known_at is None:
        parts.append("recorded_to IS NULL")
    else:
        t = ts_literal(known_at)
        parts.append(f"recorded_at <= {t} AND (recorded_to IS NULL OR recorded_to > {t})")
    if as_of is not None:
        v = ts_literal(as_of)
        parts.append(f"(valid_from IS NULL OR valid_from <= {v})")
        parts.append(f"(valid_to IS NULL OR valid_to > {v})")
    return " AND ".join(parts)


def _and(*clauses: str | None) -> str | None:
    kept = [c for c in clauses if c]
    return " AND ".join(f"({c})" for c in kept) if kept else None


def current_rows(
    lance: LanceStore,
    table: MemoryTable,
    *,
    tenant_id: str,
    namespace: str,
    column: str,
    values: Iterable[str],
    status: str | None = "active",
) -> list[dict[str, Any]]:
    """Current-knowledge rows of one partition whose ``column`` is among ``values``.

    Full rows (vector included), because a supersession rewrites them whole.
    """
    values = list(values)
    if not values:
        return []
    where = _and(
        f"tenant_id = {sql_quote(tenant_id)}",
        f"namespace = {sql_quote(namespace)}",
        "recorded_to IS NULL",
        f"status = {sql_quote(status)}" if status else None,
        in_list(column, values),
    )
    return lance.scan(table, where=where).to_pylist()


def rows_by_ids(lance: LanceStore, table: MemoryTable, ids: Iterable[str]) -> list[dict[str, Any]]:
    ids = list(ids)
    if not ids:
        return []
    return lance.scan(table, where=in_list(ID_COLUMN[table], ids)).to_pylist()


def existing_ids(
    lance: LanceStore, table: MemoryTable, ids: Iterable[str], *, tenant_id: str | None = None
) -> set[str]:
    """Which of ``ids`` are rows of ``table`` (of ``tenant_id`` only, when given)."""
    ids = list(ids)
    if not ids:
        return set()
    id_col = ID_COLUMN[table]
    where = _and(in_list(id_col, ids), f"tenant_id = {sql_quote(tenant_id)}" if tenant_id else None)
    found = lance.scan(table, where=where, columns=[id_col])
    return set(found.column(id_col).to_pylist())


def episodes_by_ids(
    lance: LanceStore, tenant_id: str, ids: Iterable[str], columns: list[str]
) -> list[dict[str, Any]]:
    """Episodes of one tenant by id (the evidence a promotion rests on)."""
    ids = list(ids)
    if not ids:
        return []
    where = _and(f"tenant_id = {sql_quote(tenant_id)}", in_list("episode_id", ids))
    return lance.scan("episodes", where=where, columns=columns).to_pylist()


def write_versions(
    lance: LanceStore,
    table: MemoryTable,
    *,
    close: Sequence[Mapping[str, Any]],
    insert: Sequence[Mapping[str, Any]],
) -> Any:
    """One commit: close the given rows' transaction time and insert new row versions.

    ``close`` rows are full rows with ``recorded_to`` set; they update only a row that is still
    current (``recorded_to IS NULL``), so closing twice changes nothing. ``insert`` rows must
    have new ids (callers check with ``existing_ids``).
    """
    rows = [*close, *insert]
    if not rows:
        return None
    handle = lance.table(table)
    data = pa.Table.from_pylist([dict(r) for r in rows], schema=handle.schema)
    return (
        handle.merge_insert(ID_COLUMN[table])
        .when_matched_update_all(where="target.recorded_to IS NULL")
        .when_not_matched_insert_all()
        .execute(data)
    )


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        if key == "vector":
            continue
        if key in JSON_COLUMNS and isinstance(value, str):
            value = json.loads(value) if value else None
        elif isinstance(value, datetime):
            value = value.astimezone(UTC).isoformat()
        out[key] = value
    return out


def list_rows(
    lance: LanceStore,
    table: MemoryTable,
    *,
    as_of: datetime | None = None,
    known_at: datetime | None = None,
    tenant_id: str | None = None,
    subject_id: str | None = None,
    status: str | None = None,
) -> list[dict[str, Any]]:
    """Rows as of a valid time and known at a recorded time, without vectors, JSON parsed."""
    columns = [n for n in lance.table(table).schema.names if n != "vector"]
    where = _and(
        bitemporal_filter(as_of, known_at),
        f"tenant_id = {sql_quote(tenant_id)}" if tenant_id else None,
        f"subject_id = {sql_quote(subject_id)}" if subject_id else None,
        f"status = {sql_quote(status)}" if status else None,
    )
    rows = lance.scan(table, where=where, columns=columns).to_pylist()
    id_col = ID_COLUMN[table]
    rows.sort(
        key=lambda r: (
            r["tenant_id"],
            r.get("subject_id") or "",
            r.get("predicate") or r.get("name") or "",
            r["recorded_at"],
            r[id_col],
        )
    )
    return [_plain(r) for r in rows]
