"""Lance tables agents read: creation with explicit schemas, scalar indices, scoped scans, upserts.

Handles are opened with ``read_consistency_interval=0`` so a long-lived reader sees other
processes' commits; every write is a single Lance commit (merge_insert, delete), so readers see
the state before or after it, never half of it (invariant 9).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pyarrow as pa

from memory_core.errors import DimensionMismatch, MemoryUnavailable, StoreError
from memory_core.stores.commit_retry import retry_on_commit_conflict
from memory_core.stores.filters import in_list, sql_quote
from memory_core.stores.schemas import FILTER_COLUMNS, ID_COLUMN, TABLES, schema_for

__all__ = ["LanceStore", "sql_quote"]

logger = logging.getLogger(__name__)


class LanceStore:
    """One LanceDB database holding episodes, facts, procedures and digests."""

    def __init__(self, uri: str, *, storage_options: dict[str, str] | None = None) -> None:
        # lancedb is imported here, when a store is opened, not with this module: its import
        # costs ~0.55 CPU s (~1 s with its REST namespace client's generated API, left out
        # until used: stores/lancedb_import.py), and processes that reach this module through
        # imports but open no store never need it (`memctl serve` and other Prefect parents,
        # commands that read only DuckDB)
        from memory_core.stores.lancedb_import import import_lancedb

        lancedb = import_lancedb()

        self.uri = uri
        self.storage_options = dict(storage_options or {})
        try:
            self.db = lancedb.connect(
                uri,
                read_consistency_interval=timedelta(0),
                storage_options=self.storage_options or None,
            )
        except Exception as exc:  # lancedb raises several types for an unreachable store
            raise MemoryUnavailable(uri, str(exc)) from exc
        self._tables: dict[str, Any] = {}
        self._dims: dict[str, int] = {}
        self._datasets: dict[str, Any] = {}

    def table_names(self) -> list[str]:
        try:
            result = self.db.list_tables()
        except Exception as exc:
            raise MemoryUnavailable(self.uri, str(exc)) from exc
        names = getattr(result, "tables", result)
        return list(names)

    def ensure_tables(self, dim: int, *, embedder: str = "") -> list[str]:
        """Create missing tables and their scalar indices; check existing ones' vector width."""
        existing = set(self.table_names())
        created: list[str] = []
        for name in TABLES:
            if name in existing:
                have = self.vector_dim(name)
                if have != dim:
                    raise DimensionMismatch(name, have or -1, embedder, dim)
                continue
            table = self.db.create_table(name, schema=schema_for(name, dim))
            self._index_scalars(table, name)
            created.append(name)
        return created

    def _index_scalars(self, table: Any, name: str) -> None:
        from lancedb.index import Bitmap, BTree  # loaded with the store (__init__)

        columns = {**FILTER_COLUMNS, ID_COLUMN[name]: "btree"}
        for column, kind in columns.items():
            config = Bitmap() if kind == "bitmap" else BTree()
            table.create_index(column, config=config, replace=True)

    def table(self, name: str) -> Any:
        if name not in TABLES:
            msg = f"unknown table {name!r}; tables are {', '.join(TABLES)}"
            raise StoreError(msg)
        if name not in self._tables:
            try:
                self._tables[name] = self.db.open_table(name)
            except ValueError as exc:
                msg = f"table {name!r} does not exist at {self.uri}; run `memctl init` first"
                raise StoreError(msg) from exc
            except Exception as exc:
                raise MemoryUnavailable(self.uri, str(exc)) from exc
        return self._tables[name]

    def vector_dim(self, name: str) -> int | None:
        """The width of the table's vector column, read once per store: no code path alters
        it after ``ensure_tables`` created the table, and reading a schema checks out the
        latest version (~18 ms at 1M episodes, twice per partition a night)."""
        if name not in self._dims:
            field = self._schema(name).field("vector")
            dim = getattr(field.type, "list_size", None)
            if dim is None:
                return None
            self._dims[name] = dim
        return self._dims[name]

    def count(self, name: str, where: str | None = None) -> int:
        return int(self.table(name).count_rows(where))

    def scan(
        self,
        name: str,
        *,
        where: str | None = None,
        columns: list[str] | None = None,
        limit: int | None = None,
    ) -> pa.Table:
        """Every matching row (at most ``limit``; no vector search); filters use the scalar
        indices."""
        return self._dataset(name).to_table(columns=columns, filter=where, limit=limit)

    def scan_batches(
        self,
        name: str,
        *,
        where: str | None = None,
        columns: list[str] | None = None,
        batch_rows: int = 65_536,
    ) -> Iterator[pa.RecordBatch]:
        """``scan`` in record batches of at most ``batch_rows``: for a pass over a whole table
        (a deletion reading every other episode's text) whose memory must not grow with it."""
        yield from self._dataset(name).to_batches(
            columns=columns, filter=where, batch_size=batch_rows
        )

    def _schema(self, name: str) -> pa.Schema:
        """The table's schema (a read-only reader, ``lance_read.py``, reads it without lancedb)."""
        return self.table(name).schema

    def _dataset(self, name: str) -> Any:
        """The table's pylance dataset at its latest version: what ``scan`` reads.

        One dataset per table, moved to the latest version when another commit landed
        (``checkout_version``, as ``recall.Recaller._snapshot`` does), instead of a new one per
        scan: a dataset opened anew loads the manifest, fragment metadata and the scalar
        indices the filter uses again, ~60 of ~150 ms CPU of one partition's mining scan at
        1M episodes (BENCHMARKS.md issue 19, s33); a version is immutable, so the same
        version reads the same rows. Threads may share it (pylance datasets are read-only
        objects; the dict holds whichever a thread stored last, at the latest version)."""
        base = self._datasets.get(name)
        if base is None:
            base = self._open_dataset(name)
        else:
            latest = base.latest_version
            if latest != base.version:
                base = base.checkout_version(latest)
        self._datasets[name] = base
        return base

    def _open_dataset(self, name: str) -> Any:
        """A new pylance dataset of the table at its latest version."""
        return self.table(name).to_lance()

    def upsert(self, name: str, rows: pa.Table) -> Any:
        """Insert rows whose id is new, replace rows whose id exists: one commit."""
        if rows.num_rows == 0:
            return None
        table = self.table(name)
        rows = rows.select(table.schema.names).cast(table.schema)
        return (
            table.merge_insert(ID_COLUMN[name])
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute(rows)
        )

    def insert_new(self, name: str, rows: pa.Table, *, null_vectors: bool = False) -> Any:
        """Insert rows whose id is new; existing ids are left exactly as they are.

        ``null_vectors``: rows may carry a null vector (episodes written before the embed
        stage ran); lancedb refuses them unless told (``on_bad_vectors``)."""
        if rows.num_rows == 0:
            return None
        table = self.table(name)
        rows = rows.select(table.schema.names).cast(table.schema)
        merge = table.merge_insert(ID_COLUMN[name]).when_not_matched_insert_all()
        return merge.execute(rows, on_bad_vectors="null") if null_vectors else merge.execute(rows)

    def fill_vectors(self, name: str, rows: pa.Table) -> Any:
        """Set ``vector`` and ``embedding_version`` of stored rows that still have no vector.

        ``rows`` holds the id, ``embedding_version`` and ``vector`` columns only. Every other
        column is taken from the row as stored, read here, and the merge only touches a row
        that still has no vector and the same status and content hash as that read (a status
        changed or text rewritten meanwhile stays as it is; the row is filled on the next
        run); ids no longer stored (deleted meanwhile) are not brought back. One commit.

        Why full rows: a merge of only these three columns (Lance's partial-schema update)
        panics inside lance once ``optimize_indices`` has run on the table (lancedb 0.40,
        "Incorrect number of arrays for StructArray fields"), which nightly maintenance does.
        """
        if rows.num_rows == 0:
            return None
        table = self.table(name)
        key = ID_COLUMN[name]
        fills = {
            row_id: (version, vector)
            for row_id, version, vector in zip(
                rows.column(key).to_pylist(),
                rows.column("embedding_version").to_pylist(),
                rows.column("vector").to_pylist(),
                strict=True,
            )
        }

        def merge_fills() -> Any:
            table.checkout_latest()  # read and merge against what is stored now
            ids = sorted(fills)
            stored = pa.concat_tables(
                [
                    self.scan(name, where=f"({in_list(key, ids[i : i + 5000])}) AND vector IS NULL")
                    for i in range(0, len(ids), 5000)
                ]
            )
            if stored.num_rows == 0:
                return None
            kept = stored.column(key).to_pylist()
            full = stored.drop_columns(["embedding_version", "vector"])
            full = full.append_column(
                "embedding_version", pa.array([fills[i][0] for i in kept], pa.string())
            ).append_column(
                "vector",
                pa.array([fills[i][1] for i in kept], table.schema.field("vector").type),
            )
            full = full.select(table.schema.names).cast(table.schema)
            return (
                table.merge_insert(key)
                .when_matched_update_all(
                    where="target.vector IS NULL AND target.status = source.status"
                    " AND target.content_hash = source.content_hash"
                )
                .execute(full)
            )

        # a save appending beside the night, or an MCP server folding its saves into the
        # indices, may commit first every time Lance retries the merge (its own loop gives up
        # after six tries in 30 s); the whole read-and-merge again, from the latest version
        return retry_on_commit_conflict(merge_fills, table=name, what="filling vectors", attempts=4)

    def delete(self, name: str, where: str) -> Any:
        return self.table(name).delete(where)

    def update(self, name: str, where: str, values: dict[str, Any]) -> Any:
        return self.table(name).update(where=where, values=values)

    def version(self, name: str) -> int:
        return int(self.table(name).version)
