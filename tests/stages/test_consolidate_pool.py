"""The process path of consolidation (stages/consolidate_pool.py) against the in-thread one.

Real worker processes (spawn), real Lance and DuckDB on tmp homes: a home of three partitions
is consolidated once partition by partition in-thread (``consolidate_partition``, what the
threads runner's tasks call) and once with the compute in two worker processes; every table
must hold the same rows (minus run ids and write times), on the first night and on a second
one with new episodes. A run SIGKILLed inside a group of partitions sharing a commit converges
on rerun, the groups before it kept.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memory_core.config import Settings, load_settings
from memory_core.context import RunContext
from memory_core.crash import KILL_ENV
from memory_core.embed import HashEmbedder
from memory_core.stages.consolidate import consolidate_partition, consolidation_plan
from memory_core.stages.consolidate_pool import (
    WORKER_ENVIRONMENT,
    _worker_environment,
    consolidate_in_processes,
)
from memory_core.stages.embed import embed_episodes
from memory_core.stages.ingest import ingest_records
from memory_core.stages.shared_state import read_shared_state
from memory_core.stores import Stores, open_stores
from memory_core.stores.candidates import list_candidates
from memory_core.stores.ledger import ledger_has
from tests.flows.crash_kit import diff, scenario_lines, snapshot

NIGHT1 = datetime(2026, 8, 1, tzinfo=UTC)
NIGHT2 = datetime(2026, 8, 2, tzinfo=UTC)
NAMESPACES = ("it", "hr", "ops")


def _lines(tag: str) -> list[str]:
    """The crash scenario (procedures, counterexamples, preferences) once per namespace, ids
    made unique by ``tag`` and the namespace."""
    out = []
    for namespace in NAMESPACES:
        for line in scenario_lines():
            row = json.loads(line)
            row["namespace"] = namespace
            row["episode_id"] = f"{tag}-{namespace}-{row['episode_id']}"
            if tag != "a":  # the second night's episodes happen later
                row["occurred_at"] = "2026-07-31" + row["occurred_at"][10:]
            out.append(json.dumps(row))
    return out


def _add(settings: Settings, lines: list[str], now: datetime) -> None:
    stores, embedder, ctx = open_stores(settings), HashEmbedder(384), RunContext(now=now)
    ingest_records(stores, settings, ctx, lines, embedder=embedder, source="episodes.jsonl")
    embed_episodes(stores, settings, ctx, embedder=embedder)


def _night(
    stores: Stores, settings: Settings, now: datetime, *, processes: int, shared: bool = False
) -> list[Any]:
    ctx = RunContext(now=now, run_id=f"run-{now:%d}")
    units = [p.unit for p in consolidation_plan(stores, settings, recluster=False)]
    if processes:
        out = consolidate_in_processes(
            stores, settings, ctx, units, recluster=False, workers=processes
        )
    else:
        once = read_shared_state(stores) if shared else None
        out = [
            consolidate_partition(stores, settings, ctx, u, recluster=False, shared=once)
            for u in units
        ]
    for result in out:
        result.pop("seconds", None)  # wall time, not a result
    return out


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three partitions ingested and embedded, nothing consolidated; cases work on copies."""
    home = tmp_path_factory.mktemp("pool") / "home"
    _add(load_settings(home=home), _lines("a"), NIGHT1)
    return home


def _copy(template: Path, to: Path) -> tuple[Settings, Stores]:
    shutil.copytree(template, to)
    settings = load_settings(home=to)
    return settings, open_stores(settings)


@pytest.mark.slow
def test_process_path_stores_what_the_thread_path_stores(template: Path, tmp_path: Path) -> None:
    snaps, results = {}, {}
    for processes in (0, 2):
        settings, stores = _copy(template, tmp_path / f"home{processes}")
        first = _night(stores, settings, NIGHT1, processes=processes)
        _add(settings, _lines("b"), NIGHT2)
        second = _night(stores, settings, NIGHT2, processes=processes)
        snaps[processes], results[processes] = snapshot(stores), (first, second)
    first, second = results[2]
    assert len(first) == len(NAMESPACES) and not any(r["skipped"] for r in first)
    assert sum(r["mine"]["passed"] for r in first) >= len(NAMESPACES)  # something was mined
    assert all(r["cluster"]["new_members"] > 0 for r in second)  # the second night had work
    assert results[2] == results[0]
    assert not set(WORKER_ENVIRONMENT) & set(os.environ)  # the workers' setting was not kept
    problems = diff(snaps[0], snaps[2])
    assert not problems, "\n".join(problems)
    assert snaps[2]["candidates"] and snaps[2]["cluster_members"]
    assert _stored_hashes_hold(stores)  # the workers' hashes are those of what was stored


