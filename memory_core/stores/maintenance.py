"""Lance maintenance: make deletions real, prune versions, keep indices fresh, verify.

Why this is needed (STACK-NOTES): a Lance ``delete`` only writes a deletion file; the bytes
stay in the data file until compaction rewrites that fragment, and every older version keeps
them until it is cleaned up. So a complete deletion is: delete, ``compact_files`` with
``materialize_deletions_threshold=0.0`` (rewrites every fragment that has a deleted row, and
remaps the scalar/FTS/vector indices so they drop the deleted rows), ``optimize_indices``
(folds rows appended since indexing), then ``cleanup_old_versions`` with
``older_than=timedelta(0)``. Tagged versions are never cleaned up by Lance, so they are
deleted first when ``drop_tags`` allows it, and otherwise the deletion is refused before
anything is written.

A fragment a delete removes whole is never rewritten, so compaction has nothing to remap: an
index built in one piece over it (B-tree, bitmap, a full-text index in one segment, a vector
index) keeps the deleted rows' values in its files through cleanup (ids in B-tree pages,
vectors in IVF_FLAT storage: checked on pylance 14). ``rebuild_stale_indices`` rebuilds the
scalar and full-text ones over the live rows and drops a vector index (rebuilding one can take
minutes; reads stay exact without it and maintenance builds it again).

A big vector index is never built in a nightly run (a full IVF_PQ build on 1M x 384-d did
not finish in 19 minutes here; an IVF_PQ on 90k rows took 276 s): ``optimize_indices`` only
folds new rows into the existing indices. The first vector index is the read path's
(``memory_core.read.indexes``); ``stages/forget/maintain.py`` asks it for one only below
``forget.vector_index_max_build_rows``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import lance
import pyarrow as pa

from memory_core.errors import CommitConflict, PolicyRefused
from memory_core.stores.commit_retry import retry_on_commit_conflict
from memory_core.stores.lance import LanceStore
from memory_core.stores.layout import compaction_options, fts_indices, segment_fts

__all__ = [
    "PurgeStats",
    "check_tags",
    "fold_new_rows",
    "index_health",
    "purge_versions",
    "rebuild_stale_indices",
    "scan_versions",
]

logger = logging.getLogger(__name__)


@dataclass
class PurgeStats:
    """What maintenance did to one table."""

    table: str
    fragments_rewritten: int = 0
    versions_purged: int = 0
    bytes_removed: int = 0
    tags_dropped: list[str] = field(default_factory=list)
    indices_optimized: bool = False
    indices_rebuilt: list[str] = field(default_factory=list)
    vector_index: str = "unchanged"
    fts_index: str = "unchanged"
    layout: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "fragments_rewritten": self.fragments_rewritten,
            "versions_purged": self.versions_purged,
            "bytes_removed": self.bytes_removed,
            "tags_dropped": self.tags_dropped,
            "indices_optimized": self.indices_optimized,
            "indices_rebuilt": self.indices_rebuilt,
            "vector_index": self.vector_index,
            "fts_index": self.fts_index,
            "layout": self.layout,
            "seconds": round(self.seconds, 3),
        }


def _dataset(store: LanceStore, name: str) -> lance.LanceDataset:
    # A fresh handle at the latest version: the LanceDB handle may cache an older manifest.
    table = store.table(name)
    table.checkout_latest()
    return table.to_lance()


def check_tags(store: LanceStore, names: list[str], *, drop: bool) -> dict[str, list[str]]:
    """Tags on the tables; raise before any write when they would keep forgotten rows."""
    found: dict[str, list[str]] = {}
    for name in names:
        tags = _dataset(store, name).tags.list()
        if tags:
            found[name] = sorted(tags)
    if found and not drop:
        listing = "; ".join(f"{t}: {', '.join(v)}" for t, v in sorted(found.items()))
        msg = (
            f"tagged Lance versions would keep deleted rows ({listing}); delete those tags "
            "or set forget.drop_tags = true, then retry"
        )
        what = "lance tags"
        raise PolicyRefused(what, msg)
    return found


def purge_versions(
    store: LanceStore,
    name: str,
    *,
    older_than: timedelta = timedelta(0),
    drop_tags: bool = False,
    delete_unverified: bool = False,
) -> PurgeStats:
    """Materialize deletions, refresh indices and remove old versions of one table."""
    t0 = time.perf_counter()
    stats = PurgeStats(name)
    ds = _dataset(store, name)
    if drop_tags:
        for tag in sorted(ds.tags.list()):
            ds.tags.delete(tag)
            stats.tags_dropped.append(tag)
    # the table's own fragment target (stores/layout.py): rewrite only fragments with deletions
    metrics = ds.optimize.compact_files(
        **compaction_options(ds, {"materialize_deletions_threshold": 0.0})
    )
    stats.fragments_rewritten = int(metrics.fragments_removed)
    ds = _dataset(store, name)
    stats.indices_rebuilt = rebuild_stale_indices(ds)
    if stats.indices_rebuilt:
        ds = _dataset(store, name)
    if _has_unindexed(ds):

        def optimize() -> None:
            _dataset(store, name).optimize.optimize_indices()

        retry_on_commit_conflict(optimize, table=name, what="optimizing indices")
        stats.indices_optimized = True
        ds = _dataset(store, name)
    if not (stats.fragments_rewritten or stats.indices_optimized or stats.indices_rebuilt):
        # A delete that dropped whole fragments leaves nothing to compact, so it stays the
        # latest version, and its transaction file and manifest keep the delete predicate
        # (``subject_id = '...'``) through cleanup. A config-only commit supersedes it
        # without touching data or racing writers (a restore would revert them).
        ds.update_config({"memctl.purged": "1"})
        ds = _dataset(store, name)
    cleanup = ds.cleanup_old_versions(
        older_than=older_than,
        delete_unverified=delete_unverified,
        error_if_tagged_old_versions=True,
    )
    stats.versions_purged = int(cleanup.old_versions)
    stats.bytes_removed = int(cleanup.bytes_removed)
    store.table(name).checkout_latest()
    stats.seconds = time.perf_counter() - t0
    logger.debug("purged %s: %s", name, stats.as_dict())
    return stats


def fold_new_rows(store: LanceStore, name: str, columns: list[str]) -> int:
    """Fold rows appended since indexing into the scalar indices on ``columns``; the rows
    folded (0: every index was current, nothing written).

    A filtered scan reads the filter columns of every fragment an index does not cover: on
    the 1M bench's episodes table, a night's partition scans (three per partition) cost
    ~0.06 CPU s each over a day's unindexed fragments and ~0.005 s once folded, while the
    fold itself is incremental (it indexes the new fragments only). Only the named scalar
    indices: full-text and vector indices are maintenance's (``purge_versions``)."""
    wanted = {f"{column}_idx" for column in columns}

    def fold() -> int:
        ds = _dataset(store, name)  # the latest version, again on every attempt
        stale: list[str] = []
        rows = 0
        for index in ds.describe_indices():
            if index.name not in wanted:
                continue
            unindexed = int(ds.stats.index_stats(index.name).get("num_unindexed_rows", 0))
            if unindexed:
                stale.append(index.name)
                rows = max(rows, unindexed)
        if stale:
            ds.optimize.optimize_indices(index_names=sorted(stale))
        return rows

    # An MCP server folds its saves into the same indices (``mcp.index_every``). Folding only
    # speeds up the night's scans, so a race lost every time leaves it to the next night (or
    # the server's next refresh) rather than failing the night.
    try:
        rows = retry_on_commit_conflict(fold, table=name, what="folding new rows into indices")
    except CommitConflict as exc:
        logger.warning("%s; the scans read the unindexed rows directly", exc)
        return 0
    if rows:
        store.table(name).checkout_latest()
    return rows


