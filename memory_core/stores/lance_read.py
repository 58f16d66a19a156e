"""Read-only scans of the Lance tables through pylance alone, without lancedb.

Why: the partition workers (stages/consolidate_pool.py) only scan the episodes table; opening
it through ``LanceStore`` imported lancedb in each worker, ~3 CPU s of its start here (pylance
alone: ~0.4), paid by every worker of every night (BENCHMARKS.md s31, s32). ``LanceStore.scan``
reads through the same pylance dataset (``Table.to_lance()``), and with lancedb's
``read_consistency_interval=0`` at the latest version, as a dataset opened per scan here is: the
same rows in the same order.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from memory_core.errors import StoreError
from memory_core.stores.lance import LanceStore
from memory_core.stores.schemas import TABLES

__all__ = ["LanceReader", "table_uri"]


def table_uri(uri: str, name: str) -> str:
    """Where lancedb keeps table ``name`` of the database at ``uri`` (``<uri>/<name>.lance``)."""
    return f"{uri.rstrip('/')}/{name}.lance"


class LanceReader(LanceStore):
    """``LanceStore``'s reads (``scan``, ``count``, ``vector_dim``) without lancedb (they go
    through ``_dataset`` and ``_schema``, which this class opens with pylance); anything
    else (writes, indices, lancedb's table handles) raises: a worker that needs them must
    open a ``LanceStore``."""

    def __init__(self, uri: str, *, storage_options: dict[str, str] | None = None) -> None:
        # no super().__init__: that is the lancedb import and connect this class avoids
        self.uri = uri
        self.storage_options = dict(storage_options or {})
        self._dims: dict[str, int] = {}
        self._datasets: dict[str, Any] = {}

    def _open_dataset(self, name: str) -> Any:
        import lance

        if name not in TABLES:
            msg = f"unknown table {name!r}; tables are {', '.join(TABLES)}"
            raise StoreError(msg)
        try:
            return lance.dataset(
                table_uri(self.uri, name), storage_options=self.storage_options or None
            )
        except ValueError as exc:
            msg = f"table {name!r} does not exist at {self.uri}; run `memctl init` first"
            raise StoreError(msg) from exc

    @property
    def db(self) -> Any:  # LanceStore's lancedb connection: listing, creating tables
        msg = "LanceReader reads only (scan, count, vector_dim); this needs a LanceStore"
        raise StoreError(msg)

    def table(self, name: str) -> Any:
        msg = f"LanceReader reads only (scan, count, vector_dim); {name!r} needs a LanceStore"
        raise StoreError(msg)

    def _schema(self, name: str) -> pa.Schema:
        return self._dataset(name).schema

    def count(self, name: str, where: str | None = None) -> int:
        return int(self._dataset(name).count_rows(filter=where))
