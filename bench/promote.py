"""Benchmark of promotion review: batching, commit, supersession and bitemporal reads.

N subjects each state a preference twice; the real stages mine and score (heuristic) them,
build review batches and approve every batch (one commit per batch). Then every subject
states an explicit change, and the second round supersedes every fact. Finally, bitemporal
reads: one subject as of a valid time and known at a recorded time, and the whole tenant.

    python bench/promote.py --subjects 1000        # prints one JSON document

Numbers depend on the machine; the hash embedder keeps embedding out of the measurement.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memory_core.config import load_settings
from memory_core.context import Partition, RunContext
from memory_core.embed import HashEmbedder
from memory_core.stages.ingest import ingest_records
from memory_core.stages.mine import mine_partition
from memory_core.stages.review import ReviewRequest, build_review_batches, decide_batch
from memory_core.stages.score import score_candidates
from memory_core.stores import Stores, open_stores
from memory_core.stores.facts import list_rows
from memory_core.stores.review import list_batches

T0 = datetime(2026, 6, 1, 9, tzinfo=UTC)


def _line(eid: str, subject: str, obj: str, when: datetime, text: str) -> str:
    return json.dumps(
        {
            "episode_id": eid, "tenant_id": "acme", "subject_id": subject, "namespace": "it",
            "occurred_at": when.isoformat(), "source_role": "user", "text": text,
            "claims": [{"predicate": "editor", "object": obj, "span": text}],
        }
    )  # fmt: skip


def _round(stores: Stores, settings: Any, now: datetime, lines: list[str]) -> dict[str, float]:
    ctx = RunContext(now=now)
    emb = HashEmbedder(settings.embed.dim)
    t = time.perf_counter()
    ingest_records(stores, settings, ctx, lines, embedder=emb, source="bench.jsonl")
    mine_partition(stores, settings, ctx, Partition("acme", "it"))
    score_candidates(stores, settings.score, ctx, sync=True)
    prepared = time.perf_counter() - t
    t = time.perf_counter()
    built = build_review_batches(stores, settings, ctx)
    build_s = time.perf_counter() - t
    t = time.perf_counter()
    committed = superseded = 0
    for batch in list_batches(stores.meta, status="open"):
        result = decide_batch(
            stores, settings, ctx, batch.batch_id,
            ReviewRequest(decision="approve", reviewer="bench"), embedder=emb,
        )  # fmt: skip
        assert result.commit is not None
        committed += result.commit.counts()["promoted"]
        superseded += result.commit.counts()["superseded"]
    decide_s = time.perf_counter() - t
    return {
        "ingest_mine_score_s": round(prepared, 3),
        "build_batches_s": round(build_s, 3),
        "batches": len(built.created),
        "approve_commit_s": round(decide_s, 3),
        "promoted": committed,
        "superseded": superseded,
        "commit_per_candidate_ms": round(1000 * decide_s / max(committed, 1), 2),
    }


def _latency(fn: Any, runs: int) -> dict[str, float]:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(1000 * (time.perf_counter() - t))
    times.sort()
    return {
        "p50_ms": round(statistics.median(times), 2),
        "p95_ms": round(times[int(0.95 * (len(times) - 1))], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subjects", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=50)
    args = parser.parse_args()
    n = args.subjects
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(home=Path(tmp) / "home", embed={"model": "hash"})
        stores = open_stores(settings)
        first = [
            _line(f"a{i}-{k}", f"u{i}", "vim", T0 + timedelta(days=k, minutes=i), "I use vim.")
            for i in range(n)
            for k in (0, 1)
        ]
        round1 = _round(stores, settings, T0 + timedelta(days=10), first)
        change = T0 + timedelta(days=20)
        second = [
            _line(f"b{i}", f"u{i}", "emacs", change, "Actually, from now on I use emacs.")
            for i in range(n)
        ]
        round2 = _round(stores, settings, T0 + timedelta(days=30), second)
        as_of = T0 + timedelta(days=15)
        known = T0 + timedelta(days=25)
        one = _latency(
            lambda: list_rows(
                stores.lance, "facts", as_of=as_of, known_at=known, subject_id=f"u{n // 2}"
            ),
            args.queries,
        )
        whole = _latency(lambda: list_rows(stores.lance, "facts", as_of=as_of, tenant_id="acme"), 5)
        rows = list_rows(stores.lance, "facts", as_of=as_of, known_at=known, tenant_id="acme")
        print(
            json.dumps(
                {
                    "bench": "promote",
                    "subjects": n,
                    "first_round": round1,
                    "supersede_round": round2,
                    "fact_rows_total": stores.lance.count("facts"),
                    "read_one_subject_as_of_known_at": one,
                    "read_tenant_as_of": whole,
                    "tenant_rows_as_of_known_at": len(rows),
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
