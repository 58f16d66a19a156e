"""Ingest throughput with vectors supplied, and peak RSS; or text-only ingest + embedding.

    python bench/ingest.py --episodes 100000 --repeat 3
    python bench/ingest.py --text-only --episodes 100000 --embed-sample 2000 \
        [--before torch] [--after onnx-int8]

``--text-only`` (issue 19): episodes without vectors, in the same run, (a) *before*: ingest
with ``embed.at_ingest = true`` and MiniLM on the ``--before`` backend (the write waits for the
model), (b) *after*: ingest with ``at_ingest = false`` (written at once, readable by the
full-text leg) and then ``stages/embed`` on the ``--after`` backend. The write is timed on all
``--episodes``; embedding (either way) on the first ``--embed-sample`` of them, and its
per-episode rate is projected to ``--episodes`` (labelled as a projection): at ~90 texts/s a
100k run of the torch arm alone would take ~20 minutes on these shared cores.

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


def make_file(path: Path, n: int, dim: int, seed: int = 1, *, vectors: bool = True) -> None:
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
                "text": f"Tried the usual steps on host {rng.randrange(5000)} and checked "
                f"the result ({rng.choice(['fixed', 'still failing', 'rolled back'])}).",
            }
            if vectors:
                record["vector"] = [round(float(x), 6) for x in vecs[i]]
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


def text_child(path: str, home: str, arm: str, backend: str, sample: int) -> None:
    """One arm of --text-only in a fresh process: the write, then (after) the embed task."""
    from memory_core.config import load_settings
    from memory_core.context import RunContext
    from memory_core.embed import make_embedder
    from memory_core.stages.embed import embed_episodes
    from memory_core.stages.ingest import ingest_file
    from memory_core.stores import open_stores

    embed = {"model": "minilm", "backend": backend, "at_ingest": arm == "before"}
    settings = load_settings(home=Path(home), embed=embed)
    stores = open_stores(settings)
    t0 = time.perf_counter()
    embedder = make_embedder(settings.embed)
    load_model = time.perf_counter() - t0
    stores.lance.ensure_tables(embedder.dim, embedder=embedder.version)
    load = os.getloadavg()[0]
    t0, c0 = time.perf_counter(), time.process_time()
    result = ingest_file(stores, settings, RunContext(), Path(path), embedder=embedder)
    write_s, write_cpu = time.perf_counter() - t0, time.process_time() - c0
    out: dict = {"arm": arm, "backend": backend, "episodes": result.inserted,
                 "model_load_s": round(load_model, 2), "ingest_s": round(write_s, 3),
                 "ingest_cpu_s": round(write_cpu, 3), "embedded_at_ingest": result.embedded,
                 "pending_after_ingest": result.pending_embedding}  # fmt: skip
    if arm == "after":
        t0, c0 = time.perf_counter(), time.process_time()
        done = embed_episodes(stores, settings, RunContext(), embedder=embedder, limit=sample)
        out["embed_s"] = round(time.perf_counter() - t0, 3)
        out["embed_cpu_s"] = round(time.process_time() - c0, 3)
        out["embedded"] = done.embedded
    out["load_avg_1m"] = [round(load, 2), round(os.getloadavg()[0], 2)]
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(out))


def _run(*argv: str) -> dict:
    out = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def text_only(args: argparse.Namespace) -> None:
    sample = min(args.embed_sample, args.episodes)
    with tempfile.TemporaryDirectory() as tmp:
        full, part = Path(tmp) / "all.jsonl", Path(tmp) / "sample.jsonl"
        make_file(full, args.episodes, 384, vectors=False)
        with full.open() as src, part.open("w") as dst:
            for _, line in zip(range(sample), src, strict=False):
                dst.write(line)
        before = _run("--text-child", str(part), f"{tmp}/b", "before", args.before, str(sample))
        after = _run("--text-child", str(full), f"{tmp}/a", "after", args.after, str(sample))
    per_before = before["ingest_s"] / sample
    per_after = after["embed_s"] / after["embedded"]
    print(json.dumps({
        "episodes": args.episodes, "embed_sample": sample,
        "before": before, "after": after,
        "write_path_s": {"before_projected": round(per_before * args.episodes, 1),
                         "after_measured": after["ingest_s"]},
        "embedding_s_projected_to_all": {"before": round(per_before * args.episodes, 1),
                                         "after": round(per_after * args.episodes, 1)},
        "texts_per_s": {"before": round(sample / before["ingest_s"], 1),
                        "after": round(after["embedded"] / after["embed_s"], 1)},
        "texts_per_cpu_s": {"before": round(sample / before["ingest_cpu_s"], 1),
                            "after": round(after["embedded"] / after["embed_cpu_s"], 1)},
        "note": "projections = per-episode rate on the sample x episodes; not measured on all",
    }, indent=2))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", nargs=2)
    parser.add_argument("--text-only", action="store_true")
    parser.add_argument("--embed-sample", type=int, default=2000)
    parser.add_argument("--before", default="torch")
    parser.add_argument("--after", default="onnx-int8")
    parser.add_argument("--text-child", nargs=5)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    if args.text_child:
        path, home, arm, backend, sample = args.text_child
        text_child(path, home, arm, backend, int(sample))
        return
    if args.text_only:
        text_only(args)
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
