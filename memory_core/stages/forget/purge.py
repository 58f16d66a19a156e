"""Purge primitives: hard-delete Lance rows together with their traces in DuckDB.

Shared by every path that deletes for good (expiry past its grace period, compaction of
episodes into digests, user deletion), so they live here rather than in one of them. A delete
reaches DuckDB first (memberships, access stats, cached vectors of the row's text), then Lance:
if the Lance delete fails, a rerun finds the rows again and converges. Lineage edges stay, so
promoted knowledge keeps naming the evidence it rests on.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import pyarrow as pa

from memory_core.context import RunContext
from memory_core.embed import text_hash
from memory_core.models import embedding_text_of
from memory_core.stores import Stores
from memory_core.stores import forgetting as fstore
from memory_core.stores.filters import in_list
from memory_core.stores.schemas import ID_COLUMN

__all__ = ["IN_CHUNK", "Deleted", "delete_records", "delete_where", "text_hashes_of"]

logger = logging.getLogger(__name__)

IN_CHUNK = 2000  # ids per IN list: one Lance commit per chunk, filters of bounded length
_TEXT_COLUMNS = ["episode_id", "goal", "actions", "conditions", "text", "feedback"]


@dataclass
class Deleted:
    ids: list[str]
    text_hashes: list[str]
    control_plane: dict[str, int]


def text_hashes_of(name: str, rows: pa.Table) -> list[str]:
    """Embedding-cache keys of rows, recomputed exactly as ingest computed them."""
    if rows.num_rows == 0:
        return []
    if name != "episodes":
        return [text_hash(t) for t in rows.column("text").to_pylist() if t]
    out = []
    for row in rows.select(_TEXT_COLUMNS).to_pylist():
        conditions = json.loads(row["conditions"]) if row["conditions"] else {}
        text = embedding_text_of(row["episode_id"], row["goal"], row["actions"], conditions,
                                 row["text"], row["feedback"])  # fmt: skip
        out.append(text_hash(text))
    return out


def delete_where(
    stores: Stores, name: str, where: str, *, ctx: RunContext, folded: bool = False
) -> Deleted:
    """Hard-delete matching rows of one table (one Lance commit) and their DuckDB traces.

    ``folded``: the rows' content was folded into a digest (see ``purge_record_rows``)."""
    cache = _cache_in_use(stores)  # else the texts are not even read: nothing to key
    texts = (_TEXT_COLUMNS[1:] if name == "episodes" else ["text"]) if cache else []
    rows = stores.lance.scan(name, where=where, columns=[ID_COLUMN[name], *texts])
    if rows.num_rows == 0:
        return Deleted([], [], {})
    ids = rows.column(ID_COLUMN[name]).to_pylist()
    hashes = text_hashes_of(name, rows) if cache else []
    # DuckDB first: if the Lance delete then fails, a rerun finds the rows again and converges.
    with stores.meta.transaction() as con:
        counts = fstore.purge_record_rows(con, record_ids=ids, text_hashes=hashes, folded=folded)
    stores.lance.delete(name, where)
    logger.debug("deleted %d rows of %s run=%s", len(ids), name, ctx.run_id)
    return Deleted(ids, hashes, counts)


def delete_records(
    stores: Stores, name: str, ids: list[str], *, ctx: RunContext, folded: bool = False
) -> Deleted:
    """Hard-delete rows by id (chunked filters, so one commit per chunk)."""
    total = Deleted([], [], {})
    unique = sorted(set(ids))
    for start in range(0, len(unique), IN_CHUNK):
        part = delete_where(
            stores,
            name,
            in_list(ID_COLUMN[name], unique[start : start + IN_CHUNK]),
            ctx=ctx,
            folded=folded,
        )
        total.ids += part.ids
        total.text_hashes += part.text_hashes
        for key, value in part.control_plane.items():
            total.control_plane[key] = total.control_plane.get(key, 0) + value
    return total


def _cache_in_use(stores: Stores) -> bool:
    with stores.meta.connect() as con:
        row = con.execute("SELECT count(*) > 0 FROM embedding_cache").fetchone()
    return bool(row and row[0])
