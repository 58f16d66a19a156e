"""Where a night's wall goes on the process-pool path: the one DuckDB writer vs its workers.

    python bench/pool_night.py prep HOME N                  # build N episodes, first night,
                                                            # +1% episodes; copies HOME to HOME.snap
    python bench/pool_night.py incr SNAP WORK [--processes-from 1]   # the 1% night on a copy
    python bench/pool_night.py --table LOG [LOG ...]        # the printed tables side by side

``incr`` copies ``SNAP`` to ``WORK`` and runs the nightly flow (``run_nightly``, the threads
runner with 2 workers as ``bench/scale.py`` runs it; ``--processes-from 1``: the partitions'
compute in worker processes, stages/consolidate_pool.py) with the writer side timed: each
function named in ``_TIMED`` is wrapped to add up its wall seconds and the CPU seconds of the
thread that called it (``time.thread_time``: DuckDB's own threads, and the workers, are not
in it), and the writer's waits on the workers' results. It prints the night's wall, the CPU of
the flow process and of its reaped children (the workers), the wall before, during and after
the partitions, and one row per timed function. Environment as ``bench/scale.py`` sets it
(``PREFECT_HOME``, ``MEMCTL_EMBED__MODEL=hash``, ...). The same snapshot can be run against
several checkouts (``PYTHONPATH``), alternating, since the night's input is the same.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import re
import shutil
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

_SPENT: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
_MARK: dict[str, float] = {}
_LOCK = threading.Lock()

_POOL = "memory_core.stages.consolidate_pool"
_MINE = "memory_core.stages.mine.stage"
_CANDS = "memory_core.stores.candidates"
_TIMED = [
    (_POOL, "ledger_has", "writer: ledger_has"),
    (_POOL, "read_partition_state", "writer: state read"),
    (_POOL, "run_once", "writer: run_once (work + ledger)"),
    (_POOL, "write_clusters", "write: clusters + members"),
    (_POOL, "stage_mining", "write: mining before the upsert"),
    (_POOL, "finish_mining", "write: mining after the upsert"),
    (_MINE, "_keep_twins", "mining: _keep_twins"),
    (_MINE, "_stale", "mining: _stale"),
    (_POOL, "upsert_candidate_groups", "mining: upsert (all)"),
    (_MINE, "save_partitions_units", "mining: save_units"),
    (_CANDS, "_keep_decisions", "upsert: _keep_decisions"),
    (_CANDS, "_write", "upsert: _write (bodies+insert+evid)"),
    (_CANDS, "_evidence_table", "upsert: _evidence_table"),
    (_CANDS, "_replace_evidence", "upsert: _replace_evidence"),
    (_CANDS, "write_status", "upsert: write_status + audit"),
    ("memory_core.stages.score", "score_candidates", "after: score"),
    ("memory_core.stages.score.workflow_text", "write_workflow_texts", "after: workflow text"),
    ("memory_core.stages.review", "build_review_batches", "after: review batches"),
    ("memory_core.stages.staleness", "run_staleness", "after: staleness"),
    ("flows.nightly", "count_by_status", "after: count_by_status"),
    ("flows.nightly", "run_candidate_rows", "after: run_candidate_rows"),
    ("flows.nightly", "rows_by_status", "after: rows_by_status"),
    ("flows.nightly", "write_report", "after: write_report"),
    ("flows.nightly", "finish_run", "after: finish_run"),
    ("flows.nightly", "create_table_artifact", "after: table artifact"),
    ("flows.nightly", "create_markdown_artifact", "after: markdown artifact"),
    ("flows.nightly", "consolidation_plan", "before: plan"),
]
_SUMMARY = ["after: count_by_status", "after: run_candidate_rows", "after: rows_by_status",
            "after: table artifact", "after: markdown artifact", "after: finish_run",
            "after: write_report"]  # fmt: skip


def _add(label: str, wall: float, cpu: float) -> None:
    with _LOCK:
        cell = _SPENT[label]
        cell[0] += wall
        cell[1] += cpu
        cell[2] += 1


def _timed(fn: Callable[..., Any], label: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            _add(label, time.perf_counter() - wall, time.thread_time() - cpu)

    return wrapper


def _instrument() -> None:
    import flows.nightly  # noqa: F401  (imported before its names are replaced)
    import memory_core.stages.consolidate_pool as pool

    class TimedPool(pool.ProcessPoolExecutor):  # type: ignore[misc]
        """The writer's waits on a worker's result, and when the first one came."""

        def submit(self, *args: Any, **kwargs: Any) -> Any:
            future = super().submit(*args, **kwargs)
            result = future.result

            def timed_result(*a: Any, **k: Any) -> Any:
                wall = time.perf_counter()
                try:
                    return result(*a, **k)
                finally:
                    _MARK.setdefault("first_result", time.perf_counter())
                    _add("writer: waits for a worker's result", time.perf_counter() - wall, 0.0)

            future.result = timed_result
            return future

    pool.ProcessPoolExecutor = TimedPool  # type: ignore[misc]
    consolidate = pool.consolidate_in_processes

    def marked(*args: Any, **kwargs: Any) -> Any:
        _MARK["parts_start"] = time.perf_counter()
        try:
            return consolidate(*args, **kwargs)
        finally:
            _MARK["parts_end"] = time.perf_counter()

    pool.consolidate_in_processes = marked
    for module, name, label in _TIMED:
        mod = importlib.import_module(module)
        setattr(mod, name, _timed(getattr(mod, name), label))


def _night(ns: argparse.Namespace) -> None:
    from consolidate import T0, build

    if ns.cmd == "prep":
        home = Path(ns.a)
        shutil.rmtree(home, ignore_errors=True)
        build(home, int(ns.b), int(ns.b) // 10_000)
    else:
        home = Path(ns.b)
        shutil.rmtree(home, ignore_errors=True)
        shutil.copytree(ns.a, home)
    from prefect import flow

    from flows.nightly import run_nightly
    from memory_core.config import load_settings

    runner = {"kind": "threads", "max_workers": 2, "processes_from_episodes": ns.processes_from}
    settings = load_settings(home=home, embed={"model": "hash"}, runner=runner)

    @flow(name="warm-up")
    def noop() -> int:
        return 0

    noop()  # the ephemeral Prefect server starts here, not inside a timed night
    if ns.cmd == "prep":
        run_nightly(settings, now=T0 + timedelta(days=90))
        n = int(ns.b)
        build(home, n // 100, n // 10_000, first=10_000)
        shutil.rmtree(f"{home}.snap", ignore_errors=True)
        shutil.copytree(home, f"{home}.snap")
        return
    _instrument()
    load0 = os.getloadavg()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    summary = run_nightly(settings, now=T0 + timedelta(days=91))
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    kids = os.times()
    print(f"1% night: {wall:.1f} s wall, {cpu:.1f} CPU s own (children user+sys so far "
          f"{kids.children_user + kids.children_system:.1f}), load {load0} -> {os.getloadavg()}")  # fmt: skip
    print(f"processes {summary.get('partition_processes')}, candidates "
          f"{sum(summary['candidates_by_status'].values())}")  # fmt: skip
    if "parts_start" in _MARK:
        print(f"before partitions: {_MARK['parts_start'] - wall0:.1f} s; partitions: "
              f"{_MARK['parts_end'] - _MARK['parts_start']:.1f} s (first result after "
              f"{_MARK.get('first_result', 0) - _MARK['parts_start']:.1f} s); after: "
              f"{wall0 + wall - _MARK['parts_end']:.1f} s")  # fmt: skip
    print("| where | wall s | thread CPU s | calls |")
    print("| --- | --- | --- | --- |")
    for label, (w, c, n) in _SPENT.items():
        print(f"| {label} | {w:.2f} | {c:.2f} | {n} |")


def _parse(path: str) -> dict[str, Any]:
    text = Path(path).read_text()
    rows = {
        m[1].strip(): (float(m[2]), float(m[3]))
        for m in re.finditer(r"^\| ([^|]+) \| ([\d.]+) \| ([\d.]+) \| (\d+) \|$", text, re.M)
    }
    night = re.search(r"1% night: ([\d.]+) s wall, ([\d.]+) CPU s own \(children user\+sys "
                      r"so far ([\d.]+)\)", text)  # fmt: skip
    phases = re.search(r"before partitions: ([\d.]+) s; partitions: ([\d.]+) s \(first "
                       r"result after ([\d.]+) s\); after: ([\d.]+) s", text)  # fmt: skip
    assert night and phases, path
    return {"rows": rows, "night": [float(x) for x in night.groups()],
            "phases": [float(x) for x in phases.groups()]}  # fmt: skip


def _cells(run: dict[str, Any]) -> list[tuple[str, str]]:
    r, (before, parts, first, after) = run["rows"], run["phases"]

    def g(*labels: str) -> tuple[float, float]:
        cells = [r.get(label, (0.0, 0.0)) for label in labels]
        return sum(c[0] for c in cells), sum(c[1] for c in cells)

    def minus(a: tuple[float, float], *bs: tuple[float, float]) -> tuple[float, float]:
        return a[0] - sum(b[0] for b in bs), a[1] - sum(b[1] for b in bs)

    def pair(x: tuple[float, float]) -> str:
        return f"{x[0]:.1f} / {x[1]:.1f}"

    wall, own, kids = run["night"]
    written = g("upsert: _write (bodies+insert+evid)")
    upsert = g("mining: upsert (all)")
    waits = g("writer: waits for a worker's result")[0]
    return [
        ("night: wall s / CPU s (flow process + workers)", f"{wall:.1f} / {own + kids:.1f} ({own:.1f} + {kids:.1f})"),
        ("before the partitions (embed, index, extract, plan), wall s", f"{before:.1f}"),
        ("the partitions, wall s", f"{parts:.1f}"),
        ("  the first worker's result came after, s", f"{first:.1f}"),
        ("  the writer waited for a worker after that, s", f"{max(0.0, waits - first):.1f}"),
        ("  writer busy, all but the commits", pair(g("write: clusters + members", "write: mining before the upsert", "mining: upsert (all)", "writer: run_once (work + ledger)", "writer: state read", "writer: ledger_has"))),
        ("    partition state read (+ ledger checks)", pair(g("writer: state read", "writer: ledger_has"))),
        ("    clusters + members written", pair(g("write: clusters + members"))),
        ("    candidate upsert, all", pair(upsert)),
        ("      evidence difference", pair(g("upsert: _replace_evidence"))),
        ("      bodies' JSON + INSERT ON CONFLICT", pair(minus(written, g("upsert: _replace_evidence"), g("upsert: _evidence_table")))),
        ("      stored rows read, hashes, decisions", pair(minus(upsert, written, g("upsert: _keep_decisions"), g("upsert: write_status + audit")))),
        ("      kept candidates' decisions read again", pair(g("upsert: _keep_decisions"))),
        ("      status writes + audit", pair(g("upsert: write_status + audit"))),
        ("      evidence rows built", pair(g("upsert: _evidence_table"))),
        ("    unit state saved", pair(g("mining: save_units"))),
        ("    twins kept, stale pending retired", pair(g("mining: _keep_twins", "mining: _stale"))),
        ("    watermark + ledger entry", pair(minus(g("writer: run_once (work + ledger)"), g("write: mining after the upsert")))),
        ("after the partitions, wall s", f"{after:.1f}"),
        ("  score", pair(g("after: score"))),
        ("  workflow text", pair(g("after: workflow text"))),
        ("  review batches", pair(g("after: review batches"))),
        ("  summary, artifacts, report, run row", pair(g(*_SUMMARY))),
    ]  # fmt: skip


def table(paths: list[str]) -> str:
    """Markdown: one column per log, wall s / writer-thread CPU s per row."""
    columns = [_cells(_parse(p)) for p in paths]
    lines = ["| where (wall s / thread CPU s) | " + " | ".join(Path(p).name for p in paths) + " |",
             "| --- |" + " --- |" * len(paths)]  # fmt: skip
    for i, (label, _) in enumerate(columns[0]):
        lines.append(f"| {label} | " + " | ".join(c[i][1] for c in columns) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("args", nargs="+")
    parser.add_argument("--processes-from", type=int, default=1)
    parser.add_argument("--table", action="store_true")
    ns = parser.parse_args()
    if ns.table:
        print(table(ns.args))
        return
    ns.cmd, ns.a, ns.b = ns.args[0], ns.args[1], ns.args[2]
    _night(ns)


if __name__ == "__main__":
    main()
