"""Scale-out: the nightly and forgetting flows on a local Dask cluster of 2 worker processes
give the same final rows in every table as the default thread runner, on the same input.

One LocalCluster (2 processes, 1 thread each) is started for the module and reached through
``[runner] address``; the flows' consolidation tasks and the forgetting flow's Lance
compaction tasks then run in those processes, and the flow commits.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from flows.forgetting import run_forgetting_flow
from flows.nightly import run_nightly
from flows.runners import describe, task_runner
from memory_core.config import RunnerConfig, Settings, load_settings
from memory_core.context import RunContext
from memory_core.demo.generate import generate_demo
from memory_core.embed import HashEmbedder
from memory_core.errors import ConfigError
from memory_core.stages.ingest import ingest_records
from memory_core.stores import open_stores
from memory_core.stores.maintenance import index_health
from tests.flows.snapshots import diff, snapshot

# no DuckDB instance kept open by the test process (tests/kit/duckdb_instances.py):
# the Dask worker processes open the home
KEEP_DUCKDB_INSTANCES = False

distributed = pytest.importorskip("distributed")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster():
    import dask

    # without Dask's statistical profiler (each worker samples its threads' stacks every
    # 10 ms, for the dashboard; there is none here): ~0.9 CPU s less per 30 s idle (s32)
    with (
        dask.config.set({"distributed.worker.profile.enabled": False}),
        distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
        ) as local,
    ):
        yield local


def _home(root: Path, name: str, **runner: object) -> Settings:
    return load_settings(home=root / name, embed={"model": "hash"}, runner=runner)


def _ingest(settings: Settings, episodes: list[dict], clock) -> None:
    import json

    stores = open_stores(settings)
    stores.lance.ensure_tables(384)
    ingest_records(
        stores,
        settings,
        RunContext(now=clock),
        [json.dumps(e) for e in episodes],
        embedder=HashEmbedder(384),
    )


def test_dask_processes_match_threads(tmp_path, cluster):
    data = generate_demo(seed=3)
    clock = max(e["occurred_at"] for e in data.episodes)
    from datetime import datetime

    now = datetime.fromisoformat(clock.replace("Z", "+00:00")) + timedelta(days=1)
    later = now + timedelta(days=1)  # the older half is past the 30-day TTL: digests, compaction
    threads = _home(tmp_path, "threads", kind="threads", max_workers=2)
    dask = _home(tmp_path, "dask", kind="dask", address=cluster.scheduler_address)
    for settings in (threads, dask):
        _ingest(settings, data.episodes, now)

    summaries = {}
    receipts = {}
    for settings in (threads, dask):
        summaries[settings.runner.kind] = run_nightly(settings, now=now)
        receipts[settings.runner.kind] = run_forgetting_flow(settings, now=later)

    a, b = snapshot(open_stores(threads)), snapshot(open_stores(dask))
    assert diff(a, b) == []
    # the work really happened, and really on the cluster's worker processes
    assert summaries["dask"]["partitions"] > 1
    assert summaries["dask"]["candidates_by_status"] == summaries["threads"]["candidates_by_status"]
    assert a["lance.digests"], "forgetting folded old episodes into digests"
    compaction = receipts["dask"]["lance_compaction"]
    assert compaction and all(v["tasks"] >= 1 for v in compaction.values())
    assert compaction == receipts["threads"]["lance_compaction"]
    # the partition and rewrite tasks ran on the cluster's worker processes (the scheduler
    # counts every task that finished there)
    done = {name: p.state_counts["memory"] for name, p in cluster.scheduler.task_prefixes.items()}
    assert done["consolidate_partitions"] == summaries["dask"]["partition_tasks"]
    assert done["rewrite_task"] == sum(v["tasks"] for v in compaction.values())
    assert len(cluster.workers) == 2
    # the workers' rewrites were committed with their indices remapped: no index holds
    # a deleted row
    stores = open_stores(dask)
    for name in compaction:
        assert all(v <= 0 for v in index_health(stores.lance, name).values()), name


def test_runner_from_config():
    assert describe(RunnerConfig()) == "threads x2"
    assert type(task_runner(RunnerConfig())).__name__ == "ThreadPoolTaskRunner"
    runner = task_runner(RunnerConfig(kind="dask", max_workers=2))
    assert type(runner).__name__ == "DaskTaskRunner"
    try:
        import prefect_ray  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match=r"runner\.kind.*memory-core\[ray\]"):
            task_runner(RunnerConfig(kind="ray"))
