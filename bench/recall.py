"""Read-path latency: filtered top-10 recall vs the bare LanceDB query, idle and under writes.

    python bench/recall.py --rows 100000            # ~2-4 minutes on 2 cores
    python bench/recall.py --rows 1000000 --vector-index ivf_flat

Synthetic ``facts`` rows (384-d unit vectors, random order, written in many commits the way
nightly runs append them): ``rows / 10,000`` tenants, each with 1,000 tenant-scope rows
(subject null) and 90 subjects of 100 rows; 10% of rows are superseded, expired or from an
older transaction time, so the hard filters have work to do. A query is one subject plus its
tenant's shared rows (~1,100 candidates before the status/time filters).

Phases, each measuring ``memory_core.recall.Recaller.recall(..., k=10)`` against the bare
LanceDB query with the same filter expression in the same run (queries interleaved):

1. ``fresh``: many small fragments, scalar indices not yet covering them.
2. ``compacted``: ``table.optimize()`` (compaction + index update) and the full-text index.
3. ``vector_index`` (``--vector-index``): plus an ANN index; reports top-10 overlap with flat.
4. ``during_writes``: a consolidation-like writer in another process commits merge_insert
   batches (``--writer-rows``: half supersede existing rows, half insert) while the queries
   run; then ``after_writes_idle`` measures the same table state without the writer, and
   ``after_index_refresh`` the same after ``refresh_indices`` (incremental index update).

Bare: ``search(v).where(filter, prefilter=True).limit(10)`` (vector) and, once a full-text
index exists, LanceDB's own hybrid query (RRF) with the same filter. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

os.environ.setdefault("LANCE_LOG", "error")  # LanceDB's hybrid legs warn on every query
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memory_core.config import RecallConfig  # noqa: E402
from memory_core.embed import HashEmbedder  # noqa: E402
from memory_core.read.filters import FilterSpec, compile_where  # noqa: E402
from memory_core.read.indexes import (  # noqa: E402
    ensure_fts,
    ensure_vector_index,
    refresh_indices,
)
from memory_core.recall import Recaller  # noqa: E402
from memory_core.stores.lance import LanceStore  # noqa: E402
from memory_core.stores.schemas import schema_for  # noqa: E402

DIM = 384
NOW = datetime(2026, 8, 1, tzinfo=UTC)
T0 = datetime(2026, 1, 1, tzinfo=UTC)
PER_TENANT = 10_000
SHARED = 1_000
PER_SUBJECT = 100
WORDS = ["vpn", "printer", "disk", "build", "login", "cert", "proxy", "dns", "driver", "update"]


def _rows(ids: np.ndarray, rng: np.random.Generator, schema: pa.Schema) -> pa.Table:
    """Synthetic facts for global row numbers ``ids`` (deterministic scope per id)."""
    n = len(ids)
    tenant = ids // PER_TENANT
    local = ids % PER_TENANT
    subject = np.where(local < SHARED, -1, (local - SHARED) // PER_SUBJECT)
    vec = rng.standard_normal((n, DIM), dtype=np.float32)
    vec /= np.linalg.norm(vec, axis=1, keepdims=True)
    kind = rng.random(n)
    status = np.where(kind < 0.05, "superseded", np.where(kind < 0.07, "expired", "active"))
    t0 = np.datetime64(T0.replace(tzinfo=None), "us")
    valid_from = t0 + (rng.random(n) * 200 * 86_400e6).astype("timedelta64[us]")
    closed = NOW - timedelta(days=10)
    recorded_to = [closed if k > 0.97 else None for k in kind.tolist()]
    codes = rng.integers(700, 800, n)
    words = rng.integers(0, len(WORDS), n)
    text = [
        f"{WORDS[w]} error {c} seen on host {i % 97}"
        for w, c, i in zip(words, codes, ids, strict=True)
    ]
    ts = pa.timestamp("us", tz="UTC")
    cols: dict[str, Any] = {
        "fact_id": [f"f{i:08d}" for i in ids],
        "predicate": [f"{WORDS[w]}_error" for w in words],
        "object": [str(c) for c in codes],
        "conditions": ["{}"] * n,
        "supersedes": pa.nulls(n, pa.string()),
        "superseded_by": pa.nulls(n, pa.string()),
        "candidate_id": pa.nulls(n, pa.string()),
        "approver": pa.nulls(n, pa.string()),
        "sources": ["[]"] * n,
        "tenant_id": [f"t{t}" for t in tenant],
        "subject_id": [
            None if s < 0 else f"t{t}-u{s}" for t, s in zip(tenant, subject, strict=True)
        ],
        "namespace": ["it"] * n,
        "status": status.tolist(),
        "valid_from": pa.array(valid_from, ts),
        "valid_to": pa.nulls(n, ts),
        "recorded_at": pa.array([T0] * n, ts),
        "recorded_to": pa.array(recorded_to, ts),
        "expires_at": pa.nulls(n, ts),
        "sensitivity": ["low"] * n,
        "purpose": pa.nulls(n, pa.string()),
        "authority": ["user_statement"] * n,
        "confidence": pa.array(rng.random(n, dtype=np.float32)),
        "importance": pa.array(rng.random(n, dtype=np.float32)),
        "provenance": ["[]"] * n,
        "content_hash": [f"h{i}" for i in ids],
        "embedding_version": ["bench"] * n,
        "policy_version": ["1"] * n,
        "text": text,
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(vec.reshape(-1)), DIM),
    }
    return pa.table({f.name: cols[f.name] for f in schema}, schema=schema)


def build(uri: str, rows: int, commits: int, seed: int) -> float:
    store = LanceStore(uri)
    store.ensure_tables(DIM)
    table = store.table("facts")
    schema = schema_for("facts", DIM)
    rng = np.random.default_rng(seed)
    order = rng.permutation(rows)
    t0 = time.perf_counter()
    for chunk in np.array_split(order, commits):
        table.add(_rows(np.sort(chunk), rng, schema))
    return time.perf_counter() - t0


def writer(uri: str, rows: int, stop: Any, stats: Any, pause: float, batch_rows: int) -> None:
    """Consolidation-like commits: each supersedes batch/2 existing rows and inserts batch/2."""
    store = LanceStore(uri)
    table = store.table("facts")
    schema = schema_for("facts", DIM)
    rng = np.random.default_rng(99)
    half = max(batch_rows // 2, 1)
    next_id = 0
    commits = 0
    while not stop.is_set():
        old = _rows(np.sort(rng.choice(rows, half, replace=False)), rng, schema)
        at = schema.get_field_index("status")
        old = old.set_column(at, schema.field("status"), pa.array(["superseded"] * half))
        new = _rows(np.arange(next_id, next_id + half) + rows * 10, rng, schema)
        next_id += half
        table.merge_insert(
            "fact_id"
        ).when_matched_update_all().when_not_matched_insert_all().execute(
            pa.concat_tables([old, new])
        )
        commits += 1
        stats.value = commits
        time.sleep(pause)


def pct(values: list[float], p: float) -> float:
    return float(np.percentile(np.array(values), p))


def summary(ms: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(pct(ms, 50), 2),
        "p95_ms": round(pct(ms, 95), 2),
        "mean_ms": round(statistics.fmean(ms), 2),
    }


def measure(
    uri: str, tenants: int, queries: int, warmup: int, seed: int, log_dir: str
) -> dict[str, Any]:
    """Interleave recall and bare queries over the same random (tenant, subject, text)."""
    embedder = HashEmbedder(DIM)
    config = RecallConfig()
    rng = random.Random(seed)
    memory = Recaller(uri, embedder=embedder, config=config, access_log_dir=log_dir)
    bare_store = LanceStore(uri)  # its own handle, same consistency setting as the reader
    table = bare_store.table("facts")
    fts = any(ix.columns == ["text"] for ix in table.list_indices())
    columns = [c for c in table.schema.names if c != "vector"]
    from lancedb.query import MatchQuery

    lance_ds = table.to_lance()
    times: dict[str, list[float]] = {
        "recall": [],
        "bare_vector": [],
        "bare_hybrid": [],
        "bare_lance_vector": [],
    }
    hits = []
    for i in range(warmup + queries):
        tenant = f"t{rng.randrange(tenants)}"
        subject = f"{tenant}-u{rng.randrange(90)}"
        text = f"{rng.choice(WORDS)} error {rng.randrange(700, 800)}"
        vec = embedder.embed([text])[0]
        spec = FilterSpec(tenant, subject, now=NOW)
        where = compile_where(spec, "facts")

        def bare_vector(vec: np.ndarray = vec, where: str = where) -> pa.Table:
            return (
                table.search(vec, vector_column_name="vector")
                .distance_type("cosine")
                .where(where, prefilter=True)
                .select([*columns, "_distance"])
                .limit(10)
                .to_arrow()
            )

        def bare_hybrid(vec: np.ndarray = vec, where: str = where, text: str = text) -> pa.Table:
            return (
                table.search(query_type="hybrid", vector_column_name="vector")
                .vector(vec)
                .text(MatchQuery(text, "text"))
                .distance_type("cosine")
                .where(where, prefilter=True)
                .select(columns)
                .limit(10)
                .to_arrow()
            )

        def bare_lance_vector(vec: np.ndarray = vec, where: str = where) -> pa.Table:
            # what recall's vector leg runs (pylance, latest version), without ranking/packing
            snap = lance_ds.checkout_version(lance_ds.latest_version)
            return snap.to_table(
                columns=[*columns, "_distance"],
                filter=where,
                prefilter=True,
                nearest={"column": "vector", "q": vec, "k": 10, "metric": "cosine"},
                limit=10,
                disable_scoring_autoprojection=True,
            )

        def ours(text: str = text, tenant: str = tenant, subject: str = subject) -> Any:
            return memory.recall(
                text, tenant_id=tenant, subject_id=subject, memory_type="semantic", k=10, now=NOW
            )

        calls = [
            ("recall", ours),
            ("bare_vector", bare_vector),
            ("bare_lance_vector", bare_lance_vector),
        ]
        if fts:
            calls.append(("bare_hybrid", bare_hybrid))
        rng.shuffle(calls)  # no call always runs first (warm caches) or last
        for name, fn in calls:
            t0 = time.perf_counter()
            out = fn()
            dt = (time.perf_counter() - t0) * 1000
            if i >= warmup:
                times[name].append(dt)
            if name == "recall" and i >= warmup:
                hits.append(len(out.records))
    memory.close()
    result: dict[str, Any] = {k: summary(v) for k, v in times.items() if v}
    bare = result["bare_hybrid" if fts else "bare_vector"]
    result["fts_index"] = fts
    result["compared_with"] = "bare_hybrid" if fts else "bare_vector"
    result["p95_ratio_vs_bare"] = round(result["recall"]["p95_ms"] / bare["p95_ms"], 3)
    result["p95_ratio_vs_bare_vector"] = round(
        result["recall"]["p95_ms"] / result["bare_vector"]["p95_ms"], 3
    )
    result["mean_results"] = round(statistics.fmean(hits), 2)
    return result


def overlap_with_flat(uri: str, tenants: int, n: int, seed: int) -> dict[str, Any]:
    """Top-10 of the indexed search vs an exact (flat) one with the same filter and call."""
    embedder = HashEmbedder(DIM)
    ds = LanceStore(uri).table("facts").to_lance()
    rng = random.Random(seed)
    shares, flat_ms, index_ms = [], [], []
    for _ in range(n):
        tenant = f"t{rng.randrange(tenants)}"
        spec = FilterSpec(tenant, f"{tenant}-u{rng.randrange(90)}", now=NOW)
        vec = embedder.embed([f"{rng.choice(WORDS)} error {rng.randrange(700, 800)}"])[0]
        where = compile_where(spec, "facts")

        def ids(use_index: bool, vec: np.ndarray = vec, where: str = where) -> set[str]:
            nearest = {"column": "vector", "q": vec, "k": 10, "metric": "cosine"}
            rows = ds.to_table(
                columns=["fact_id"],
                filter=where,
                prefilter=True,
                nearest={**nearest, "use_index": use_index},
                limit=10,
            )
            return set(rows.column("fact_id").to_pylist())

        t0 = time.perf_counter()
        exact = ids(use_index=False)
        t1 = time.perf_counter()
        approx = ids(use_index=True)
        t2 = time.perf_counter()
        flat_ms.append((t1 - t0) * 1000)
        index_ms.append((t2 - t1) * 1000)
        shares.append(len(approx & exact) / max(len(exact), 1))
    return {
        "top10_overlap_with_flat": round(statistics.fmean(shares), 3),
        "flat_p50_ms": round(pct(flat_ms, 50), 2),
        "indexed_p50_ms": round(pct(index_ms, 50), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--commits", type=int, default=0, help="0 = rows / 2,000, max 100")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument(
        "--vector-index", choices=["none", "ivf_flat", "hnsw_sq", "ivf_pq"], default="none"
    )
    parser.add_argument("--partitions", type=int, default=0)
    parser.add_argument("--writer-pause", type=float, default=1.0, help="seconds between commits")
    parser.add_argument("--writer-rows", type=int, default=200, help="rows per writer commit")
    parser.add_argument("--skip-writer", action="store_true")
    parser.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rows = (args.rows // PER_TENANT) * PER_TENANT or PER_TENANT
    tenants = rows // PER_TENANT
    commits = args.commits or min(100, max(1, rows // 2000))
    work = Path(args.dir or tempfile.mkdtemp(prefix="bench-recall-"))
    uri = str(work / "lance")
    logs = str(work / "access_log")
    out: dict[str, Any] = {"rows": rows, "tenants": tenants, "dim": DIM, "commits": commits}
    out["build_s"] = round(build(uri, rows, commits, args.seed), 2)
    out["fresh"] = measure(uri, tenants, args.queries, args.warmup, args.seed, logs)

    table = LanceStore(uri).table("facts")
    t0 = time.perf_counter()
    table.optimize()
    out["optimize_s"] = round(time.perf_counter() - t0, 2)
    t0 = time.perf_counter()
    ensure_fts(table)
    out["fts_build_s"] = round(time.perf_counter() - t0, 2)
    out["compacted"] = measure(uri, tenants, args.queries, args.warmup, args.seed + 1, logs)

    if args.vector_index != "none":
        t0 = time.perf_counter()
        done = ensure_vector_index(table, 1, kind=args.vector_index, partitions=args.partitions)
        out["vector_index_build_s"] = round(time.perf_counter() - t0, 2)
        out["vector_index"] = measure(uri, tenants, args.queries, args.warmup, args.seed + 2, logs)
        out["vector_index"]["kind"] = done
        out["vector_index"]["vs_flat"] = overlap_with_flat(uri, tenants, 50, args.seed)

    if not args.skip_writer:
        ctx = mp.get_context("spawn")
        stop, commits_done = ctx.Event(), ctx.Value("i", 0)
        proc = ctx.Process(
            target=writer,
            args=(uri, rows, stop, commits_done, args.writer_pause, args.writer_rows),
        )
        proc.start()
        time.sleep(3.0)  # let the writer reach its steady state
        t0, first = time.perf_counter(), commits_done.value
        during = measure(uri, tenants, args.queries, args.warmup, args.seed + 3, logs)
        elapsed, done_commits = time.perf_counter() - t0, commits_done.value - first
        stop.set()
        proc.join(120)
        idle = out.get("vector_index") or out["compacted"]
        during["writer_commits"] = done_commits
        during["writer_rows_per_commit"] = args.writer_rows
        during["writer_commits_per_s"] = round(done_commits / max(elapsed, 1e-9), 2)
        during["p95_vs_idle"] = round(during["recall"]["p95_ms"] / idle["recall"]["p95_ms"], 3)
        out["during_writes"] = during
        # The same table state without the writer: separates the cost of concurrent commits
        # from the cost of what they left behind (small fragments, rows no index covers yet).
        after = measure(uri, tenants, args.queries, args.warmup, args.seed + 3, logs)
        during["p95_vs_idle_after"] = round(
            during["recall"]["p95_ms"] / after["recall"]["p95_ms"], 3
        )
        out["after_writes_idle"] = after
        t0 = time.perf_counter()
        refresh_indices(LanceStore(uri).table("facts"))
        out["index_refresh_s"] = round(time.perf_counter() - t0, 2)
        out["after_index_refresh"] = measure(
            uri, tenants, args.queries, args.warmup, args.seed + 3, logs
        )
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
