"""The read path agents embed: hard filters first, then hybrid search, ranking and packing.

    from memory_core.recall import Recaller
    with Recaller.from_settings(settings) as memory:
        result = memory.recall("VPN error 720", tenant_id="acme", subject_id="u1", k=5)
        for record in result.records: ...          # score, reason and the row's columns
        result.query_record                         # candidates, selections, reasons

Agents read only the Lance tables: nothing here imports Prefect or DuckDB, or opens the
control plane, so a running pipeline (which holds the DuckDB file) never blocks a read
(invariant 9). Handles use ``read_consistency_interval=0``: every query sees the latest
committed version, and since each pipeline write is one Lance commit, never half of one.

Per table of the asked classes (filters.py): the hard filters compile into one expression used
as a *prefilter* of a vector search and, where the table has a full-text index on ``text``, of
a BM25 search; the legs are fused (RRF), ranked with the configured weights (rank.py),
procedures reduced to their latest applicable version, then packed into the token budget
(pack.py). Served records go to the access log (access_log.py) off the query's thread.

A store that cannot be read (missing database or table, I/O error) raises
``MemoryUnavailable``: an agent must not mistake it for "nothing remembered".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from memory_core.config import RecallConfig, Settings
from memory_core.embed import Embedder, make_embedder
from memory_core.errors import (
    DimensionMismatch,
    InvalidRequest,
    MemoryUnavailable,
    StoreError,
)
from memory_core.read.access_log import AccessLog, served_entries
from memory_core.read.canary import in_canary
from memory_core.read.filters import (
    CLASS_TABLES,
    FilterSpec,
    MemoryType,
    compile_where,
    scope_where,
    why_excluded,
)
from memory_core.read.pack import (
    apply_procedure_rules,
    evidence_episodes,
    left_out_entries,
    pack,
    place_pitfalls,
    to_record,
)
from memory_core.read.rank import Candidate, fuse, query_terms, score_candidates
from memory_core.stores.filters import in_list, sql_quote
from memory_core.stores.lance import LanceStore
from memory_core.stores.schemas import ID_COLUMN

__all__ = ["MemoryType", "RecallResult", "Recaller", "recall"]

logger = logging.getLogger(__name__)

_TABLE_TYPE = {t: m.value for m, tables in CLASS_TABLES.items() for t in tables}
_INDEX_TTL_S = 30.0  # how long a table's index list is trusted before it is read again
_PENDING_SCAN_ROWS = 5000  # episodes without a vector read per query when there is no FTS index
_DEFAULT = object()


@dataclass
class RecallResult:
    """What a recall returns: the packed records, and the record of how they were chosen."""

    records: list[dict[str, Any]]
    query_record: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.records)


def _local_path(uri: str) -> Path | None:
    if "://" not in uri:
        return Path(uri)
    if uri.startswith("file://"):
        return Path(uri[len("file://") :])
    return None


class Recaller:
    """A long-lived reader over one Lance database: open tables, index info, the access log.

    Thread-safe for concurrent ``recall`` calls; ``close()`` flushes the access log.
    """

    def __init__(
        self,
        lance_uri: str,
        *,
        embedder: Embedder,
        config: RecallConfig | None = None,
        access_log_dir: Path | str | None = None,
        storage_options: dict[str, str] | None = None,
        canary_fraction: float = 0.0,
    ) -> None:
        self.lance_uri = lance_uri
        self.embedder = embedder
        self.config = config or RecallConfig()
        self.canary_fraction = canary_fraction  # staleness.canary_fraction: cohort of new versions
        local = _local_path(lance_uri)
        # lancedb.connect creates a missing local directory: a reader must not, or a typo in
        # --home would read as an empty memory.
        if local is not None and not local.is_dir():
            raise MemoryUnavailable(
                lance_uri, "no Lance database here; run `memctl init` or check --home"
            )
        self.store = LanceStore(lance_uri, storage_options=storage_options)
        self.access_log = (
            AccessLog(
                access_log_dir,
                flush_s=self.config.access_log_flush_s,
                roll_s=self.config.access_log_roll_s,
            )
            if access_log_dir is not None
            else None
        )
        self._indices: dict[str, tuple[float, set[str]]] = {}
        self._datasets: dict[str, Any] = {}
        self._checked_dims: set[str] = set()
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="memctl-recall")

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        embedder: Embedder | None = None,
        access_log: bool | None = None,
    ) -> Recaller:
        """Open ``settings``' Lance store; the access log goes to ``<home>/access_log``."""
        log = settings.recall.access_log if access_log is None else access_log
        return cls(
            settings.lance_uri,
            embedder=embedder or make_embedder(settings.embed),
            config=settings.recall,
            access_log_dir=settings.home / "access_log" if log else None,
            storage_options=settings.stores.storage_options,
            canary_fraction=settings.staleness.canary_fraction,
        )

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        if self.access_log is not None:
            self.access_log.close()

    def __enter__(self) -> Recaller:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the store boundary: every Lance call below maps failures to MemoryUnavailable --------

    def _table(self, name: str) -> Any:
        try:
            table = self.store.table(name)
        except MemoryUnavailable:
            raise
        except StoreError as exc:
            raise MemoryUnavailable(self.lance_uri, str(exc)) from exc
        if name not in self._checked_dims:
            dim = getattr(table.schema.field("vector").type, "list_size", None)
            if dim != self.embedder.dim:
                raise DimensionMismatch(name, dim or -1, self.embedder.version, self.embedder.dim)
            self._checked_dims.add(name)
        return table

    def _indexed_columns(self, name: str, table: Any) -> set[str]:
        """Columns with a full-text (``fts:``) or vector (``vector:``) index, cached briefly."""
        cached = self._indices.get(name)
        if cached is not None and time.monotonic() - cached[0] < _INDEX_TTL_S:
            return cached[1]
        found: set[str] = set()
        for index in table.list_indices():
            kind = str(index.index_type).upper()
            for column in index.columns:
                if kind in ("FTS", "INVERTED"):
                    found.add(f"fts:{column}")
                elif kind.startswith(("IVF", "HNSW")):
                    found.add(f"vector:{column}")
        self._indices[name] = (time.monotonic(), found)
        return found

    def _run(self, what: str, fn: Any) -> Any:
        try:
            return fn()
        except (OSError, RuntimeError, pa.ArrowException) as exc:
            # Lance reports I/O failures (a missing data file, an unreachable object store) as
            # these; a bad filter is a plain ValueError: our bug, not an outage, so it propagates.
            raise MemoryUnavailable(self.lance_uri, f"{what}: {exc}") from exc

    def _snapshot(self, name: str) -> Any:
        """The table's latest committed version, pinned for every leg of one query.

        Each leg reading "the latest version" on its own could see two versions when a
        commit lands between them: the old row from one leg, its successor from the other,
        i.e. two active objects for one predicate. One snapshot per table and query avoids
        that; ``checkout_version`` reuses the dataset's index and metadata caches.
        """
        base = self._datasets.get(name)
        if base is None:
            table = self._table(name)
            base = self._run(f"open {name}", table.to_lance)
        latest = self._run(f"read the version of {name}", lambda: base.latest_version)
        if latest != base.version:
            base = self._run(f"check out {name}", lambda: base.checkout_version(latest))
        self._datasets[name] = base
        return base

    def _vector_leg(
        self, name: str, snap: Any, where: str, vector: np.ndarray, limit: int
    ) -> pa.Table:
        columns = [c for c in snap.schema.names if c != "vector"]
        nearest: dict[str, Any] = {"column": "vector", "q": vector, "k": limit, "metric": "cosine"}
        if self.config.vector_nprobes:
            nearest["nprobes"] = self.config.vector_nprobes
        else:
            # Exact over the prefiltered rows: an IVF index probes a few partitions and then
            # applies the scope filter, keeping only part of the true top k (bench/recall.py).
            nearest["use_index"] = False
        return self._run(
            f"vector search of {name}",
            lambda: snap.to_table(
                columns=[*columns, "_distance"],
                filter=where,
                prefilter=True,
                nearest=nearest,
                limit=limit,
                disable_scoring_autoprojection=True,
            ),
        )

    def _text_leg(
        self, name: str, snap: Any, where: str, query: str, limit: int
    ) -> pa.Table | None:
        """BM25 over ``text`` with the same prefilter; None when the table has no FTS index."""
        table = self._table(name)
        indexed = self._run(f"list indices of {name}", lambda: self._indexed_columns(name, table))
        if not query_terms(query):
            return None
        if "fts:text" not in indexed:
            return self._pending_text_leg(name, snap, where, query, limit)
        from lance.query import MatchQuery

        columns = [c for c in snap.schema.names if c != "vector"]
        return self._run(
            f"full-text search of {name}",
            lambda: snap.to_table(
                columns=[*columns, "_score"],
                filter=where,
                prefilter=True,
                full_text_query=MatchQuery(query, "text"),
                limit=limit,
                disable_scoring_autoprojection=True,
            ),
        )

    def _pending_text_leg(
        self, name: str, snap: Any, where: str, query: str, limit: int
    ) -> pa.Table | None:
        """Term match over the episodes still waiting for the embed task, when there is no
        full-text index yet.

        Why: ingest stores episodes without a vector (the embed task fills them later), and the
        full-text index is built by maintenance; on a home that has not had its first nightly,
        neither leg would see what an agent has just written. Only rows without a vector are
        read (``embedding_version = ''``, which every writer leaves empty with the vector), at
        most ``_PENDING_SCAN_ROWS`` of them in the caller's scope, ranked by how many query
        terms their text holds. Once the index exists, Lance's own BM25 covers them.
        """
        if name != "episodes" or "embedding_version" not in snap.schema.names:
            return None
        terms = set(query_terms(query))
        columns = [c for c in snap.schema.names if c != "vector"]
        rows = self._run(
            f"read {name} waiting for vectors",
            lambda: snap.to_table(
                columns=columns,
                filter=f"({where}) AND embedding_version = ''",
                prefilter=True,
                limit=_PENDING_SCAN_ROWS,
            ),
        )
        texts = rows.column("text").to_pylist() if rows.num_rows else []
        hits = [(len(terms & set(query_terms(text or ""))), i) for i, text in enumerate(texts)]
        ranked = sorted(((n, i) for n, i in hits if n), key=lambda h: (-h[0], h[1]))[:limit]
        if not ranked:
            return rows.slice(0, 0).append_column("_score", pa.array([], pa.float32()))
        picked = rows.take([i for _, i in ranked])
        return picked.append_column("_score", pa.array([float(n) for n, _ in ranked], pa.float32()))

    def _search(
        self, tables: list[str], spec: FilterSpec, vector: np.ndarray, query: str, limit: int
    ) -> tuple[list[Candidate], dict[str, Any], dict[str, Any]]:
        """Both legs of every table at once (Lance releases the GIL), merged per record id."""
        snaps = {name: self._snapshot(name) for name in tables}
        wheres = {name: compile_where(spec, name) for name in tables}
        vec_futures = {
            name: self._pool.submit(
                self._vector_leg, name, snaps[name], wheres[name], vector, limit
            )
            for name in tables
        }
        text_futures = {
            name: self._pool.submit(self._text_leg, name, snaps[name], wheres[name], query, limit)
            for name in tables
        }
        pool: list[Candidate] = []
        info: dict[str, Any] = {}
        for name in tables:
            vec_rows, text_rows = vec_futures[name].result(), text_futures[name].result()
            id_col = ID_COLUMN[name]
            merged: dict[str, Candidate] = {}
            for row in vec_rows.to_pylist():
                distance = row.pop("_distance")
                merged[row[id_col]] = Candidate(name, row[id_col], row, distance=float(distance))
            if text_rows is not None:
                for rank, row in enumerate(text_rows.to_pylist(), start=1):
                    bm25 = row.pop("_score", None)
                    cand = merged.get(row[id_col])
                    if cand is None:
                        cand = merged[row[id_col]] = Candidate(name, row[id_col], row)
                    cand.text_rank = rank
                    cand.text_score = float(bm25) if bm25 is not None else None
            pool.extend(merged.values())
            info[name] = {
                "version": snaps[name].version,
                "where": wheres[name],
                "vector_hits": vec_rows.num_rows,
                "text_hits": None if text_rows is None else text_rows.num_rows,
                "vector_index": "vector:vector" in self._indices.get(name, (0, set()))[1],
            }
        return pool, info, snaps

    def _explain_table(
        self, name: str, snap: Any, spec: FilterSpec, vector: np.ndarray, limit: int
    ) -> list[dict[str, Any]]:
        """Near misses within the caller's own scope, and the hard filter each one failed."""
        rows = self._vector_leg(name, snap, scope_where(spec), vector, limit)
        out = []
        for row in rows.to_pylist():
            record_id = row[ID_COLUMN[name]]
            reason = why_excluded(row, spec, name)
            if reason is None:
                continue  # a candidate: it has its decision already
            out.append(
                {
                    "record_id": record_id,
                    "table": name,
                    "score": None,
                    "reason": f"filter: {reason}",
                }
            )
        return out

    def _bound_by_evidence(self, pool: list[Candidate], vector: np.ndarray, tenant: str) -> None:
        """A fact is no closer to the query than the closest episode it rests on.

        Why: a fact is a one-line summary of the turns it cites, written with its subject's
        name ("Caroline: ... = Caroline has a guinea pig"); a question that names the subject
        is near every such line, whatever it asks. The turn is the statement itself, so the
        fact's vector distance becomes the larger of its own and its best evidence turn's
        (read from the episodes table, within the tenant; a turn no longer there, e.g.
        folded into a digest, leaves the fact's own distance). Facts that rest on no episode
        (a corpus, another fact) are unchanged.
        """
        facts = [c for c in pool if c.table == "facts" and c.distance is not None]
        cited = {c.record_id: evidence_episodes(c) for c in facts}
        ids = set().union(*cited.values()) if cited else set()
        if not ids or "episodes" not in self.store.table_names():
            return
        snap = self._snapshot("episodes")
        where = f"tenant_id = {sql_quote(tenant)} AND {in_list('episode_id', ids)}"
        rows = self._run(
            "read the evidence of facts",
            lambda: snap.to_table(columns=["episode_id", "vector"], filter=where),
        )
        query = vector / (np.linalg.norm(vector) or 1.0)
        distance: dict[str, float] = {}
        for eid, vec in zip(
            rows.column("episode_id").to_pylist(), rows.column("vector").to_pylist(), strict=True
        ):
            if vec is None:
                continue
            v = np.asarray(vec, dtype=np.float32)
            distance[eid] = 1.0 - float(np.dot(query, v / (np.linalg.norm(v) or 1.0)))
        for cand in facts:
            near = [distance[e] for e in cited[cand.record_id] if e in distance]
            if near and cand.distance is not None:
                cand.distance = max(cand.distance, min(near))

    # -- the public call --------------------------------------------------------------------

    def recall(
        self,
        query: str,
        *,
        tenant_id: str,
        subject_id: str | None = None,
        memory_type: MemoryType | str | Collection[MemoryType | str] | None = None,
        as_of: datetime | None = None,
        known_at: datetime | None = None,
        now: datetime | None = None,
        k: int | None = None,
        state: Mapping[str, str] | None = None,
        budget_tokens: int | None = None,
        include_stale: bool = False,
        sensitivity: Collection[str] | None = None,
        purpose: str | None = None,
        namespace: str | None = None,
        explain: bool = False,
    ) -> RecallResult:
        """Records of ``tenant_id`` (and ``subject_id``) relevant to ``query``, best first.

        ``memory_type`` is one class or several (ranked and packed together, as for all
        classes when it is None); ``as_of`` asks about a past valid time (current knowledge of
        it unless ``known_at`` names a transaction time too); ``state`` is what the caller
        knows of its environment (procedures apply only when all their preconditions hold in
        it); ``sensitivity`` defaults to ``recall.allowed_sensitivity``. Raises
        MemoryUnavailable when the store cannot be read, ValueError on bad arguments.
        """
        started = time.perf_counter()
        if not query.strip():
            raise InvalidRequest(
                argument="query", reason="is empty; say what to remember (e.g. 'vpn error 720')"
            )
        if not tenant_id.strip():
            raise InvalidRequest(
                argument="tenant_id", reason="is empty; recall never reads across tenants"
            )
        cfg = self.config
        k = cfg.default_k if k is None else k
        budget = cfg.budget_tokens if budget_tokens is None else budget_tokens
        if k < 1 or budget < 1:
            msg = f"k ({k}) and budget_tokens ({budget}) must be at least 1"
            raise ValueError(msg)
        now = now or datetime.now(UTC)
        spec = FilterSpec(
            tenant_id=tenant_id,
            subject_id=subject_id,
            now=now,
            as_of=as_of,
            known_at=known_at,
            sensitivity=frozenset(cfg.allowed_sensitivity if sensitivity is None else sensitivity),
            purpose=purpose,
            namespace=namespace,
            include_stale=include_stale,
        )
        types = _memory_types(memory_type)
        tables = [t for m in types for t in CLASS_TABLES[m]]
        vector = np.asarray(self.embedder.embed([query])[0], dtype=np.float32)
        limit = max(cfg.candidates_per_table, k)
        words = _text_query(query, subject_id)
        pool, table_info, snaps = self._search(tables, spec, vector, words, limit)
        self._bound_by_evidence(pool, vector, tenant_id)
        searched = time.perf_counter()

        cohort = in_canary(tenant_id, subject_id, self.canary_fraction)
        kept, dropped = apply_procedure_rules(pool, state or {}, canary=cohort)
        text_leg = any(info["text_hits"] is not None for info in table_info.values())
        fuse(kept, rrf_k=cfg.rrf_k, text_leg=text_leg)
        score_candidates(kept, query=query, at=spec.valid_at, config=cfg)
        kept.sort(key=lambda c: (-c.score, c.table, c.record_id))
        chosen, left, used = pack(
            kept, k=k, budget_tokens=budget, chars_per_token=cfg.chars_per_token
        )
        chosen = place_pitfalls(chosen)  # a failure lesson next to the procedure it qualifies
        records = [to_record(c, _TABLE_TYPE[c.table]) for c in chosen]
        ranked = time.perf_counter()

        if self.access_log is not None and chosen:
            self.access_log.record(served_entries(chosen, now))
        left_out = left_out_entries(dropped, left)
        if explain:
            for name in tables:
                left_out.extend(self._explain_table(name, snaps[name], spec, vector, limit))
        query_record = {
            "query": query,
            "tenant_id": tenant_id,
            "subject_id": subject_id,
            "memory_types": [m.value for m in types],
            "now": now.isoformat(),
            "as_of": as_of.isoformat() if as_of else None,
            "known_at": known_at.isoformat() if known_at else None,
            "statuses": list(spec.statuses()),
            "k": k,
            "budget_tokens": budget,
            "used_tokens": used,
            "tables": table_info,
            "candidates": [
                {"record_id": c.record_id, "table": c.table, "score": c.score, "reason": c.reason}
                for c in kept
            ],
            "selected": [c.record_id for c in chosen],
            "left_out": left_out,
            "timings_ms": {
                "search": round((searched - started) * 1000, 2),
                "rank_pack": round((ranked - searched) * 1000, 2),
                "total": round((time.perf_counter() - started) * 1000, 2),
            },
        }
        logger.debug(
            "recall tenant=%s subject=%s: %d candidates, %d selected",
            tenant_id,
            subject_id,
            len(pool),
            len(chosen),
        )
        return RecallResult(records=records, query_record=query_record)


