"""Values only the forgotten target gave: what a deletion must also find nowhere afterwards.

Why: a derived record can carry a subject's data without naming them or citing one of their
records. A procedure mined from tool-calling trajectories once quoted one user's reservation
id as a constant of a tenant-wide procedure; forgetting that user took their episodes and
their pins out of the candidate, and the verification, which looked for their name and
record ids, passed while the id stayed in the candidate's steps (session s39, tau-bench). The
miner no longer quotes a value one source gave; this makes the receipt check it, so any other
way such a value survives turns a deletion ``unverified`` instead of passing unseen.

*Identifying*: a tool-call argument or a condition value of the target's episodes that looks
like an identifier: 6-200 characters, no whitespace, and a letter and a digit (``1N99U6``,
``gift_card_5634230``, ``DEV-ANA-7``) or the shape of an e-mail address. Plain words, numbers
and dates are left out: they turn up in other records' templates, counts and timestamps, and a
check that cries wolf would make every receipt unverified. *Only theirs*: no other stored
episode (any subject, tenant or status) holds it anywhere in its goal, steps, conditions, text
or feedback, read before the deletion. Such a value can then only reach a derived record from
the target's own episodes, so after the deletion it must be in no derived Lance table and no
DuckDB text column.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

import polars as pl
import pyarrow as pa

from memory_core.steps import ToolCall, decode_step
from memory_core.stores import Stores
from memory_core.stores.forgetting import values_left as duckdb_values_left
from memory_core.stores.schemas import TABLES

__all__ = ["identifying_values", "only_theirs", "values_left"]

_MIN_CHARS, _MAX_CHARS = 6, 200
_LETTER, _DIGIT, _SPACE = re.compile(r"[^\W\d_]"), re.compile(r"\d"), re.compile(r"\s")
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s.]+")  # an address, digits or not
_EPISODE_TEXT = ("goal", "actions", "conditions", "text", "feedback")
MAX_VALUES = 500  # searched per deletion; a subject with more is checked on the first 500


def _identifying(value: str) -> bool:
    if not _MIN_CHARS <= len(value) <= _MAX_CHARS or _SPACE.search(value) is not None:
        return False
    if _EMAIL.fullmatch(value) is not None:
        return True
    return _LETTER.search(value) is not None and _DIGIT.search(value) is not None


def _leaves(value: Any) -> Iterator[str]:
    """Every string (and number, as written) inside a JSON value."""
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, str):
        yield value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield json.dumps(value)


def identifying_values(
    actions: Iterable[list[str] | None], conditions: Iterable[str | None]
) -> set[str]:
    """The identifying values among tool-call arguments (stored steps) and condition values
    (stored JSON objects). Free-text actions give none: their words are not values.

    >>> sorted(identifying_values(
    ...     [['{"args":{"id":"1N99U6","cabin":"economy","to":"ana@x.org"},"tool":"book"}']],
    ...     ['{"device": "DEV-ANA-7", "os": "linux"}'],
    ... ))
    ['1N99U6', 'DEV-ANA-7', 'ana@x.org']
    """
    found: set[str] = set()
    for steps in actions:
        for stored in steps or []:
            step = decode_step(stored)
            if isinstance(step, ToolCall):
                found.update(v for v in _leaves(step.args) if _identifying(v))
    for raw in conditions:
        if not raw:
            continue
        try:
            parsed = json.loads(raw)
        except ValueError:
            continue
        found.update(v for v in _leaves(parsed) if _identifying(v))
    return found


def _text_columns(schema: pa.Schema) -> dict[str, pl.Expr]:
    """Each string or list-of-string column, by name, as one string per row."""
    exprs = {}
    for field in schema:
        if pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
            exprs[field.name] = pl.col(field.name).fill_null("")
        elif pa.types.is_list(field.type) and pa.types.is_string(field.type.value_type):
            exprs[field.name] = pl.col(field.name).list.join("\n").fill_null("")
    return exprs


def _spelled(values: Iterable[str]) -> dict[str, str]:
    """Each value as stored and as a JSON string body (how a JSON column holds it) -> value."""
    return {
        spelling: v
        for v in values
        for spelling in (v, json.dumps(v)[1:-1], json.dumps(v, ensure_ascii=False)[1:-1])
    }


def _found(table: pa.Table, values: Iterable[str]) -> set[str]:
    """Which of ``values`` occur (as substrings) in any text cell of ``table``."""
    spelled = _spelled(values)
    exprs = _text_columns(table.schema)
    if not spelled or not exprs or table.num_rows == 0:
        return set()
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    patterns = sorted(spelled)
    found: set[str] = set()
    for expr in exprs.values():
        column = frame.select(expr.alias("t")).get_column("t")
        hits = column.filter(column.str.contains_any(patterns))
        if hits.len():
            matched = hits.str.extract_many(patterns, overlapping=True).explode().drop_nulls()
            found.update(spelled[m] for m in matched.unique().to_list())
    return found


def only_theirs(stores: Stores, target_where: str, values: Iterable[str]) -> list[str]:
    """``values`` that no episode outside ``target_where`` holds, at most ``MAX_VALUES``.

    Read in batches, so a million other episodes cost time but not memory, and the pass
    stops as soon as every value has been seen elsewhere."""
    wanted = set(values)
    if not wanted or "episodes" not in stores.lance.table_names():
        return []
    batches = stores.lance.scan_batches(
        "episodes", columns=list(_EPISODE_TEXT), where=f"({target_where}) IS NOT TRUE"
    )
    for batch in batches:
        wanted -= _found(pa.Table.from_batches([batch]), wanted)
        if not wanted:
            return []
    return sorted(wanted)[:MAX_VALUES]


def values_left(stores: Stores, values: list[str]) -> dict[str, int]:
    """Rows still holding one of ``values``: {``lance.<table>``/``duckdb.<table>``: rows}.

    Every Lance table but ``episodes`` (the target's are deleted and no other holds the
    values, by ``only_theirs``; an episode stored since then is another subject's input,
    not residue), at its current version (older ones are purged, and checked for the
    target's rows by the deletion's version scan), and every DuckDB text column."""
    if not values:
        return {}
    left: dict[str, int] = {}
    patterns = sorted(_spelled(values))
    existing = set(stores.lance.table_names())
    for name in TABLES:
        if name == "episodes" or name not in existing:
            continue
        schema = stores.lance.table(name).schema
        exprs = _text_columns(schema)
        if not exprs:
            continue
        frame = pl.from_arrow(stores.lance.scan(name, columns=list(exprs)))
        assert isinstance(frame, pl.DataFrame)
        if frame.height == 0:
            continue
        holding = int(
            frame.select(pl.any_horizontal([e.str.contains_any(patterns) for e in exprs.values()]))
            .to_series()
            .sum()
        )
        if holding:
            left[f"lance.{name}"] = holding
    for table, rows in duckdb_values_left(stores.meta, values).items():
        left[f"duckdb.{table}"] = rows
    return left