def _stored_hashes_hold(stores: Stores) -> int:
    """Each stored candidate's ``content_hash`` and ``score_basis`` columns are the ones its
    stored body gives (the pool's workers hash the candidates they build, not the writer);
    returns how many were checked."""
    with stores.meta.connect() as con:
        rows = con.execute(
            "SELECT candidate_id, content_hash, score_basis FROM candidates"
        ).fetchall()
    stored = {c.candidate_id: c for c in list_candidates(stores.meta)}
    assert stored.keys() == {cid for cid, _, _ in rows}
    for cid, chash, basis in rows:
        assert (chash, basis) == (stored[cid].content_hash(), stored[cid].score_basis()), cid
    return len(rows)


def test_the_thread_path_stores_the_same_with_the_nights_shared_state(
    template: Path, tmp_path: Path
) -> None:
    """A night's partitions given their small state as read once for the night store what
    each partition's own reads make them store, on a first night and on one that adds."""
    snaps, results = {}, {}
    for shared in (False, True):
        settings, stores = _copy(template, tmp_path / f"home{shared}")
        first = _night(stores, settings, NIGHT1, processes=0, shared=shared)
        _add(settings, _lines("b"), NIGHT2)
        second = _night(stores, settings, NIGHT2, processes=0, shared=shared)
        snaps[shared], results[shared] = snapshot(stores), (first, second)
    assert all(r["cluster"]["new_members"] > 0 for r in results[True][1])
    assert results[True] == results[False]
    problems = diff(snaps[False], snaps[True])
    assert not problems, "\n".join(problems)


def _spawned_sees(name: str) -> str:
    """What a process started now finds in its environment (as ``spawn`` starts workers)."""
    code = f"import os; print(os.environ.get({name!r}, '<unset>'))"
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, check=True)
    return out.stdout.decode().strip()


def test_workers_are_spawned_with_their_malloc_setting_unless_the_user_set_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ((name, value),) = WORKER_ENVIRONMENT.items()
    monkeypatch.delenv(name, raising=False)
    with _worker_environment():
        assert _spawned_sees(name) == value
    assert name not in os.environ and _spawned_sees(name) == "<unset>"
    monkeypatch.setenv(name, "8")  # the user's own choice is neither replaced nor removed
    with _worker_environment():
        assert _spawned_sees(name) == "8"
    assert os.environ[name] == "8"


def test_a_rerun_skips_what_the_ledger_holds(template: Path, tmp_path: Path) -> None:
    settings, stores = _copy(template, tmp_path / "home")
    _night(stores, settings, NIGHT1, processes=2)
    before = snapshot(stores)
    again = _night(stores, settings, NIGHT1, processes=2)
    assert [r["skipped"] for r in again] == [True] * len(NAMESPACES)
    assert not diff(before, snapshot(stores))


_KILLED = """
import sys
from datetime import datetime
from memory_core.config import load_settings
from memory_core.context import RunContext
from memory_core.stages.consolidate import consolidation_plan
from memory_core.stages.consolidate_pool import consolidate_in_processes
from memory_core.stores import open_stores

settings = load_settings(home=sys.argv[1])
stores = open_stores(settings)
units = [p.unit for p in consolidation_plan(stores, settings, recluster=False)]
ctx = RunContext(now=datetime.fromisoformat(sys.argv[2]), run_id="run-killed")
consolidate_in_processes(stores, settings, ctx, units, recluster=False, workers=2, per_commit=2)
"""


@pytest.mark.slow
@pytest.mark.parametrize("point", ["partition.mined#2", "mine.upserted#3"])
def test_a_run_killed_between_partitions_converges(
    point: str, template: Path, tmp_path: Path
) -> None:
    settings, stores = _copy(template, tmp_path / "clean")
    _night(stores, settings, NIGHT1, processes=2)
    expected = snapshot(stores)

    home = tmp_path / "killed"
    shutil.copytree(template, home)  # not opened here: the killed process must get the file
    env = {**os.environ, KILL_ENV: point}
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED, str(home), NIGHT1.isoformat()],
        env=env, capture_output=True, timeout=300, check=False,
    )  # fmt: skip
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    settings = load_settings(home=home)
    stores = open_stores(settings)
    plan = consolidation_plan(stores, settings, recluster=False)
    done = [
        ledger_has(stores.meta, stage=p.unit.stage, partition_key=p.unit.partition.key,
                   input_hash=p.unit.input_hash)
        for p in plan
    ]  # fmt: skip
    # two partitions a commit: the groups before the kill's committed whole, its own left
    # nothing (the kill at the 2nd partition undoes the 1st too)
    committed = 2 * ((int(point[-1]) - 1) // 2)
    assert done == [True] * committed + [False] * (len(plan) - committed)

    rerun = _night(stores, settings, NIGHT1, processes=2)
    assert [r["skipped"] for r in rerun] == done
    problems = diff(expected, snapshot(stores))
    assert not problems, f"after a kill at {point}:\n" + "\n".join(problems)