def _text_query(query: str, subject_id: str | None) -> str:
    """The words the full-text leg matches: the query's terms without those naming the
    subject the scope already chose.

    Why: the scope filter has picked the subject, so its name in the query says nothing about
    which of the subject's records answers; but it is in the text of every fact written about
    the subject ("Melanie enjoys ...") and of none of the subject's own turns ("I went ..."),
    so BM25 would lift every such fact over the turn that answers (rank.py applies the same
    rule to entity matching). Other names in the query still count.
    """
    own = set(query_terms(subject_id or ""))
    return " ".join(t for t in query_terms(query) if t not in own)


def _memory_types(
    value: MemoryType | str | Collection[MemoryType | str] | None,
) -> list[MemoryType]:
    """The asked classes in their canonical order; None (or empty) means every class."""
    if not value:
        return list(MemoryType)
    asked = {MemoryType(value)} if isinstance(value, str) else {MemoryType(v) for v in value}
    return [m for m in MemoryType if m in asked]


def recall(
    query: str,
    *,
    tenant_id: str,
    home: Path | str | None = None,
    settings: Settings | None = None,
    embedder: Embedder | None = None,
    access_log_dir: Any = _DEFAULT,
    **options: Any,
) -> RecallResult:
    """One-shot recall: open the store of ``settings`` (or ``home``), query, flush, close.

    ``access_log_dir`` defaults to ``<home>/access_log`` (when ``recall.access_log`` is on);
    pass None to disable it. Agents that query often should keep a ``Recaller`` open instead.
    """
    if settings is None:
        from memory_core.config import load_settings

        settings = load_settings(home=Path(home) if home is not None else None)
    if access_log_dir is _DEFAULT:
        access_log_dir = settings.home / "access_log" if settings.recall.access_log else None
    with Recaller(
        settings.lance_uri,
        embedder=embedder or make_embedder(settings.embed),
        config=settings.recall,
        access_log_dir=access_log_dir,
        storage_options=settings.stores.storage_options,
        canary_fraction=settings.staleness.canary_fraction,
    ) as memory:
        return memory.recall(query, tenant_id=tenant_id, **options)
