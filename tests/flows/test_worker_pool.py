"""The partitions' worker processes started with the night (flows/worker_pool.py): taken up by
the partitions' task when the plan asks for processes, shut down when it does not."""

from __future__ import annotations

import multiprocessing
import os
import time
from datetime import timedelta

import pytest

import flows.worker_pool as worker_pool
from flows.nightly import run_nightly
from memory_core.config import Settings, load_settings
from memory_core.context import RunContext
from memory_core.embed import HashEmbedder
from memory_core.stages.consolidate_pool import ComputePool
from memory_core.stages.ingest import ingest_records
from memory_core.stores import open_stores
from tests.flows.test_nightly import NOW, _seed_scenario


def _gone(pids: set[int], within_s: float = 30.0) -> bool:
    """Whether every process in ``pids`` has exited (reaped) within ``within_s``."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not pids & {p.pid for p in multiprocessing.active_children()}:
            return True
        time.sleep(0.1)
    return False


def test_warm_spawns_every_worker_at_once(tmp_path):
    """``warm`` starts the workers before any partition is submitted; they compute after."""
    settings = load_settings(home=tmp_path)
    before = {p.pid for p in multiprocessing.active_children()}
    with ComputePool(settings, 2) as pool:
        pool.warm()
        spawned = {p.pid for p in multiprocessing.active_children()} - before
        assert len(spawned) == 2
        assert {pool.submit(os.getpid).result(timeout=60) for _ in range(4)} <= spawned
    assert _gone(spawned)


def test_processes_for_follow_the_runner_settings():
    big = Settings.model_validate({"runner": {"processes_from_episodes": 1_000}})
    assert worker_pool.processes_for(big, 1_000) == 2
    assert worker_pool.processes_for(big, 999) == 0
    never = Settings.model_validate({"runner": {"processes_from_episodes": 0}})
    assert worker_pool.processes_for(never, 10**9) == 0
    dask = Settings.model_validate({"runner": {"kind": "dask", "processes_from_episodes": 1}})
    assert worker_pool.processes_for(dask, 10**9) == 0


@pytest.mark.slow
def test_the_night_takes_up_its_started_workers_and_stops_them(tmp_path, monkeypatch):
    """A home over the threshold: the night's task computes on the pool started with the run
    (not one of its own), and no worker outlives the run; the next night, with nothing new,
    shuts its started pool down after the plan and runs no partition in processes."""
    taken: list[ComputePool | None] = []
    real_take = worker_pool.take

    def spy(run_id: str, workers: int) -> ComputePool | None:
        pool = real_take(run_id, workers)
        taken.append(pool)
        return pool

    monkeypatch.setattr("flows.nightly.take_workers", spy)
    settings = load_settings(home=tmp_path, runner={"processes_from_episodes": 1})
    stores = open_stores(settings)
    ingest_records(stores, settings, RunContext(now=NOW), _seed_scenario(),
                   embedder=HashEmbedder(384), source="episodes.jsonl")  # fmt: skip
    before = {p.pid for p in multiprocessing.active_children()}

    first = run_nightly(settings, now=NOW)
    assert first["partition_processes"] == 2
    assert first["candidates_by_status"]
    assert len(taken) == 1 and isinstance(taken[0], ComputePool)  # the warm one
    assert not worker_pool._pools  # nothing left waiting for a task

    again = run_nightly(settings, now=NOW + timedelta(days=1))
    assert again["partition_processes"] == 0  # nothing new: the plan wants no processes
    assert len(taken) == 1  # no task asked for a pool
    assert not worker_pool._pools
    assert _gone({p.pid for p in multiprocessing.active_children()} - before)
