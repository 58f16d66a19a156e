"""LoCoMo recall before and after compaction (issue 6); prints JSON.

    .venv/bin/python bench/compaction_locomo.py [--embed minilm|hash] [--data FILE]
        [--max-sources N] [--no-fts] [--embed-cache FILE.npz]

Each conversation is a tenant; each turn an episode (``memory_core.eval.locomo``). The turns
are clustered (``cluster_partition``), then recall is measured: every question is asked with
``memory_core.recall`` (hybrid search, ranking, packing by rank into a 2,000-token budget;
without that module, a plain vector top-k over active episodes + digests packed the same way),
and counts as recalled when one of its evidence turns is a source of a packed item (an episode
itself, or a digest whose provenance -- and text, line by line -- carries that turn). Then
every episode is compacted into digests (``compact_episodes`` at a clock past the TTL) and
recall is measured again. Also reported: how often the gold answer text appears in the packed
context, and the stored rows before and after. The full-text index that nightly maintenance
builds (``forget.fts_tables``) is built before each measurement unless ``--no-fts``. Targets: recall after >= 0.95 x before, rows
after <= 0.5 x before.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

from memory_core.config import load_settings
from memory_core.context import Partition, RunContext
from memory_core.embed import make_embedder
from memory_core.eval.locomo import convert_locomo, load_locomo
from memory_core.models import utc
from memory_core.stages.cluster import cluster_partition
from memory_core.stages.compact import compact_episodes
from memory_core.stages.ingest import ingest_records
from memory_core.stores import open_stores

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo_5conv.json"
BUDGET = 2000
K = 200  # more than a 2,000-token budget holds (~4 chars a token, turns of ~100 chars)


def _sources(record: dict[str, Any]) -> set[str]:
    if record.get("digest_id"):
        prov = record.get("provenance") or "[]"
        return {p["source_id"] for p in (json.loads(prov) if isinstance(prov, str) else prov)}
    return {record.get("episode_id") or record.get("record_id")}


def _fallback_search(stores: Any, embedder: Any, question: str, tenant: str) -> list[dict]:
    """Vector top-k over active episodes + digests of the tenant, packed by rank (~4 chars/token)."""
    vector = embedder.embed([question])[0]
    hits = []
    for table in ("episodes", "digests"):
        rows = (
            stores.lance.table(table)
            .search(vector)
            .distance_type("cosine")
            .where(f"tenant_id = '{tenant}' AND status = 'active'", prefilter=True)
            .limit(100)
            .to_list()
        )
        hits += rows
    hits.sort(key=lambda r: r["_distance"])
    packed, used = [], 0
    for row in hits:
        tokens = max(1, len(row.get("text") or "") // 4)
        if used + tokens > BUDGET:
            continue
        packed.append(row)
        used += tokens
    return packed


def _recall_both(memory: Any, q: Any, speakers: list[str], now: Any) -> list[dict[str, Any]]:
    """Recall serves one subject (plus tenant scope) per call; a question may be about either
    speaker, so both calls' records are merged by score and packed again into the budget."""
    from memory_core.read.pack import display_text, estimate_tokens

    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for speaker in speakers:
        for rec in memory.recall(
            q.question, tenant_id=q.conversation_id, subject_id=speaker, k=K,
            budget_tokens=BUDGET, now=now, sensitivity=["low", "medium", "high"],
        ).records:  # fmt: skip
            key = (rec.get("table") or "", rec.get("digest_id") or rec.get("episode_id") or "")
            if key not in merged or (rec.get("score") or 0) > (merged[key].get("score") or 0):
                merged[key] = rec
    packed, used = [], 0
    for rec in sorted(merged.values(), key=lambda r: -(r.get("score") or 0)):
        tokens = estimate_tokens(display_text(rec.get("table") or "", rec), 4.0)
        if used + tokens <= BUDGET:
            packed.append(rec)
            used += tokens
    return packed


def measure(settings: Any, stores: Any, embedder: Any, conv: Any, now: Any) -> dict[str, Any]:
    try:
        from memory_core.recall import Recaller
    except ImportError:
        Recaller = None  # noqa: N806
    recalled = answered = asked = 0
    speakers: dict[str, list[str]] = {}
    for e in conv.episodes:
        if e["subject_id"] not in speakers.setdefault(e["tenant_id"], []):
            speakers[e["tenant_id"]].append(e["subject_id"])
    method = "memory_core.recall" if Recaller is not None else "fallback vector top-k"
    memory = (
        Recaller(settings.lance_uri, embedder=embedder, config=settings.recall, access_log_dir=None)
        if Recaller is not None
        else None
    )
    t0 = time.perf_counter()
    for q in conv.questions:
        if not q.evidence_ids:
            continue
        asked += 1
        if memory is not None:
            records = _recall_both(memory, q, speakers[q.conversation_id], now)
        else:
            records = _fallback_search(stores, embedder, q.question, q.conversation_id)
        sources = set().union(*(_sources(r) for r in records)) if records else set()
        recalled += bool(sources & set(q.evidence_ids))
        context = "\n".join(r.get("text") or "" for r in records).lower()
        answered += bool(q.answer) and str(q.answer).lower() in context
    if memory is not None:
        memory.close()
    return {
        "method": method,
        "questions": asked,
        "recall": round(recalled / asked, 4),
        "answer_in_context": round(answered / asked, 4),
        "seconds": round(time.perf_counter() - t0, 1),
    }


