"""Nightly Lance maintenance of the tables forgetting changed (and index upkeep of all).

A layout grouped by tenant and subject (``stores/layout.py``: regrouped once fresh, mixed
fragments make a subject's deletion rewrite more than ``forget.layout_max_share`` of a table),
compaction that materializes deletions, pruning of versions older than
``forget.version_retention_hours``, index refresh, and a vector index built once a table is
large enough (never a big one nightly; see ``stores/maintenance.py``).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from memory_core.config import Settings
from memory_core.stores import Stores
from memory_core.stores.layout import (
    FRAGMENT_ROWS_KEY,
    fts_in_one_segment,
    regroup,
    segment_fts,
    subject_share,
)
from memory_core.stores.maintenance import check_tags, purge_versions

logger = logging.getLogger(__name__)

__all__ = ["maintain_tables"]


def maintain_tables(
    stores: Stores, settings: Settings, tables: list[str], *, vector_index: bool = True
) -> list[dict[str, Any]]:
    """Compact, refresh indices and prune old versions of ``tables``; report per table."""
    config = settings.forget
    existing = set(stores.lance.table_names())
    names = [t for t in tables if t in existing]
    check_tags(stores.lance, names, drop=config.drop_tags)
    out = []
    for name in names:
        layout = _layout(stores, settings, name)
        stats = purge_versions(
            stores.lance,
            name,
            older_than=timedelta(hours=config.version_retention_hours),
            drop_tags=config.drop_tags,
            delete_unverified=config.delete_unverified,
        )
        stats.layout = layout
        if name in config.fts_tables:
            stats.fts_index = _fts_index(stores, name)
        if vector_index and config.vector_index_max_build_rows:
            stats.vector_index = _vector_index(stores, settings, name)
        out.append(stats.as_dict())
    return out


def _layout(stores: Stores, settings: Settings, name: str) -> dict[str, Any]:
    """Regroup ``name`` by tenant and subject when deletions would rewrite too much of it.

    Tables of at most two fragments' rows are left alone (one subject's deletion rewrites
    most of them whatever the order). A concurrent write to the same fragments makes the
    commit fail: the table stays as it was (the fragments written are unreferenced and go
    with the version cleanup) and the next maintenance tries again."""
    rows = settings.forget.layout_fragment_rows
    if not rows:
        return {}
    ds = stores.lance.table(name).to_lance()
    if ds.count_rows() <= 2 * rows:
        return {}
    before = subject_share(ds)
    out: dict[str, Any] = {"share_before": round(before.share, 4)}
    if before.share <= settings.forget.layout_max_share:
        if ds.config().get(FRAGMENT_ROWS_KEY) and fts_in_one_segment(ds):
            # grouped before full-text indices were segmented: segment them once
            out["fts_segments"] = segment_fts(ds)
            stores.lance.table(name).checkout_latest()
        return out
    try:
        out["regrouped"] = regroup(ds, rows, storage_options=stores.lance.storage_options)
    except (OSError, RuntimeError, ValueError) as exc:  # a commit conflict, reported
        logger.warning("regrouping %s failed, left as it was: %s", name, exc)
        out["error"] = str(exc).splitlines()[0][:200]
        return out
    stores.lance.table(name).checkout_latest()
    out["share_after"] = round(subject_share(stores.lance.table(name).to_lance()).share, 4)
    return out


def _fts_index(stores: Stores, name: str) -> str:
    """The read path's BM25 leg needs a full-text index: a digest is found by its sources'
    words far better than by the mean of their vectors (bench/compaction_locomo.py). Built
    once; refreshed incrementally. Only on ``forget.fts_tables``: on a 1M-row table the index
    made the TTL pass's fragment rewrites about 2.7x slower (bench/forget.py)."""
    try:
        from memory_core.read.indexes import ensure_fts
    except ImportError:  # the read path is optional for forgetting
        return "unavailable"
    return "built" if ensure_fts(stores.lance.table(name)) else "unchanged"


def _vector_index(stores: Stores, settings: Settings, name: str) -> str:
    """The read path's first vector index, once a table is big enough and still small enough."""
    try:
        from memory_core.read.indexes import ensure_vector_index
    except ImportError:  # the read path is optional for forgetting
        return "unavailable"
    done = ensure_vector_index(
        stores.lance.table(name),
        settings.recall.vector_index_min_rows,
        partitions=settings.recall.vector_index_partitions,
        max_build_rows=settings.forget.vector_index_max_build_rows,
    )
    return str(done or "unchanged")
