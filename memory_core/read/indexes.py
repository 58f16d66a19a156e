"""Indices the read path needs, created idempotently; maintenance calls these, queries never.

- Full-text (BM25) on ``text`` so exact identifiers and error codes match (``ensure_fts``).
  Rows added after the index is built are still searched (flat) until the index is refreshed.
- A vector index only once a table is big enough to need one (``ensure_vector_index``), and
  never rebuilt: a full IVF_PQ build on 1M x 384-d takes many minutes on two cores (see
  STACK-NOTES and bench/recall.py). Existing indices take new rows incrementally
  (``refresh_indices``, or the ``optimize()`` that forgetting's compaction runs).
- Recall searches exactly over the prefiltered rows unless ``recall.vector_nprobes`` is set:
  an IVF index probes some partitions and filters afterwards, which with a scope of ~1% of
  the table kept only a fraction of the true top 10 (bench/recall.py).

Our queries are scoped to one tenant and one subject (plus tenant-scope records), so the
prefiltered set is small and a flat search over it is exact and fast; an ANN index mostly helps
wide scopes. bench/recall.py measures both.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Literal

__all__ = [
    "ensure_fts",
    "ensure_read_indexes",
    "ensure_vector_index",
    "index_kinds",
    "refresh_indices",
]

logger = logging.getLogger(__name__)

VectorIndexKind = Literal["ivf_flat", "ivf_pq", "hnsw_sq"]


def index_kinds(table: Any) -> dict[str, str]:
    """{column: index type} of ``table`` (e.g. {"text": "FTS", "vector": "IvfFlat"})."""
    return {col: str(ix.index_type) for ix in table.list_indices() for col in ix.columns}


def ensure_fts(table: Any, column: str = "text") -> bool:
    """Create the full-text index on ``column`` if it has none; True when one was built."""
    if column in index_kinds(table):
        return False
    from lancedb.index import FTS  # lancedb is loaded with the store (stores/lance.py)

    table.create_index(column, config=FTS(), replace=False)
    logger.info("built full-text index on %s.%s", table.name, column)
    return True


def ensure_vector_index(
    table: Any,
    min_rows: int,
    *,
    kind: VectorIndexKind = "ivf_flat",
    partitions: int = 0,
    max_build_rows: int | None = None,
) -> str | None:
    """Build a cosine vector index once ``table`` has ``min_rows`` rows; never rebuild one.

    Returns what was done ("exists", "too small", "too big to build here", or the index type).
    ``partitions`` 0 means about sqrt(rows), capped at 1024.
    """
    kinds = index_kinds(table)
    if "vector" in kinds:
        return "exists"
    rows = int(table.count_rows())
    if rows < min_rows:
        return "too small"
    if max_build_rows is not None and rows > max_build_rows:
        logger.warning(
            "%s has %d rows, over max_build_rows=%d: vector index not built here; "
            "build it offline (memctl index --vector) and let optimize() maintain it",
            table.name,
            rows,
            max_build_rows,
        )
        return "too big to build here"
    parts = partitions or max(1, min(1024, round(math.sqrt(rows))))
    from lancedb.index import HnswSq, IvfFlat, IvfPq  # loaded with the store (stores/lance.py)

    config: Any
    if kind == "ivf_pq":
        config = IvfPq(distance_type="cosine", num_partitions=parts)
    elif kind == "hnsw_sq":
        config = HnswSq(distance_type="cosine", num_partitions=max(1, parts // 16))
    else:
        config = IvfFlat(distance_type="cosine", num_partitions=parts)
    table.create_index("vector", config=config, replace=False)
    logger.info(
        "built %s vector index on %s (%d rows, %d partitions)", kind, table.name, rows, parts
    )
    return kind


def refresh_indices(table: Any) -> None:
    """Fold rows written since the indices were built into them (scalar, full-text, vector).

    Incremental and cheap next to compaction: it indexes the new fragments only. Without it,
    every query scans the filter columns (and tokenizes the text) of every unindexed fragment;
    bench/recall.py measures the difference after a burst of small commits.
    """
    table.to_lance().optimize.optimize_indices()


def ensure_read_indexes(
    store: Any,
    *,
    vector_min_rows: int,
    vector_partitions: int = 0,
    tables: tuple[str, ...] = ("episodes", "facts", "procedures", "digests"),
) -> dict[str, dict[str, Any]]:
    """FTS on every read table, a vector index where big enough: what each table got."""
    out: dict[str, dict[str, Any]] = {}
    for name in tables:
        table = store.table(name)
        out[name] = {
            "fts_built": ensure_fts(table),
            "vector_index": ensure_vector_index(
                table, vector_min_rows, partitions=vector_partitions
            ),
            "indices": index_kinds(table),
        }
    return out
