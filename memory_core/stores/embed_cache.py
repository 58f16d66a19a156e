"""Embedding cache keyed by (text hash, embedding version): embed what is new, once."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pyarrow as pa

from memory_core.stores.meta import MetaStore

__all__ = ["cached_vectors", "store_vectors"]


def cached_vectors(meta: MetaStore, hashes: list[str], version: str) -> dict[str, np.ndarray]:
    if not hashes:
        return {}
    keys = pa.table({"content_hash": pa.array(sorted(set(hashes)), pa.string())})
    with meta.connect() as con:
        con.register("wanted", keys)
        rows = con.execute(
            "SELECT c.content_hash, c.vector FROM embedding_cache c "
            "JOIN wanted w USING (content_hash) WHERE c.embedding_version = ?",
            [version],
        ).fetchall()
    return {h: np.asarray(v, dtype=np.float32) for h, v in rows}


def store_vectors(
    meta: MetaStore, vectors: dict[str, np.ndarray], version: str, at: datetime
) -> None:
    if not vectors:
        return
    hashes = list(vectors)
    dim = len(next(iter(vectors.values())))
    flat = np.stack([vectors[h] for h in hashes]).astype(np.float32).reshape(-1)
    table = pa.table(
        {
            "content_hash": pa.array(hashes, pa.string()),
            "embedding_version": pa.array([version] * len(hashes), pa.string()),
            "vector": pa.ListArray.from_arrays(
                pa.array(np.arange(0, len(flat) + 1, dim, dtype=np.int32)), pa.array(flat)
            ),
            "created_at": pa.array([at] * len(hashes), pa.timestamp("us", tz="UTC")),
        }
    )
    with meta.transaction() as con:
        con.register("incoming", table)
        con.execute("INSERT INTO embedding_cache SELECT * FROM incoming ON CONFLICT DO NOTHING")
