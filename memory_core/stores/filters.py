"""Literals of Lance filter expressions (DataFusion SQL): strings, timestamps, IN lists.

Strings and IN lists are standard SQL, the same in DuckDB: a store module looking rows up by
a few keys there uses them too (``stores/clusters._any_member``).

One place for them, so every stage quotes a value the same way and no stage imports another
for a helper. Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

__all__ = ["in_list", "sql_quote", "ts_literal"]


def sql_quote(value: str) -> str:
    """Quote a string literal for a Lance filter expression.

    Examples
    --------
    >>> sql_quote("it's")
    "'it''s'"
    """
    return "'" + value.replace("'", "''") + "'"


def ts_literal(value: datetime) -> str:
    """A Lance (DataFusion) timestamp literal in UTC with microseconds.

    Examples
    --------
    >>> ts_literal(datetime(2026, 7, 5, tzinfo=UTC))
    "TIMESTAMP '2026-07-05T00:00:00.000000Z'"
    """
    if value.tzinfo is None:
        msg = f"Lance timestamp filters need timezone-aware datetimes, got {value!r} (no timezone)"
        raise ValueError(msg)
    text = value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return f"TIMESTAMP '{text}'"


def in_list(column: str, values: Iterable[str]) -> str:
    """``column IN (...)`` over the distinct values, sorted (the same filter for the same set);
    one value is an equality, which Lance's scalar indices answer directly.

    Examples
    --------
    >>> in_list("fact_id", ["b", "a", "b"])
    "fact_id IN ('a', 'b')"
    >>> in_list("status", ["active"])
    "status = 'active'"
    """
    items = sorted(set(values))
    if len(items) == 1:
        return f"{column} = {sql_quote(items[0])}"
    return f"{column} IN ({', '.join(sql_quote(v) for v in items)})"
