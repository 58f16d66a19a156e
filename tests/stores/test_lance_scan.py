"""``LanceStore.scan`` keeps one dataset per table and moves it to the latest version
(stores/lance.py ``_dataset``): whatever lands in the table meanwhile, through this store or
another writer, and whatever maintenance rewrites, a scan must read what a store opened just
now reads."""

from __future__ import annotations

from memory_core.stages.consolidate import index_episodes
from memory_core.stores.lance import LanceStore
from memory_core.stores.lance_read import LanceReader
from memory_core.stores.maintenance import purge_versions
from tests.conftest import episode, lines_of

_WHERES = [None, "namespace = 'n1'", "namespace = 'n2' AND status = 'active'"]


def _same_as_fresh(kept: LanceStore, uri: str) -> None:
    fresh = LanceStore(uri)
    for where in _WHERES:
        for columns in (None, ["episode_id", "status", "goal"]):
            want = fresh.scan("episodes", where=where, columns=columns)
            assert kept.scan("episodes", where=where, columns=columns).equals(want)
        assert kept.count("episodes", where) == fresh.count("episodes", where)


def test_a_long_lived_store_scans_the_latest_version_after_every_kind_of_write(stores, ingest):
    ingest(lines_of(*[episode(episode_id=f"e{i:02d}", namespace=f"n{i % 3}") for i in range(12)]))
    uri = stores.lance.uri
    reader = LanceReader(uri)
    _same_as_fresh(stores.lance, uri)
    _same_as_fresh(reader, uri)
    before = stores.lance.scan("episodes", columns=["episode_id"]).num_rows

    # this store's own writes: an ingest (merge insert), a delete, an update
    ingest(lines_of(*[episode(episode_id=f"f{i:02d}", namespace="n1") for i in range(5)]))
    stores.lance.delete("episodes", "episode_id IN ('e01', 'e04')")
    stores.lance.update("episodes", "episode_id = 'e02'", {"status": "forgotten"})
    assert stores.lance.scan("episodes", columns=["episode_id"]).num_rows == before + 5 - 2
    _same_as_fresh(stores.lance, uri)
    _same_as_fresh(reader, uri)

    # another writer (another process's store) commits: both long-lived readers see it
    other = LanceStore(uri)
    other.delete("episodes", "namespace = 'n2'")
    assert stores.lance.count("episodes", "namespace = 'n2'") == 0
    assert reader.count("episodes", "namespace = 'n2'") == 0
    _same_as_fresh(stores.lance, uri)
    _same_as_fresh(reader, uri)

    # maintenance: new rows folded into the scalar indices, then compaction and old versions
    # removed (the files of the versions the kept datasets were at are gone)
    ingest(lines_of(*[episode(episode_id=f"g{i:02d}", namespace="n2") for i in range(3)]))
    assert index_episodes(stores) > 0
    _same_as_fresh(stores.lance, uri)
    purge_versions(other, "episodes")
    _same_as_fresh(stores.lance, uri)
    _same_as_fresh(reader, uri)
    assert stores.lance.count("episodes", "namespace = 'n2'") == 3
