"""Ingest throughput with vectors supplied, and peak RSS.

    python bench/ingest.py --episodes 100000 --repeat 3

Generates a JSONL file of synthetic episodes (384-d unit vectors supplied), then ingests it
into a fresh home in a child process per repeat, so each measures one cold ingest and its own
peak RSS. Reports the median.

On a shared machine wall time swings with other tenants' load, so each run also reports the
CPU seconds the ingest used (all its threads) and the load average around it:
``episodes_per_cpu_s`` is the throughput one dedicated core would give.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def make_file(path: Path, n: int, dim: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    vecs = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    goals = [
        "VPN fails with error 720",
        "printer offline",
        "disk full on build agent",
        "flaky test in CI",
    ]
    with path.open("w") as out:
        for i in range(n):
            record = {
                "episode_id": f"ep-{i:08d}",
                "tenant_id": f"t{i % 10}",
                "subject_id": f"u{rng.randrange(1000)}",
                "namespace": f"ns{i % 10}",
                "session_id": f"s{i // 4}",
                "occurred_at": f"2026-07-{1 + i % 28:02d}T{i % 24:02d}:00:00Z",
                "source_role": "agent",
                "goal": rng.choice(goals),
                "actions": ["inspect logs", "restart service"],
                "outcome": rng.choice(["success", "failure"]),
                "conditions": {
                    "os": rng.choice(["win11", "macos"]),
                    "error_code": str(rng.randrange(700, 730)),
                },
                "text": "Tried the usual steps and checked the result.",
                "vector": [round(float(x), 6) for x in vecs[i]],
            }
            out.write(json.dumps(record) + "\n")


def child(path: str, home: str) -> None:
    from memory_core.config import load_settings
    from memory_core.context import RunContext
    from memory_core.embed import HashEmbedder
    from memory_core.stages.ingest import ingest_file
    from memory_core.stores import open_stores

    settings = load_settings(home=Path(home), embed={"model": "hash"})
    stores = open_stores(settings)
    embedder = HashEmbedder(384)
    stores.lance.ensure_tables(384)
    load = os.getloadavg()[0]
    t0, c0 = time.perf_counter(), time.process_time()
    result = ingest_file(stores, settings, RunContext(), Path(path), embedder=embedder)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "inserted": result.inserted,
                "seconds": round(seconds, 3),
                "cpu_seconds": round(cpu, 3),
                "peak_rss_mb": round(rss_mb, 1),
                "load_avg_1m": [round(load, 2), round(os.getloadavg()[0], 2)],
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", nargs=2)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "episodes.jsonl"
        make_file(path, args.episodes, 384)
        runs = []
        for i in range(args.repeat):
            out = subprocess.run(
                [sys.executable, __file__, "--child", str(path), str(Path(tmp) / f"home{i}")],
                capture_output=True,
                text=True,
                check=True,
            )
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        secs = statistics.median(r["seconds"] for r in runs)
        cpu = statistics.median(r["cpu_seconds"] for r in runs)
        print(
            json.dumps(
                {
                    "episodes": args.episodes,
                    "file_mb": round(path.stat().st_size / 1e6, 1),
                    "runs": runs,
                    "median_seconds": round(secs, 2),
                    "episodes_per_s": round(args.episodes / secs),
                    "median_cpu_seconds": round(cpu, 2),
                    "episodes_per_cpu_s": round(args.episodes / cpu),
                    "median_peak_rss_mb": round(statistics.median(r["peak_rss_mb"] for r in runs)),
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
