"""Nightly Lance maintenance of the tables forgetting changed (and index upkeep of all).

Compaction that materializes deletions, pruning of versions older than
``forget.version_retention_hours``, index refresh, and a vector index built once a table is
large enough (never a big one nightly; see ``stores/maintenance.py``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from memory_core.config import Settings
from memory_core.stores import Stores
from memory_core.stores.maintenance import check_tags, purge_versions

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
        stats = purge_versions(
            stores.lance,
            name,
            older_than=timedelta(hours=config.version_retention_hours),
            drop_tags=config.drop_tags,
            delete_unverified=config.delete_unverified,
        )
        if name in config.fts_tables:
            stats.fts_index = _fts_index(stores, name)
        if vector_index and config.vector_index_max_build_rows:
            stats.vector_index = _vector_index(stores, settings, name)
        out.append(stats.as_dict())
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
