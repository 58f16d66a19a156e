"""The nightly flow on one input, thread runner vs a local Dask cluster (2 worker processes).

    python bench/scale.py --sizes 100000 300000 [--per-partition 10000] [--runners threads dask]
    python bench/scale.py --sizes 1000000 --runners threads --incremental 0.01

Data: ``bench/consolidate.py``'s generator (384-d, 40 noisy problems per partition, action
patterns whose success depends on a condition), ``per-partition`` episodes per partition. For
each size the home is built once and copied for each runner, so both see the same input.
Each runner runs in its own process with its own Prefect home: a no-op flow first starts the
ephemeral Prefect server (not timed), then

* ``cluster_start_s`` -- a no-op flow on the runner: for Dask, starting and stopping the
  LocalCluster (2 processes, 1 thread each); the overhead every Dask run pays here;
* ``flow_s`` -- the whole nightly flow (``run_nightly``): plan, consolidate every partition
  (cluster + mine) on the runner, score (heuristic), review batches, staleness, report;
* ``partition_s`` -- cluster + mine seconds summed over partitions, as the tasks measured
  them (on Dask, inside the worker processes);
* ``cpu_s`` -- CPU seconds of the process and its reaped children (the Dask workers, and the
  threads runner's partition worker processes: stages/consolidate_pool.py, reaped each night);
* ``peak_rss_mb`` -- the flow process's peak resident memory after the first night (one
  process: run under ``bench/tree_rss.py`` for the whole tree with the partition workers);
* ``partition_processes`` -- worker processes the first night's partitions ran in (0: in the
  runner's threads); ``--processes-from N`` sets ``runner.processes_from_episodes`` (1: always);
* ``incremental_s`` -- with ``--incremental F``: a second night after ``F`` x episodes more
  arrived (same partitions and problems, later times), timed the same way (``incr_cpu_s``,
  ``incr_partition_s``), with how many mining units it re-mined and carried forward
  unchanged (``incr_units_mined`` / ``incr_units_kept``), and how many candidates its score
  stage took up (``incr_scored``: new ones and those whose score no longer stands).

Floors, measured in the same invocation right after the flows, in their own process on the
runner's copy of the home (``--floors``, on by default): ``floor_scan_s`` reads every vector
of the episodes table (batches of 64k rows, as numpy); ``floor_assign_s`` is the same scan
plus one assignment pass of every row to its nearest of 1,000 unit centroids by one GEMM per
batch (argmax). Together they are the least any pass over the vectors costs on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from consolidate import DIM, T0, build


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _rss_mb() -> int:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def floors(home: Path, centroids: int = 1000, batch: int = 65_536) -> dict[str, float]:
    """Bare scan of the vectors, then scan + one GEMM assignment pass (nearest centroid)."""
    import lance
    import numpy as np

    uri = str(home / "lance" / "episodes.lance")
    if not Path(uri).exists():
        uri = next(str(p) for p in home.rglob("episodes.lance"))
    dataset = lance.dataset(uri)

    def vectors() -> object:
        for rb in dataset.to_batches(columns=["vector"], batch_size=batch):
            col = rb.column(0)
            yield col.values.to_numpy().reshape(len(col), -1)

    t0 = time.perf_counter()
    rows = sum(len(x) for x in vectors())
    scan = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    cents = rng.standard_normal((centroids, DIM)).astype(np.float32)
    cents /= np.linalg.norm(cents, axis=1, keepdims=True)
    t0 = time.perf_counter()
    counts = np.zeros(centroids, dtype=np.int64)
    for x in vectors():
        counts += np.bincount(np.argmax(x @ cents.T, axis=1), minlength=centroids)
    assign = time.perf_counter() - t0
    assert int(counts.sum()) == rows
    return {"rows": rows, "floor_scan_s": round(scan, 1), "floor_assign_s": round(assign, 1)}


def run_one(
    home: Path, runner: str, workers: int, incremental: float = 0.0, processes_from: int = -1
) -> dict[str, object]:
    """In a fresh process: time one nightly run on ``runner``."""
    from prefect import flow

    from flows.nightly import run_nightly
    from flows.runners import task_runner
    from memory_core.config import load_settings

    options: dict[str, object] = {"kind": runner, "max_workers": workers}
    if processes_from >= 0:  # else the configured default (runner.processes_from_episodes)
        options["processes_from_episodes"] = processes_from
    settings = load_settings(home=home, embed={"model": "hash"}, runner=options)

    @flow(name="warm-up")
    def noop() -> int:
        return 0

    noop()  # starts the ephemeral Prefect server
    t0 = time.perf_counter()
    noop.with_options(task_runner=task_runner(settings.runner))()
    cluster_start = time.perf_counter() - t0
    cpu0 = _cpu()
    t0 = time.perf_counter()
    summary = run_nightly(settings, now=T0 + timedelta(days=90))
    flow_s = time.perf_counter() - t0
    partition_s = sum(
        sum((r.get("seconds") or {}).values()) for r in summary["results"] if not r["skipped"]
    )
    out: dict[str, object] = {
        "runner": summary.get("runner", runner),
        "partition_processes": summary.get("partition_processes", 0),
        "partitions": summary["partitions"],
        "candidates": sum(summary["candidates_by_status"].values()),
        "cluster_start_s": round(cluster_start, 1),
        "flow_s": round(flow_s, 1),
        "partition_s": round(partition_s, 1),
        "cpu_s": round(_cpu() - cpu0, 1),
        "peak_rss_mb": _rss_mb(),
    }
    if incremental > 0:
        episodes = sum(int(r.get("cluster", {}).get("episodes") or 0) for r in summary["results"])
        parts = int(summary["partitions"])
        new = max(parts, round(episodes * incremental))
        build(home, new, parts, first=episodes // parts)  # later ids and times per partition
        cpu0 = _cpu()
        t0 = time.perf_counter()
        again = run_nightly(settings, now=T0 + timedelta(days=91))
        out["incremental_s"] = round(time.perf_counter() - t0, 1)
        out["incr_cpu_s"] = round(_cpu() - cpu0, 1)
        out["incr_episodes"] = new
        done = [r for r in again["results"] if not r["skipped"]]
        out["incr_partitions_done"] = len(done)
        out["incr_partition_s"] = round(
            sum(sum((r.get("seconds") or {}).values()) for r in done), 1
        )
        # mining units re-mined vs carried forward unchanged (stages/mine/units.py)
        out["incr_units_mined"] = sum(int(r.get("mine", {}).get("units_mined") or 0) for r in done)
        out["incr_units_kept"] = sum(int(r.get("mine", {}).get("units_kept") or 0) for r in done)
        # candidates the second night's score stage took up: new ones and those whose score
        # no longer stood (stores/candidates.py, Candidate.score_basis), out of all of them
        out["incr_scored"] = int((again.get("score") or {}).get("considered") or 0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 300_000])
    parser.add_argument("--per-partition", type=int, default=10_000)
    parser.add_argument("--runners", nargs="+", default=["threads", "dask"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--incremental",
        type=float,
        default=0.0,
        help="then a second night with this share of new episodes (0.01 = 1%%)",
    )
    parser.add_argument("--no-floors", dest="floors", action="store_false")
    parser.add_argument(
        "--processes-from",
        type=int,
        default=-1,
        help="runner.processes_from_episodes for the nights (1: partitions in worker processes "
        "always; 0: never); default: the configured one",
    )
    parser.add_argument("--build", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--run", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--floor", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--runner", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build:
        n = args.sizes[0]
        build(args.build, n, max(1, n // args.per_partition))
        return
    if args.run:
        print(json.dumps(run_one(args.run, args.runner, args.workers, args.incremental,
                                 args.processes_from)))  # fmt: skip
        return
    if args.floor:
        print(json.dumps(floors(args.floor)))
        return
    results = []
    for n in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            base = Path(tmp) / "base"
            t0 = time.perf_counter()
            # in a child: this process then holds no data while the nights run, so
            # bench/tree_rss.py's tree is the night's processes and a small driver (building
            # here left ~270 MB resident in it, counted in every 1M tree before s34)
            subprocess.run(
                [sys.executable, __file__, "--build", str(base), "--sizes", str(n),
                 "--per-partition", str(args.per_partition)],
                check=True,
            )  # fmt: skip
            built = time.perf_counter() - t0
            for runner in args.runners:
                home = Path(tmp) / runner
                shutil.copytree(base, home)
                env = {
                    **os.environ,
                    "PREFECT_HOME": str(Path(tmp) / f"prefect-{runner}"),
                    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
                    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                    "DO_NOT_TRACK": "1",
                    "PREFECT_LOGGING_LEVEL": "WARNING",
                    "MEMCTL_EMBED__MODEL": "hash",
                }
                load0 = os.getloadavg()[0]
                out = subprocess.run(
                    [sys.executable, __file__, "--run", str(home), "--runner", runner,
                     "--workers", str(args.workers), "--incremental", str(args.incremental),
                     "--processes-from", str(args.processes_from)],
                    capture_output=True, text=True, env=env, check=False,
                )  # fmt: skip
                if out.returncode != 0:
                    sys.exit(f"{runner} at {n} failed:\n{out.stderr[-3000:]}")
                res = json.loads(out.stdout.strip().splitlines()[-1])
                res.update(
                    episodes=n,
                    build_s=round(built, 1),
                    load_before=round(load0, 1),
                    load_after=round(os.getloadavg()[0], 1),
                )
                if args.floors:
                    floor = subprocess.run(
                        [sys.executable, __file__, "--floor", str(home)],
                        capture_output=True, text=True, env=env, check=True,
                    )  # fmt: skip
                    res.update(json.loads(floor.stdout.strip().splitlines()[-1]))
                    res["flow_over_floor"] = round(res["flow_s"] / res["floor_assign_s"], 2)
                    res["load_after_floors"] = round(os.getloadavg()[0], 1)
                print(json.dumps(res), flush=True)
                results.append(res)
                shutil.rmtree(home)
    print(json.dumps({"results": results}, indent=2))


if __name__ == "__main__":
    main()
