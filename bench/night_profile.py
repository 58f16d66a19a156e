"""Where a nightly's time goes, through the flow as users run it, under py-spy.

    python bench/night_profile.py HOME N OUT_PREFIX [--workers 2] [--spy-first]
    python bench/night_profile.py --table OUT_PREFIX-incr.txt [more raw files ...]

Builds ``N`` episodes (``bench/consolidate.py``'s generator, 10k a partition) in ``HOME``, runs
the first night with ``run_nightly`` on the threads runner (``--workers``, as
``bench/scale.py`` runs it, one DuckDB session per batch of partitions), adds 1% more episodes
and runs the 1% night, with ``py-spy record`` (50 Hz, raw stacks) attached to this process for
the 1% night (``OUT_PREFIX-incr.txt``) and, with ``--spy-first``, the first night too
(``OUT_PREFIX-first.txt``). Prints each night's wall and process CPU seconds and the load.
py-spy must be on PATH (`pip install py-spy`: a profiler, not one of the project's dependencies).

``--table``: the raw files as one table of thread seconds (samples / 50) and shares per stage
and operation, the most specific rule first (``RULES``). py-spy counts a thread that waits
(for the GIL, a DuckDB lock, the CPU on a loaded machine) as busy, so the seconds are thread
time, not CPU time: compare shares, and CPU seconds from the printed totals.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _names(frames: list[str]) -> list[str]:
    return [f.split(" (")[0] for f in frames]


def _in(name: str) -> Callable[[list[str]], bool]:
    return lambda names: name in names


def _under(parent: str, child: str) -> Callable[[list[str]], bool]:
    def test(names: list[str]) -> bool:
        return parent in names and child in names[names.index(parent) :]

    return test


def _any(*names: str) -> Callable[[list[str]], bool]:
    return lambda found: any(n in found for n in names)


RULES: list[tuple[str, Callable[[list[str]], bool]]] = [
    ("cluster: clusters + members read", _under("cluster_partition", "load_partition")),
    ("cluster: new episodes + vectors read", _in("_load_episodes")),
    ("cluster: clusters + members saved", _under("cluster_partition", "save_partition_clusters")),
    ("cluster: parameters chosen (first night)", _in("_select")),
    ("cluster: features + placing", _in("cluster_partition")),
    ("mine: partition scan", _under("mine_partition", "_scan")),
    ("mine: clusters + members read again", _under("mine_partition", "load_partition")),
    ("mine: unit planning", _any("plan_units", "load_units", "UnitPlan.episode_ids")),
    ("mine: episodes to columns + groups", _in("_Evidence.of")),
    ("mine: mine_groups (separators, policy)", _in("mine_groups")),
    ("mine: candidates built (procedure, twin, pitfall)", _in("_mine_clusters")),
    ("mine: twins kept", _in("_keep_twins")),
    ("mine: claims", _any("extracted_claim_rows", "_claim_rows", "aggregate_claims")),
    ("mine: stale pending candidates", _in("_stale")),
    ("mine: evidence pins", _in("_Evidence.pins")),
    ("upsert: evidence difference", _in("_replace_evidence")),
    ("upsert: evidence rows built", _in("_evidence_table")),
    ("upsert: status writes + audit", _under("upsert_candidates", "write_status")),
    ("upsert: content hashes", _under("upsert_candidates", "Candidate.content_hash")),
    ("upsert: bodies + INSERT ON CONFLICT", _in("_write")),
    ("upsert: stored statuses read, decisions", _in("upsert_candidates")),
    ("mine: unit state saved", _in("save_partitions_units")),
    ("mine: other", _in("mine_partition")),
    ("partition: ledger, watermark", _any("record_stage", "set_watermark", "ledger_has")),
    ("partition: commit", _under("consolidate_partition", "MetaStore.atomic")),
    ("partition: other", _in("consolidate_partition")),
    ("batch: stores opened", _under("consolidate_partitions", "_stores")),
    ("batch: session close (checkpoint)", _in("consolidate_partitions")),
    ("after: score", _in("score_task")),
    ("after: workflow text", _in("workflow_task")),
    ("after: review batches", _in("review_task")),
    ("after: staleness", _in("staleness_task")),
    ("before: embed, index, extract", _any("embed_task", "index_task", "extract_task")),
    ("flow: plan, summary", _in("nightly_consolidation")),
    ("Prefect, event loops, other threads", lambda names: True),
]


def table(paths: list[str]) -> str:
    """Markdown: thread seconds and share of each rule, one column per raw file."""
    columns = []
    for path in paths:
        got = dict.fromkeys((label for label, _ in RULES), 0)
        total = 0
        with open(path) as raw:
            for line in raw:
                stack, count = line.rsplit(" ", 1)
                n = int(count)
                total += n
                names = _names(stack.split(";"))
                label = next(label for label, rule in RULES if rule(names))
                got[label] += n
        columns.append((got, max(total, 1)))
    head = " | ".join(f"{Path(p).name}: s (%)" for p in paths)
    lines = [f"| where | {head} |", "| --- |" + " --- |" * len(paths)]
    for label, _ in RULES:
        if any(got[label] for got, _ in columns):
            cells = " | ".join(
                f"{g[label] / 50:.1f} ({100 * g[label] / t:.1f}%)" for g, t in columns
            )
            lines.append(f"| {label} | {cells} |")
    lines.append("| all samples | " + " | ".join(f"{t / 50:.1f}" for _, t in columns) + " |")
    return "\n".join(lines)


def _night(tag: str, out: str | None, run: Callable[[], object]) -> None:
    spy = None
    if out is not None:
        spy = subprocess.Popen(["py-spy", "record", "--pid", str(os.getpid()), "--rate", "50",
                                "--format", "raw", "-o", f"{out}-{tag}.txt", "--nonblocking"])  # fmt: skip
        time.sleep(1.0)
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{tag}: {wall:.1f} s wall, {cpu:.1f} CPU s, load {load}", flush=True)
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("args", nargs="+")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--spy-first", action="store_true")
    parser.add_argument("--table", action="store_true")
    ns = parser.parse_args()
    if ns.table:
        print(table(ns.args))
        return
    home, n, out = Path(ns.args[0]), int(ns.args[1]), ns.args[2]
    from consolidate import T0, build

    shutil.rmtree(home, ignore_errors=True)
    build(home, n, n // 10_000)
    from prefect import flow

    from flows.nightly import run_nightly
    from memory_core.config import load_settings

    runner = {"kind": "threads", "max_workers": ns.workers}
    settings = load_settings(home=home, embed={"model": "hash"}, runner=runner)

    @flow(name="warm-up")
    def noop() -> int:
        return 0

    noop()  # the ephemeral Prefect server starts here, not inside a timed night
    _night("first", out if ns.spy_first else None,
           lambda: run_nightly(settings, now=T0 + timedelta(days=90)))  # fmt: skip
    build(home, n // 100, n // 10_000, first=10_000)
    _night("incr", out, lambda: run_nightly(settings, now=T0 + timedelta(days=91)))


if __name__ == "__main__":
    main()
