"""memory_save's write path: episodes through ingest's validation and write gate, into Lance.

The same rules as ``memctl ingest`` (contract fields, pydantic validation, secret redaction,
claims of agents and tools stripped of authority) come from the same code: the line goes
through ``ingest_fast.process_chunk`` and becomes a row with ingest's own column rules. What
differs is what a save must never do: wait for the pipeline.

* No DuckDB on the save's path. The nightly flow holds the DuckDB file for seconds at a time
  (one process's read-write connection locks it against every other, STACK-NOTES), so the
  save never embeds with the cache and queues its audit entry (counts only, no ids or
  content) in ``AuditSpool``, which writes it to the audit log when the file is free.
* No model on the save's path either (``embed.at_ingest = false``, the default): a record
  without a vector is stored with none; the full-text leg finds it at once, the vector leg
  once ``memctl embed`` or the nightly's embed task has filled it.
* One Lance append per save (a text, or a conversation's episodes), after checking the ids
  (one server process saves one at a time, so the same id is never appended twice), retried
  on commit conflicts: a consolidation or forgetting pass committing to the episodes table at
  the same moment makes the save retry, never fail or vanish (compaction keeps appended rows).
* The episode id is the server's: a hash of the tenant, the subject and the caller's key (or
  the content), so a caller can neither collide with another tenant's ids nor learn of them.
* The row is marked as written through MCP: its provenance names ``mcp`` and the client.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from memory_core.embed import Embedder
from memory_core.errors import MemoryCoreError, MemoryUnavailable, StoreError
from memory_core.models import canonical_json, stable_id
from memory_core.stages.ingest.blocks import process_chunk
from memory_core.stages.ingest.stage import _episode_rows
from memory_core.stores.commit_retry import is_commit_conflict
from memory_core.stores.lance import LanceStore, sql_quote

__all__ = ["AuditSpool", "SaveRefused", "SaveResult", "episode_id_for", "save_episodes"]

logger = logging.getLogger(__name__)


class SaveRefused(MemoryCoreError):
    """The episode is invalid or conflicts with a stored one; nothing was written."""


@dataclass(frozen=True)
class SaveResult:
    episode_ids: list[str]
    inserted: int
    unchanged: int
    redactions: dict[str, int]
    claims_without_authority: int
    attempts: int

    @property
    def status(self) -> str:
        return "inserted" if self.inserted else "unchanged"

    def as_dict(self) -> dict[str, Any]:
        return {
            "episode_id": self.episode_ids[-1],
            "episode_ids": self.episode_ids,
            "status": self.status,
            "inserted": self.inserted,
            "unchanged": self.unchanged,
            "tentative": True,
            "redactions": self.redactions,
            "claims_without_authority": self.claims_without_authority,
            "commit_attempts": self.attempts,
        }


def episode_id_for(tenant_id: str, subject_id: str, key: str | None, record: dict[str, Any]) -> str:
    """The server-made id: same key (or same content when there is none) -> same id."""
    basis = key if key is not None else canonical_json(record)
    return stable_id("mcp", tenant_id, subject_id, basis)


def _commit(lance: LanceStore, rows: pa.Table, *, retries: int) -> int:
    """One append, with backoff on commit conflicts; returns the attempts used.

    An append, not ``merge_insert``: the ids were checked just before (under the caller's
    lock), and a merge joins against every stored id, a cost that grows with the table
    (measured in bench/mcp.py), while an append costs the same at any size and does not
    conflict with other appends.
    """
    delay = 0.02
    table = lance.table("episodes")
    rows = rows.select(table.schema.names).cast(table.schema)
    for attempt in range(1, retries + 2):
        try:
            table.add(rows, on_bad_vectors="null")  # a null vector: not embedded yet
            return attempt
        except (OSError, RuntimeError, ValueError) as exc:
            if attempt > retries or not is_commit_conflict(exc):
                raise MemoryUnavailable(lance.uri, f"writing the episode failed: {exc}") from exc
            logger.debug("save: commit conflict (attempt %d), retrying: %s", attempt, exc)
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
    raise AssertionError  # unreachable: the loop returns or raises


def _stored_hashes(lance: LanceStore, ids: list[str]) -> dict[str, str]:
    where = f"episode_id IN ({', '.join(sql_quote(i) for i in ids)})"
    try:
        stored = lance.scan("episodes", where=where, columns=["episode_id", "content_hash"])
    except StoreError as exc:
        raise MemoryUnavailable(lance.uri, str(exc)) from exc
    except (OSError, RuntimeError) as exc:
        raise MemoryUnavailable(lance.uri, f"reading the episodes table failed: {exc}") from exc
    return dict(
        zip(
            stored.column("episode_id").to_pylist(),
            stored.column("content_hash").to_pylist(),
            strict=True,
        )
    )


def save_episodes(
    lance: LanceStore,
    embedder: Embedder,
    records: list[dict[str, Any]],
    *,
    now: datetime,
    client: str,
    retries: int,
    embed_now: bool = False,
) -> SaveResult:
    """Validate, gate and append ``records`` (contract fields, ids set) in one commit; all or
    nothing: one bad record and none is written. Records without a vector are stored without
    one (``memctl embed`` / the nightly fills it) unless ``embed_now`` (``embed.at_ingest``)."""
    lines = [json.dumps(r, ensure_ascii=False, default=str) for r in records]
    chunk = process_chunk(lines, 1, dim=embedder.dim, now=now, parser=None, keep_bad=False)
    if chunk.errors:
        first = chunk.errors[0]
        where = f"episode {first.line} of {len(lines)}: " if len(lines) > 1 else ""
        more = f" (and {len(chunk.errors) - 1} more)" if len(chunk.errors) > 1 else ""
        msg = f"invalid episode: {where}{first.field}: {first.reason}{more}; nothing was written"
        raise SaveRefused(msg)
    table = chunk.table
    ids = table.column("episode_id").to_pylist()
    hashes = table.column("content_hash").to_pylist()
    stored = _stored_hashes(lance, ids)
    clash = [i for i, h in zip(ids, hashes, strict=True) if i in stored and stored[i] != h]
    if clash:
        msg = (
            f"episode {clash[0]} is already saved with other content (episodes are "
            "immutable); save the changed event under a new key"
        )
        raise SaveRefused(msg)
    redactions = dict(sorted(chunk.redactions.items()))
    blocked = sum(int(b or 0) for b in table.column("_blocked").to_pylist())
    fresh = np.array([i not in stored for i in ids])
    if not fresh.any():
        return SaveResult(ids, 0, len(ids), redactions, blocked, 0)
    need = fresh & ~chunk.has_vector
    if embed_now and need.any():
        texts = table.column("_embed_text").to_pylist()
        todo = [int(i) for i in np.flatnonzero(need)]
        vectors = embedder.embed([texts[i] or ids[i] for i in todo])
        for n, i in enumerate(todo):
            chunk.vectors[i] = np.asarray(vectors[n], dtype=np.float32)
        chunk.has_vector[need] = True
    schema = lance.table("episodes").schema
    rows = _episode_rows(
        table.filter(pa.array(fresh)), chunk.vectors[fresh], embedder, schema,
        embedded=chunk.has_vector[fresh],
    )  # fmt: skip
    marker = canonical_json([{"source_id": "mcp", "source_kind": "mcp", "client": client}])
    index = rows.schema.get_field_index("provenance")
    column = pa.array([marker] * rows.num_rows, pa.string())
    rows = rows.set_column(index, rows.schema.field(index), column)
    attempts = _commit(lance, rows, retries=retries)
    inserted = int(fresh.sum())
    return SaveResult(ids, inserted, len(ids) - inserted, redactions, blocked, attempts)


@dataclass
class _Pending:
    counts: Counter[str] = field(default_factory=Counter)
    redactions: Counter[str] = field(default_factory=Counter)
    first_at: datetime | None = None


class AuditSpool:
    """Audit entries of saves, written to DuckDB when its file is free, never on the save's path.

    Entries are aggregated per (client, tenant): counts only (episodes inserted, unchanged,
    redactions, claims stripped of authority), no ids and no content, so there is nothing in
    them a later deletion would have to scrub. A background thread tries every ``interval_s``
    without waiting for the lock; ``close`` tries once more. Entries not yet written when the
    process dies are lost: the episodes themselves are already durable in Lance.
    """

    def __init__(self, meta_path: Path, *, interval_s: float = 2.0) -> None:
        self.meta_path = Path(meta_path)
        self.interval_s = interval_s
        self._pending: dict[tuple[str, str], _Pending] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, *, client: str, tenant_id: str, result: SaveResult, at: datetime) -> None:
        with self._lock:
            entry = self._pending.setdefault((client, tenant_id), _Pending())
            entry.counts["saves"] += 1
            entry.counts["episodes"] += len(result.episode_ids)
            entry.counts["inserted"] += result.inserted
            entry.counts["unchanged"] += result.unchanged
            entry.counts["claims_without_authority"] += result.claims_without_authority
            entry.redactions.update(result.redactions)
            entry.first_at = entry.first_at or at
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="memctl-mcp-audit", daemon=True
                )
                self._thread.start()

    def pending(self) -> int:
        with self._lock:
            return sum(p.counts["episodes"] for p in self._pending.values())

    def flush(self) -> bool:
        """Write what is pending if the metadata file is free now; True when nothing is left."""
        with self._lock:
            batch, self._pending = self._pending, {}
        if not batch:
            return True
        if not self.meta_path.exists():  # no control plane yet: keep them for later
            self._requeue(batch)
            return False
        from memory_core.stores.audit import record_audit
        from memory_core.stores.meta import MetaStore

        try:
            meta = MetaStore(self.meta_path, lock_timeout_s=0.0)
            with meta.transaction() as con:
                for (client, tenant_id), entry in batch.items():
                    record_audit(
                        con, at=entry.first_at or datetime.now().astimezone(), action="mcp_save",
                        actor=f"mcp:{client}", target="mcp", tenant_id=tenant_id,
                        counts={**entry.counts, "redactions": sum(entry.redactions.values())},
                    )  # fmt: skip
        except Exception as exc:  # locked by the pipeline, or any DuckDB error: retry later
            logger.debug("mcp audit: not written yet (%s)", exc)
            self._requeue(batch)
            return False
        return True

    def _requeue(self, batch: dict[tuple[str, str], _Pending]) -> None:
        with self._lock:
            for key, entry in batch.items():
                mine = self._pending.setdefault(key, _Pending())
                mine.counts.update(entry.counts)
                mine.redactions.update(entry.redactions)
                mine.first_at = min(
                    (t for t in (mine.first_at, entry.first_at) if t is not None), default=None
                )

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.flush()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.flush()
