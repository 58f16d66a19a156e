"""Non-LLM consolidation stages (cluster + mine) on synthetic episodes, 384-d, 100 partitions.

    python bench/consolidate.py --sizes 100000 1000000 [--partitions 100] [--workers 2]

Episodes are written straight to Lance (ingest has its own bench) with a realistic shape: per
partition a few dozen problems, each a noisy cluster around a centre, several action patterns
whose success depends on a condition, noise conditions. Each size runs in a child process so
peak RSS is its own. Reports wall seconds and CPU seconds of the stages (the build excluded;
on a shared machine CPU is the figure to compare), episodes/s, peak RSS and the scaling
exponent log(t2/t1)/log(n2/n1) between consecutive sizes (1.0 = linear). Another checkout's
code runs under the same script with ``PYTHONPATH=that/checkout``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

DIM = 384
T0 = datetime(2026, 6, 1, tzinfo=UTC)


def build(home: Path, n: int, partitions: int, seed: int = 0, *, first: int = 0) -> None:
    """Write ``n`` episodes over ``partitions`` partitions into ``home``.

    ``first`` > 0 appends a later night's episodes to a built home: the same problem centres,
    new ids (``p{p}-e{first + i}``) and later times, so they are new beyond the watermark.
    """
    from memory_core.config import load_settings
    from memory_core.stores import open_stores
    from memory_core.stores.schemas import TS, schema_for

    settings = load_settings(home=home, embed={"model": "hash"})
    stores = open_stores(settings)
    stores.lance.ensure_tables(DIM)
    rng = np.random.default_rng(seed)
    per = n // partitions
    problems = 40
    centres = rng.standard_normal((partitions, problems, DIM)).astype(np.float32)
    if first:
        rng = np.random.default_rng([seed, first])  # the same centres, other episodes
    schema = schema_for("episodes", DIM)
    table = stores.lance.table("episodes")
    patterns = [
        ["restart service", "clear cache"],
        ["reset adapter", "reconnect"],
        ["reinstall driver"],
    ]
    for p in range(partitions):
        prob = rng.integers(0, problems, per)
        vec = centres[p, prob] + 0.35 * rng.standard_normal((per, DIM)).astype(np.float32)
        vec /= np.linalg.norm(vec, axis=1, keepdims=True)
        pat = rng.integers(0, len(patterns), per)
        cause = rng.integers(0, 2, per)
        ok = (pat % 2 == cause) | (rng.random(per) < 0.05)
        ids = [f"p{p}-e{first + i}" for i in range(per)]
        occurred = [T0 + timedelta(minutes=int(first + i)) for i in range(per)]
        cols = {
            "episode_id": ids,
            "session_id": [f"p{p}-s{(first + i) // 3}" for i in range(per)],
            "occurred_at": pa.array(occurred, TS),
            "source_role": ["agent"] * per,
            "goal": [f"problem {k} in partition {p}" for k in prob],
            "actions": [patterns[k] for k in pat],
            "outcome": ["success" if o else "failure" for o in ok],
            "conditions": [
                json.dumps(
                    {
                        "error_code": str(700 + k),
                        "cause_a": str(bool(c)).lower(),
                        "os": ("win", "mac")[i % 2],
                    }
                )
                for i, (k, c) in enumerate(zip(prob, cause, strict=True))
            ],
            "observations": [[] for _ in range(per)],
            "feedback": [None] * per,
            "claims": ["[]"] * per,
            "consent_basis": [None] * per,
            "sources": ["[]"] * per,
            "procedure_id": [None] * per,
            "procedure_version": [None] * per,
            "redactions": pa.array([0] * per, pa.int32()),
            "tenant_id": [f"t{p % 10}"] * per,
            "subject_id": [f"u{(p * 131 + i) % 97}" for i in range(per)],
            "namespace": [f"ns{p}"] * per,
            "status": ["active"] * per,
            "valid_from": pa.array(occurred, TS),
            "valid_to": pa.nulls(per, TS),
            "recorded_at": pa.array(occurred, TS),
            "recorded_to": pa.nulls(per, TS),
            "expires_at": pa.nulls(per, TS),
            "sensitivity": ["low"] * per,
            "purpose": [None] * per,
            "authority": ["agent_inference"] * per,
            "confidence": pa.array([1.0] * per, pa.float32()),
            "importance": pa.nulls(per, pa.float32()),
            "provenance": ["[]"] * per,
            "content_hash": ids,
            "embedding_version": ["bench"] * per,
            "policy_version": ["1"] * per,
            "text": [None] * per,
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vec.reshape(-1)), DIM),
        }
        table.add(pa.table({f.name: cols[f.name] for f in schema}, schema=schema))


def run_stages(home: Path, workers: int, processes: int = 0) -> dict[str, float]:
    """Cluster and mine every partition: ``workers`` threads each calling the stages, or with
    ``processes`` > 0 the nightly flow's process path (stages/consolidate_pool.py: the compute
    in that many worker processes, this process the one DuckDB writer, under the ledger)."""
    if processes > 0:
        return _run_in_processes(home, processes)
    from memory_core.config import load_settings
    from memory_core.context import RunContext
    from memory_core.stages.cluster import cluster_partition
    from memory_core.stages.mine import mine_partition
    from memory_core.stages.partitions import plan_partitions
    from memory_core.stores import open_stores

    settings = load_settings(home=home, embed={"model": "hash"})
    stores = open_stores(settings)
    ctx = RunContext(now=T0 + timedelta(days=90), run_id="bench")
    t0 = time.perf_counter()
    cpu0 = _cpu()
    plan = plan_partitions(stores)

    split = {"cluster": 0.0, "mine": 0.0}  # process CPU per stage: exact with --workers 1

    def one(work: object) -> None:
        part = work.partition  # type: ignore[attr-defined]
        with stores.meta.session():
            c0 = _cpu()
            clustered = cluster_partition(stores, settings.cluster, ctx, part)
            c1 = _cpu()
            # as the flow does (stages/consolidate.py): mining takes the clustering just made;
            # a checkout from before the hand-over (candidates_diff.py runs this file against
            # one) has none and reads it
            handed = getattr(clustered, "clustering", None)
            mine_partition(stores, settings, ctx, part,
                           **({"clustering": handed} if handed is not None else {}))  # fmt: skip
            split["cluster"] += c1 - c0
            split["mine"] += _cpu() - c1

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(one, plan))
    return {
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": round(_cpu() - cpu0, 2),  # this process, every thread: what load spares
        # per stage only when partitions run one at a time (threads would count each other)
        "cluster_cpu_seconds": round(split["cluster"], 2) if workers == 1 else None,
        "mine_cpu_seconds": round(split["mine"], 2) if workers == 1 else None,
        "partitions": len(plan),
    }


def _run_in_processes(home: Path, processes: int) -> dict[str, float]:
    from memory_core.config import load_settings
    from memory_core.context import RunContext
    from memory_core.stages.consolidate import consolidation_plan
    from memory_core.stages.consolidate_pool import consolidate_in_processes
    from memory_core.stores import open_stores

    settings = load_settings(home=home, embed={"model": "hash"})
    stores = open_stores(settings)
    ctx = RunContext(now=T0 + timedelta(days=90), run_id="bench")
    t0 = time.perf_counter()
    cpu0 = _cpu()
    plan = consolidation_plan(stores, settings, recluster=False)
    units = [p.unit for p in plan]
    consolidate_in_processes(stores, settings, ctx, units, recluster=False, workers=processes)
    return {
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": round(_cpu() - cpu0, 2),  # with the workers (reaped: RUSAGE_CHILDREN)
        "cluster_cpu_seconds": None,
        "mine_cpu_seconds": None,
        "partitions": len(plan),
    }


def _cpu() -> float:
    """This process's CPU and its reaped children's (the process path's workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def child(n: int, partitions: int, workers: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        t0 = time.perf_counter()
        build(home, n, partitions)
        built = time.perf_counter() - t0
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        out = run_stages(home, workers)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "episodes": n,
                "build_seconds": round(built, 1),
                **out,
                "peak_rss_mb": round(rss),
                "peak_rss_after_build_mb": round(rss_before),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--child", type=int)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.partitions, args.workers)
        return
    results = []
    for n in args.sizes:
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                str(n),
                "--partitions",
                str(args.partitions),
                "--workers",
                str(args.workers),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        res = json.loads(out.stdout.strip().splitlines()[-1])
        res["episodes_per_s"] = round(n / res["seconds"])
        results.append(res)
    exponents = [
        round(math.log(b["seconds"] / a["seconds"]) / math.log(b["episodes"] / a["episodes"]), 3)
        for a, b in itertools.pairwise(results)
    ]
    print(json.dumps({"results": results, "scaling_exponents": exponents}, indent=2))


if __name__ == "__main__":
    main()
