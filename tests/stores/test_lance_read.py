"""The partition workers' Lance reads without lancedb (stores/lance_read.py): what they scan
must be what ``LanceStore`` scans, also after more rows and deletions land in the table."""

from __future__ import annotations

import pytest

from memory_core.errors import StoreError
from memory_core.stores.lance_read import LanceReader
from tests.conftest import episode, lines_of
from tests.kit.imports import packages_imported


def _reader(stores) -> LanceReader:
    return LanceReader(stores.lance.uri, storage_options=stores.lance.storage_options)


def _same_scans(stores, reader: LanceReader, wheres: list[str | None]) -> None:
    for where in wheres:
        for columns in (None, ["episode_id", "vector"], ["episode_id", "namespace", "goal"]):
            want = stores.lance.scan("episodes", where=where, columns=columns)
            got = reader.scan("episodes", where=where, columns=columns)
            assert got.equals(want), (where, columns)
        assert reader.count("episodes", where) == stores.lance.count("episodes", where)
    assert reader.scan("episodes", limit=2).equals(stores.lance.scan("episodes", limit=2))


def test_reader_scans_what_the_store_scans_at_the_latest_version(stores, ingest):
    ingest(lines_of(*[episode(episode_id=f"e{i:02d}", namespace=f"n{i % 3}") for i in range(12)]))
    reader = _reader(stores)  # opened before the next writes: each scan sees the latest rows
    wheres = [None, "namespace = 'n1'", "namespace = 'n2' AND episode_id > 'e05'"]
    _same_scans(stores, reader, wheres)
    ingest(lines_of(*[episode(episode_id=f"f{i:02d}", namespace="n1") for i in range(5)]))
    stores.lance.delete("episodes", "episode_id IN ('e01', 'e04')")
    _same_scans(stores, reader, wheres)
    assert reader.count("episodes", "namespace = 'n1'") == 7  # e01 e04 e07 e10, f00-f04, - 2
    assert reader.vector_dim("episodes") == stores.lance.vector_dim("episodes") == 384


def test_reader_refuses_what_needs_lancedb(stores, ingest):
    ingest(lines_of(episode()))
    reader = _reader(stores)
    with pytest.raises(StoreError, match="reads only"):
        reader.upsert("episodes", stores.lance.scan("episodes"))
    with pytest.raises(StoreError, match="reads only"):
        reader.table_names()
    with pytest.raises(StoreError, match="unknown table"):
        reader.scan("nope")


def test_reader_scans_without_importing_lancedb(stores, ingest):
    """The point of the reader: a worker process that scans never imports lancedb."""
    ingest(lines_of(episode()))
    code = (
        "from memory_core.stores.lance_read import LanceReader\n"
        f"rows = LanceReader({stores.lance.uri!r}).scan('episodes', columns=['episode_id'])\n"
        "assert rows.num_rows == 1, rows.num_rows\n"
    )
    assert packages_imported(code, ["lancedb"]) == []