class DiskCachedEmbedder:
    """Wraps an embedder with an on-disk cache keyed by text, so repeated bench runs with
    other settings do not pay MiniLM's ~100 texts/s again."""

    def __init__(self, inner: Any, path: Path) -> None:
        self.inner, self.path = inner, path
        self.cache: dict[str, np.ndarray] = {}
        if path.exists():
            data = np.load(path, allow_pickle=False)
            self.cache = dict(zip(data["keys"].tolist(), data["vectors"], strict=True))
        self.version, self.dim = inner.version, inner.dim

    def embed(self, texts: Any) -> np.ndarray:
        missing = sorted({t for t in texts if t not in self.cache})
        if missing:
            self.cache.update(zip(missing, self.inner.embed(missing), strict=True))
        return np.stack([self.cache[t] for t in texts]) if texts else self.inner.embed([])

    def save(self) -> None:
        keys = list(self.cache)
        np.savez(self.path, keys=np.array(keys), vectors=np.stack([self.cache[k] for k in keys]))


def build_fts(stores: Any) -> None:
    from memory_core.read.indexes import ensure_fts

    for table in ("episodes", "digests"):
        ensure_fts(stores.lance.table(table))


def rows(stores: Any) -> dict[str, int]:
    return {t: stores.lance.count(t, "status = 'active'") for t in ("episodes", "digests")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--embed", choices=["minilm", "hash"], default="minilm")
    parser.add_argument("--cluster-threshold", type=float, default=None)
    parser.add_argument("--max-sources", type=int, default=None)
    parser.add_argument("--conversations", type=int, default=None)
    parser.add_argument("--digest-vector", choices=["mean", "embed"], default=None)
    parser.add_argument(
        "--no-fts", dest="fts", action="store_false",
        help="measure without the full-text index that nightly maintenance builds",
    )  # fmt: skip
    parser.add_argument("--embed-cache", type=Path, default=None, help="npz cache of vectors")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="bench-locomo-"))
    overrides: dict[str, Any] = {"embed": {"model": args.embed}}
    if args.cluster_threshold is not None:
        overrides["cluster"] = {"threshold": args.cluster_threshold}
    forget: dict[str, Any] = {}
    if args.max_sources is not None:
        forget["digest_max_sources"] = args.max_sources
    if args.digest_vector is not None:
        forget["digest_vector"] = args.digest_vector
    if forget:
        overrides["forget"] = forget
    settings = load_settings(home=home, **overrides)
    stores = open_stores(settings)
    embedder = make_embedder(settings.embed)
    if args.embed_cache is not None:
        embedder = DiskCachedEmbedder(embedder, args.embed_cache)
    items = load_locomo(args.data)[: args.conversations]
    conv = convert_locomo(items)
    last = max(
        utc(__import__("datetime").datetime.fromisoformat(e["occurred_at"])) for e in conv.episodes
    )
    now = last + timedelta(days=1)
    t0 = time.perf_counter()
    ingest_records(stores, settings, RunContext(now=now), [json.dumps(e) for e in conv.episodes],
                   embedder=embedder, source="locomo")  # fmt: skip
    ingest_s = time.perf_counter() - t0
    sizes = []
    for tenant in sorted({e["tenant_id"] for e in conv.episodes}):
        cluster_partition(
            stores, settings.cluster, RunContext(now=now), Partition(tenant, "conversation")
        )
    with stores.meta.connect() as con:
        sizes = [
            r[0]
            for r in con.execute(
                "SELECT count(*) FROM cluster_members GROUP BY cluster_id"
            ).fetchall()
        ]
    before_rows = rows(stores)
    if args.fts:
        build_fts(stores)
    before = measure(settings, stores, embedder, conv, now)
    print(json.dumps({"before": before, "rows": rows(stores)}), file=sys.stderr, flush=True)
    later = now + timedelta(days=settings.forget.episodic_ttl_days + 1)
    compacted = compact_episodes(stores, settings, RunContext(now=later), embedder=embedder)
    after_rows = rows(stores)
    if args.fts:
        build_fts(stores)
    after = measure(settings, stores, embedder, conv, later)
    total_before, total_after = sum(before_rows.values()), sum(after_rows.values())
    print(json.dumps({
        "command": "bench/compaction_locomo.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()
            if v is not None and k not in ("data", "fts")) + ("" if args.fts else " --no-fts"),
        "embedder": embedder.version,
        "conversations": len(items), "episodes": len(conv.episodes),
        "ingest_s": round(ingest_s, 1),
        "clusters": {"count": len(sizes), "mean_size": round(float(np.mean(sizes)), 2) if sizes else 0,
                     "singletons": sum(1 for s in sizes if s == 1)},
        "compaction": compacted.as_dict(),
        "rows_before": before_rows, "rows_after": after_rows,
        "rows_ratio": round(total_after / total_before, 3),
        "before": before, "after": after,
        "recall_ratio": round(after["recall"] / before["recall"], 4) if before["recall"] else None,
        "targets": {"recall_ratio": ">= 0.95", "rows_ratio": "<= 0.5"},
    }, indent=2))  # fmt: skip
    if args.embed_cache is not None:
        embedder.save()
    shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
