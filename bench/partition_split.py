"""Where a night's partitions go, split as the process pool splits them: read, compute, write.

    python bench/partition_split.py HOME N [--first] [--statements] [--profile PREFIX]

Builds ``N`` episodes in ``HOME`` (``bench/consolidate.py``'s generator, 10k a partition),
runs the first night through the flow (``run_nightly``, default config), appends 1% more
episodes (as ``bench/scale.py --incremental 0.01`` does), then runs that 1% night's partitions
serially in this process, each in the pool's three steps (``stages/consolidate_pool.py``):
its stored state read from DuckDB, its compute (clustering and mining, what a worker runs),
its writes (what the one writer runs, in one transaction). With ``--first`` the steps are
those of the first night instead (nothing is run through the flow). Prints the seconds of each
step summed over the partitions.

Serial on purpose: the sum says how much work the phase is, which the pool then spreads over
the cores (a phase whose wall is near sum / cores is CPU-bound, and only less work shortens
it). ``--statements`` times every DuckDB statement inside the writes, grouped by its text
(what the writer's time is made of); ``--profile PREFIX`` writes cProfile stats per step
(``PREFIX-read.pstats`` ...). Compute is measured where it runs here, not in a spawned worker:
the pool's workers also freeze their start's objects out of the collector (not done here).
"""

from __future__ import annotations

import argparse
import cProfile
import re
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from consolidate import T0, build

STEPS = ("read", "compute", "write")


class _TimedConnection:
    """A DuckDB connection whose ``execute``/``sql`` calls are timed by statement text (its
    string literals left out, so one lookup by different ids is one statement)."""

    def __init__(self, con: Any, spent: Counter[str], calls: Counter[str]) -> None:
        self._con, self._spent, self._calls = con, spent, calls

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)

    def _timed(self, call: Any, sql: str, *args: Any, **kwargs: Any) -> Any:
        key = re.sub(r"\s+", " ", re.sub(r"'(?:[^']|'')*'(?:, )?", "", sql))[:90]  # no literals
        started = time.perf_counter()
        try:
            return call(sql, *args, **kwargs)
        finally:
            self._spent[key] += time.perf_counter() - started
            self._calls[key] += 1

    def execute(self, sql: str, *args: Any, **kwargs: Any) -> Any:
        return self._timed(self._con.execute, sql, *args, **kwargs)

    def sql(self, sql: str, *args: Any, **kwargs: Any) -> Any:
        return self._timed(self._con.sql, sql, *args, **kwargs)


def _time_statements(spent: Counter[str], calls: Counter[str]) -> None:
    """Every statement of a ``MetaStore.atomic`` block (a partition's writes) goes through a
    ``_TimedConnection``; the commit is timed as ``COMMIT``. A measurement harness only."""
    from memory_core.stores.meta import MetaStore

    original = MetaStore.atomic

    @contextmanager
    def atomic(self: MetaStore) -> Iterator[None]:
        """``MetaStore.atomic`` itself, its connection wrapped while the block runs; its exit
        (the commit) timed."""
        outer = getattr(self._local, "unit", None) is None
        block = original(self)
        block.__enter__()
        if outer:
            self._local.unit = _TimedConnection(self._local.unit, spent, calls)
        try:
            yield
        except BaseException:
            if not block.__exit__(*sys.exc_info()):
                raise
            return
        started = time.perf_counter()
        block.__exit__(None, None, None)
        if outer:
            spent["COMMIT"] += time.perf_counter() - started
            calls["COMMIT"] += 1

    MetaStore.atomic = atomic  # type: ignore[method-assign]


def _prepare(home: Path, n: int, *, first: bool) -> None:
    """``n`` episodes in ``home``; unless ``first``, the first night run and 1% appended."""
    if not (home / "lance").exists():
        build(home, n, max(1, n // 10_000))
    if first:
        return
    from flows.nightly import run_nightly
    from memory_core.config import load_settings

    settings = load_settings(home=home, embed={"model": "hash"})
    summary = run_nightly(settings, now=T0 + timedelta(days=90))
    parts = int(summary["partitions"])
    episodes = sum(int(r.get("cluster", {}).get("episodes") or 0) for r in summary["results"])
    build(home, max(parts, round(episodes * 0.01)), parts, first=episodes // parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("home", type=Path)
    parser.add_argument("episodes", type=int)
    parser.add_argument("--first", action="store_true", help="split the first night instead")
    parser.add_argument("--statements", action="store_true", help="time the writes' SQL")
    parser.add_argument("--profile", help="write cProfile stats to PREFIX-<step>.pstats")
    args = parser.parse_args()
    _prepare(args.home, args.episodes, first=args.first)

    from memory_core.config import load_settings
    from memory_core.context import RunContext
    from memory_core.stages import consolidate_pool as pool
    from memory_core.stages.consolidate import consolidation_plan, index_episodes
    from memory_core.stores import open_stores
    from memory_core.stores.lance_read import LanceReader

    spent: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    if args.statements:
        _time_statements(spent, calls)
    settings = load_settings(home=args.home, embed={"model": "hash"})
    stores = open_stores(settings)
    index_episodes(stores)
    plan = consolidation_plan(stores, settings, recluster=False)
    ctx = RunContext(now=T0 + timedelta(days=90 if args.first else 91), run_id="run_split")
    # what the pool's worker start sets up, in this process
    pool._worker["settings"] = settings
    pool._worker["lance"] = LanceReader(
        settings.lance_uri, storage_options=settings.stores.storage_options
    )
    seconds = dict.fromkeys(STEPS, 0.0)
    profiles = {step: cProfile.Profile() for step in STEPS} if args.profile else {}

    @contextmanager
    def step(name: str) -> Iterator[None]:
        profile = profiles.get(name)
        started = time.perf_counter()
        if profile:
            profile.enable()
        try:
            yield
        finally:
            if profile:
                profile.disable()
            seconds[name] += time.perf_counter() - started

    with stores.meta.session(checkpoint_threshold=pool.WRITER_CHECKPOINT):
        for planned in plan:
            unit = planned.unit
            with step("read"):
                state = pool.read_partition_state(stores, unit.partition)
            with step("compute"):
                computed = pool._compute(ctx, unit.partition, state, recluster=False)
            with step("write"), stores.meta.atomic():  # a commit group of one partition
                group = pool._CommitGroup(stores, settings, ctx)
                group.add(unit.partition.key, unit, computed)
                group.flush()
    night = "first" if args.first else "1%"
    print(f"{night} night, {len(plan)} partitions, serial:",
          ", ".join(f"{k} {v:.2f} s" for k, v in seconds.items()))  # fmt: skip
    for name, profile in profiles.items():
        profile.dump_stats(f"{args.profile}-{name}.pstats")
    for key, total in spent.most_common(15):
        print(f"{total:8.2f} s {calls[key]:6d}  {key}")


if __name__ == "__main__":
    main()