_SCALAR_KINDS = {"btree": "BTREE", "bitmap": "BITMAP", "inverted": "INVERTED"}


def rebuild_stale_indices(ds: lance.LanceDataset) -> list[str]:
    """Rebuild (scalar, full-text) or drop (vector) every index that still covers a fragment
    no longer in ``ds``; each as ``name:rebuilt`` or ``name:dropped``. ``ds`` moves to the
    new version (pylance commits index changes on the handle).

    A full-text index kept as one segment per fragment (``layout.segment_fts``) loses the
    segment of a removed fragment with it, so it is not stale; one whose stale segment spans
    several fragments is segmented again over the live ones (once, by ``segment_fts``)."""
    live = {f.fragment_id for f in ds.get_fragments()}
    stale = [ix for ix in ds.list_indices() if set(ix["fragment_ids"]) - live]
    if not stale:
        return []
    done: list[str] = []
    fts_params = {name: params for name, _, params in fts_indices(ds)}
    resegment = False
    for ix in stale:
        name, column, kind = ix["name"], ix["fields"][0], str(ix["type"]).lower()
        if kind == "inverted" and len(live) > 1 and _segments(ds, name) > 1:
            resegment = True  # segment_fts below rebuilds it, a segment per live fragment
        elif kind in _SCALAR_KINDS:
            extra = fts_params.get(name, {}) if kind == "inverted" else {}
            ds.create_scalar_index(column, _SCALAR_KINDS[kind], name=name, replace=True, **extra)
        else:
            ds.drop_index(name)
            done.append(f"{name}:dropped")
            continue
        done.append(f"{name}:rebuilt")
    if resegment:
        segment_fts(ds)
    logger.info("indices over removed fragments of %s: %s", ds.uri, done)
    return done


def _segments(ds: lance.LanceDataset, name: str) -> int:
    return next((len(i.segments) for i in ds.describe_indices() if i.name == name), 0)


def _has_unindexed(ds: lance.LanceDataset) -> bool:
    for index in ds.describe_indices():
        if ds.stats.index_stats(index.name).get("num_unindexed_rows", 0):
            return True
    return False


def index_health(store: LanceStore, name: str) -> dict[str, int]:
    """Per index: indexed rows minus live rows (> 0 would mean an index holds deleted rows)."""
    ds = _dataset(store, name)
    rows = ds.count_rows()
    out: dict[str, int] = {}
    for index in ds.describe_indices():
        st = ds.stats.index_stats(index.name)
        indexed = int(st.get("num_indexed_rows", 0)) + int(st.get("num_unindexed_rows", 0))
        out[index.name] = indexed - rows
    return out


def scan_versions(
    store: LanceStore, name: str, where: str, *, columns: list[str] | None = None
) -> tuple[int, pa.Table | None]:
    """(versions checked, matching rows across every reachable version) of one table."""
    ds = _dataset(store, name)
    versions = [v["version"] for v in ds.versions()]
    found: list[pa.Table] = []
    for version in versions:
        old = lance.dataset(ds.uri, version=version, storage_options=store.storage_options or None)
        hit = old.to_table(columns=columns or [_id(name)], filter=where)
        if hit.num_rows:
            found.append(hit)
    return len(versions), (pa.concat_tables(found) if found else None)


def _id(name: str) -> str:
    from memory_core.stores.schemas import ID_COLUMN

    return ID_COLUMN[name]
