"""Independent scans of everything a home stores: every Lance table at every reachable version,
and every DuckDB table, cell by cell.

Why independent: deletion verifies itself (``forget/user_deletion._verify``) and redaction counts
what it redacted; an evaluation that trusted those reports would only measure that they agree
with themselves. These scans read the stores raw and search for the needles (planted secret
values, a forgotten subject's ids and texts) in every string column, whatever it is called.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc

from memory_core.stores import Stores
from memory_core.stores.forgetting import literal_pattern, table_columns
from memory_core.stores.lance import sql_quote
from memory_core.stores.schemas import TABLES

__all__ = ["ScanResult", "scan_for_needles", "subject_residue"]


@dataclass
class ScanResult:
    """Rows holding a needle, per place (``lance.<table>@v<version>`` or ``duckdb.<table>``)."""

    hits: dict[str, int] = field(default_factory=dict)
    versions_scanned: int = 0
    duckdb_tables_scanned: int = 0

    @property
    def total(self) -> int:
        return sum(self.hits.values())


def _is_text(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _string_columns(table: pa.Table) -> list[str]:
    """String columns, and lists of strings (a procedure's steps, an episode's actions)."""
    return [
        f.name
        for f in table.schema
        if _is_text(f.type) or (pa.types.is_list(f.type) and _is_text(f.type.value_type))
    ]


def _pattern(needles: list[str]) -> str:
    """One RE2 alternation of the literal needles: one pass per column, however many."""
    return literal_pattern(needles)


def _mask(table: pa.Table, pattern: str) -> pa.Array | None:
    mask = None
    for name in _string_columns(table):
        column = table.column(name)
        if pa.types.is_list(column.type):
            column = pc.binary_join(column, "\x1f")
        hit = pc.match_substring_regex(pc.fill_null(column, ""), pattern)
        mask = hit if mask is None else pc.or_(mask, hit)
    return mask


def _lance_versions(stores: Stores) -> Iterable[tuple[str, int, Any]]:
    for name in TABLES:
        if name not in stores.lance.table_names():
            continue
        uri = stores.lance.table(name).to_lance().uri
        options = stores.lance.storage_options or None
        for info in lance.dataset(uri, storage_options=options).versions():
            version = info["version"]
            yield name, version, lance.dataset(uri, version=version, storage_options=options)


def _duckdb_tables(stores: Stores) -> list[tuple[str, list[str]]]:
    with stores.meta.connect() as con:
        tables = table_columns(con)
    return [(name, [c for c, _ in columns]) for name, columns in tables]


def scan_for_needles(
    stores: Stores,
    needles: Iterable[str],
    *,
    where: dict[str, str] | None = None,
    duckdb_where: str | None = None,
) -> ScanResult:
    """Rows, in any Lance version or DuckDB table, whose string cells contain a needle.

    ``where`` ({table: Lance filter}) additionally counts rows matching the filter in every
    version of that table, needle or not; ``duckdb_where`` (SQL over a table's columns) counts
    rows of every DuckDB table that has all the columns it names (``subject_id``,
    ``tenant_id``): how a forgotten subject's own rows are looked for.
    """
    wanted = sorted({n for n in needles if n})
    where = where or {}
    result = ScanResult()
    pattern = _pattern(wanted)
    for name, version, ds in _lance_versions(stores):
        result.versions_scanned += 1
        columns = [f.name for f in ds.schema if f.name != "vector"]
        table = ds.to_table(columns=columns)
        count = 0
        if wanted and table.num_rows:
            mask = _mask(table, pattern)
            count = int(pc.sum(mask).as_py() or 0) if mask is not None else 0
        if name in where:
            count += ds.count_rows(filter=where[name])
        if count:
            result.hits[f"lance.{name}@v{version}"] = count
    tables = _duckdb_tables(stores)
    with stores.meta.connect() as con:
        for name, columns in tables:
            result.duckdb_tables_scanned += 1
            count = 0
            if duckdb_where is not None and {"subject_id", "tenant_id"} <= set(columns):
                count += con.execute(
                    f'SELECT count(*) FROM "{name}" WHERE {duckdb_where}'
                ).fetchall()[0][0]
            if not wanted:
                if count:
                    result.hits[f"duckdb.{name}"] = int(count)
                continue
            cells = ", ".join(f"coalesce(CAST(\"{c}\" AS VARCHAR), '')" for c in columns)
            count += con.execute(
                f'SELECT count(*) FROM "{name}" '
                f"WHERE regexp_matches(concat_ws(chr(31), {cells}), ?)",
                [pattern],
            ).fetchall()[0][0]
            if count:
                result.hits[f"duckdb.{name}"] = int(count)
    return result


def subject_residue(
    stores: Stores,
    *,
    tenant_id: str,
    subject_id: str,
    episode_ids: list[str],
    texts: list[str],
    values: Sequence[str] = (),
    min_text_chars: int = 24,
) -> ScanResult:
    """What is left of a forgotten subject: its rows (by subject and tenant) in any Lance
    version, and any cell anywhere holding one of its episode ids (JSON-quoted, so ``a:1`` does
    not match ``a:10``), one of its texts (those long enough to be distinctive) or one of the
    identifying values only it gave (``stages/forget/subject_values.py``: a device, a
    reservation id in its tool calls)."""
    needles = [json.dumps(i) for i in episode_ids]
    needles += [t for t in texts if t and len(t) >= min_text_chars]
    needles += [v for v in values if v]
    own = f"subject_id = {sql_quote(subject_id)} AND tenant_id = {sql_quote(tenant_id)}"
    where = {name: own for name in TABLES}
    if episode_ids:  # Lance id columns hold ids unquoted
        ids = ", ".join(sql_quote(i) for i in episode_ids)
        where["episodes"] = f"({own}) OR episode_id IN ({ids})"
    return scan_for_needles(stores, needles, where=where, duckdb_where=own)
