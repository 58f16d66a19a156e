"""Bulk embedding of episodes stored without a vector, off ingest's write path.

Ingest used to embed every vector-less episode before writing it (MiniLM: ~90 texts/s on two
cores, so a day of 2M transcript messages took hours before anything was readable). Now ingest
writes at once and this stage catches up: it reads the pending rows in batches of
``embed.embed_batch_rows`` (the embedding text recomputed from the stored, already redacted
columns exactly as ingest computed it, so cache keys and purge's cache cleanup agree), looks
each text up in the embedding cache, embeds only the misses in one call per batch, and writes
``vector`` + ``embedding_version`` of the batch in one Lance commit (``fill_vectors``:
update of those two columns only, where the vector is still null).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from memory_core.config import Settings
from memory_core.context import RunContext
from memory_core.embed import Embedder, text_hash
from memory_core.errors import EmbedderMismatch
from memory_core.models import Episode
from memory_core.stores import Stores
from memory_core.stores.audit import record_audit
from memory_core.stores.embed_cache import cached_vectors, store_vectors
from memory_core.stores.lance import sql_quote

__all__ = ["EmbedResult", "cached_embeddings", "embed_episodes", "pending_embedding"]

logger = logging.getLogger(__name__)

PENDING = "vector IS NULL"
_TEXT_COLUMNS = ["episode_id", "goal", "actions", "conditions", "text", "feedback"]


@dataclass
class EmbedResult:
    pending_before: int = 0
    embedded: int = 0  # rows given a vector
    model_calls: int = 0  # texts the model embedded (cache misses)
    cache_hits: int = 0
    commits: int = 0
    seconds: float = 0.0
    embedding_version: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "pending_before": self.pending_before,
            "embedded": self.embedded,
            "model_calls": self.model_calls,
            "cache_hits": self.cache_hits,
            "commits": self.commits,
            "seconds": round(self.seconds, 3),
            "embedding_version": self.embedding_version,
        }


def pending_embedding(stores: Stores, where: str | None = None) -> int:
    """How many episodes (matching ``where``) still have no vector.

    Every writer leaves ``embedding_version`` empty where it leaves the vector null (ingest,
    compaction; ``fill_vectors`` sets both), so the count filters on that small column and
    reads vectors only for its matches; the vector's own null decides. ``vector IS NULL``
    alone reads every vector (1M rows: ~1-2 s against ~0.08 s; see stages/partitions.py),
    and the nightly asks this every night, when the answer is nearly always 0."""
    if "episodes" not in stores.lance.table_names():
        return 0
    cheap = f"embedding_version = '' AND ({where})" if where else "embedding_version = ''"
    return (
        stores.lance.scan("episodes", where=cheap, columns=["vector"]).column("vector").null_count
    )


def _where(where: str | None) -> str:
    return f"({PENDING}) AND ({where})" if where else PENDING


def embedding_texts(rows: pa.Table) -> list[str]:
    """The text ingest would have embedded for each stored episode row."""
    out = []
    for row in rows.select(_TEXT_COLUMNS).to_pylist():
        conditions = json.loads(row["conditions"]) if row["conditions"] else {}
        episode = Episode.model_construct(**{**row, "conditions": conditions})
        out.append(episode.embedding_text())
    return out


def _check_home(stores: Stores, embedder: Embedder) -> None:
    """Vectors of one model per home: refuse to mix in another model's (as ingest does)."""
    other = stores.lance.scan(
        "episodes",
        columns=["embedding_version"],
        where=f"embedding_version != {sql_quote(embedder.version)} AND embedding_version != ''",
        limit=1,
    )
    if other.num_rows:
        table, home = "episodes", other.column("embedding_version")[0].as_py()
        raise EmbedderMismatch(table, home, embedder.version)


def embed_episodes(
    stores: Stores,
    settings: Settings,
    ctx: RunContext,
    *,
    embedder: Embedder,
    where: str | None = None,
    limit: int | None = None,
) -> EmbedResult:
    """Give every pending episode (matching ``where``; at most ``limit``) its vector."""
    started = time.perf_counter()
    result = EmbedResult(embedding_version=embedder.version)
    if "episodes" not in stores.lance.table_names():
        return result
    stores.lance.ensure_tables(embedder.dim, embedder=embedder.version)
    filt = _where(where)
    result.pending_before = pending_embedding(stores, where)
    if not result.pending_before:
        return result
    _check_home(stores, embedder)
    batch = settings.embed.embed_batch_rows
    todo = result.pending_before if limit is None else min(limit, result.pending_before)
    while result.embedded < todo:
        rows = stores.lance.scan(
            "episodes", where=filt, columns=_TEXT_COLUMNS, limit=min(batch, todo - result.embedded)
        )
        if not rows.num_rows:
            break
        vectors = _vectors(stores, embedder, embedding_texts(rows), ctx, result)
        flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1))
        update = pa.table(
            {
                "episode_id": rows.column("episode_id"),
                "embedding_version": pa.repeat(embedder.version, rows.num_rows),
                "vector": pa.FixedSizeListArray.from_arrays(flat, embedder.dim),
            }
        )
        stores.lance.fill_vectors("episodes", update)
        result.embedded += rows.num_rows
        result.commits += 1
    result.seconds = time.perf_counter() - started
    with stores.meta.transaction() as con:
        record_audit(
            con, at=ctx.now, action="embed", run_id=ctx.run_id, actor=ctx.actor,
            target="episodes",
            counts={"embedded": result.embedded, "model_calls": result.model_calls,
                    "cache_hits": result.cache_hits},
        )  # fmt: skip
    logger.info(
        "embed run=%s embedded=%d model_calls=%d cache_hits=%d in %.1fs",
        ctx.run_id, result.embedded, result.model_calls, result.cache_hits, result.seconds,
    )  # fmt: skip
    return result


def cached_embeddings(
    stores: Stores, embedder: Embedder, texts: list[str], ctx: RunContext
) -> tuple[np.ndarray, int]:
    """Vectors of ``texts`` (in order) and how many the model computed: the content cache
    first, the model once per distinct missing text, whose vectors are then cached. Ingest
    (``embed.at_ingest``) and this stage share it, so both give a text the same vector."""
    hashes = [text_hash(t) for t in texts]
    cached = cached_vectors(stores.meta, hashes, embedder.version)
    missing = sorted({h: t for h, t in zip(hashes, texts, strict=True) if h not in cached}.items())
    fresh: dict[str, np.ndarray] = {}
    if missing:
        vectors = embedder.embed([t for _, t in missing])
        fresh = {h: vectors[i] for i, (h, _) in enumerate(missing)}
        store_vectors(stores.meta, fresh, embedder.version, ctx.now)
    lookup = {**cached, **fresh}
    stacked = np.stack([lookup[h] for h in hashes]) if hashes else np.zeros((0, embedder.dim))
    return stacked, len(fresh)


def _vectors(
    stores: Stores, embedder: Embedder, texts: list[str], ctx: RunContext, result: EmbedResult
) -> np.ndarray:
    vectors, computed = cached_embeddings(stores, embedder, texts, ctx)
    result.model_calls += computed
    result.cache_hits += len(texts) - computed
    return vectors
