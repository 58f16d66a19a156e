"""The stage-ledger and watermark protocol as library code, without Prefect.

Real DuckDB (and, for consolidation, real Lance) in a temporary home: a unit of work the ledger
has as done is skipped; the watermark moves only after the work committed (a failing work moves
nothing, so the rerun still sees the episodes as new); a rerun of consolidation is idempotent.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.context import Partition, RunContext
from memory_core.stages.consolidate import consolidate_partition, consolidation_plan
from memory_core.stages.partitions import plan_partitions
from memory_core.stages.stage_ledger import LedgeredWork, run_once
from memory_core.stores.extract import ExtractedFactRow, write_extraction
from memory_core.stores.ledger import get_watermarks, ledger_done, ledger_has
from memory_core.stores.meta import MetaStore

NOW = datetime(2026, 8, 1, 12, 0, tzinfo=UTC)
PART = Partition("acme", "it")


def _unit(input_hash: str = "h1", at: datetime | None = NOW) -> LedgeredWork:
    return LedgeredWork(stage="test", partition=PART, input_hash=input_hash, watermark_at=at)


@pytest.fixture
def meta(tmp_path: Any) -> MetaStore:
    store = MetaStore(tmp_path / "meta.duckdb")
    store.migrate()
    return store


def test_work_recorded_done_is_skipped(meta: MetaStore) -> None:
    calls: list[int] = []

    def work() -> dict[str, Any]:
        calls.append(1)
        return {"n": len(calls)}

    first = run_once(meta, _unit(), work, run_id="run_a", now=NOW)
    again = run_once(meta, _unit(), work, run_id="run_b", now=NOW)
    assert first == {"partition": PART.key, "skipped": False, "n": 1}
    assert again == {"partition": PART.key, "skipped": True}
    assert calls == [1]
    # another input for the same partition is new work
    other = run_once(meta, _unit("h2"), work, run_id="run_c", now=NOW)
    assert other["skipped"] is False and calls == [1, 1]


def test_ledger_done_answers_each_key_as_ledger_has(meta: MetaStore) -> None:
    """The process pool's one read of the night's units: the same answer, key by key, as a
    ``ledger_has`` each (another hash, stage or partition is not done)."""
    run_once(meta, _unit("h1"), dict, run_id="run_a", now=NOW)
    other = LedgeredWork(stage="test", partition=Partition("acme", "hr"), input_hash="h9",
                         watermark_at=NOW)  # fmt: skip
    run_once(meta, other, dict, run_id="run_a", now=NOW)
    keys = [
        (stage, part, chash)
        for stage in ("test", "other")
        for part in (PART.key, other.partition.key, "nobody/none")
        for chash in ("h1", "h2", "h9")
    ]
    expected = {
        k for k in keys if ledger_has(meta, stage=k[0], partition_key=k[1], input_hash=k[2])
    }
    assert expected == {("test", PART.key, "h1"), ("test", other.partition.key, "h9")}
    assert ledger_done(meta, keys) == expected
    assert ledger_done(meta, []) == set()


def test_watermark_moves_only_after_the_work_committed(meta: MetaStore) -> None:
    def failing() -> dict[str, Any]:
        assert get_watermarks(meta, stage="test") == {}, "watermark moved before the work"
        raise RuntimeError("work failed")

    with pytest.raises(RuntimeError):
        run_once(meta, _unit(), failing, run_id="run_a", now=NOW)
    assert get_watermarks(meta, stage="test") == {}
    assert not ledger_has(meta, stage="test", partition_key=PART.key, input_hash="h1")

    seen: list[dict[tuple[str, str], datetime]] = []

    def work() -> dict[str, Any]:
        seen.append(get_watermarks(meta, stage="test"))
        return {}

    run_once(meta, _unit(), work, run_id="run_b", now=NOW)
    assert seen == [{}]
    marks = get_watermarks(meta, stage="test")
    assert {k: v.astimezone(UTC) for k, v in marks.items()} == {("acme", "it"): NOW}
    assert ledger_has(meta, stage="test", partition_key=PART.key, input_hash="h1")


def test_no_watermark_when_the_work_reaches_none(meta: MetaStore) -> None:
    run_once(meta, _unit(at=None), dict, run_id="run_a", now=NOW)
    assert get_watermarks(meta, stage="test") == {}
    assert ledger_has(meta, stage="test", partition_key=PART.key, input_hash="h1")


@settings(max_examples=25, deadline=None)
@given(hours=st.lists(st.integers(min_value=0, max_value=1000), min_size=1, max_size=6))
def test_watermark_never_goes_back(tmp_path_factory: Any, hours: list[int]) -> None:
    """Whatever order units finish in, the watermark is the newest time any of them reached."""
    store = MetaStore(tmp_path_factory.mktemp("wm") / "meta.duckdb")
    store.migrate()
    # inside one session, as consolidate_partition calls run_once: the property is which time
    # wins; a short connection per ledger read and write (~0.05 CPU s each, ~20 an example)
    # is what the other tests here go through
    with store.session():
        for i, h in enumerate(hours):
            at = NOW + timedelta(hours=h)
            run_once(store, _unit(f"h{i}", at), dict, run_id=f"run_{i}", now=NOW)
    (mark,) = get_watermarks(store, stage="test").values()
    assert mark.astimezone(UTC) == NOW + timedelta(hours=max(hours))


def test_atomic_commits_once_and_leaves_nothing_when_it_fails(meta: MetaStore) -> None:
    """Inside ``atomic`` the steps' own transactions join one: what a step wrote is seen by
    the next step on the thread, by no other thread until the end, and not at all when a
    later step fails (the partition's clusters, candidates, watermark and ledger entry land
    together or not at all)."""
    import threading

    def others_see() -> bool:
        box: list[bool] = []

        def read() -> None:
            box.append(ledger_has(meta, stage="test", partition_key=PART.key, input_hash="h1"))

        thread = threading.Thread(target=read)
        thread.start()
        thread.join()
        return box[0]

    def failing() -> dict[str, Any]:
        raise RuntimeError("mining failed")

    with meta.session():
        with pytest.raises(RuntimeError), meta.atomic():
            run_once(meta, _unit(), dict, run_id="run_a", now=NOW)  # commits alone without atomic
            assert ledger_has(meta, stage="test", partition_key=PART.key, input_hash="h1")
            assert not others_see()
            run_once(meta, _unit("h2"), failing, run_id="run_a", now=NOW)
        assert not ledger_has(meta, stage="test", partition_key=PART.key, input_hash="h1")
        assert get_watermarks(meta, stage="test") == {}
        with meta.atomic():
            run_once(meta, _unit(), dict, run_id="run_b", now=NOW)
        assert others_see()
    assert ledger_has(meta, stage="test", partition_key=PART.key, input_hash="h1")


def test_atomic_steps_may_leave_a_result_unfinished(meta: MetaStore) -> None:
    """A step that reads one row of a longer result (``fetchone``) does not block the next
    step's writes on the shared connection (a cursor per step was closed after it)."""
    import pyarrow as pa

    with meta.session(), meta.atomic():
        with meta.connect() as con:
            assert con.execute("SELECT * FROM range(100000)").fetchone() == (0,)
        with meta.transaction() as con:
            con.register("_rows", pa.table({"n": [1, 2]}))
            assert con.execute("SELECT sum(n) FROM _rows").fetchall() == [(3,)]
            con.unregister("_rows")
        run_once(meta, _unit(), dict, run_id="run_a", now=NOW)
    assert ledger_has(meta, stage="test", partition_key=PART.key, input_hash="h1")


def test_partition_failing_after_clustering_leaves_no_clusters(
    mem: Any, kit: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition is one transaction: mining failing after clustering leaves no clusters,
    no watermark and no ledger entry, and the rerun stores what an unbroken run stores."""
    import memory_core.stages.consolidate as consolidate

    mem.ingest(kit.seed_scenario())
    ctx = RunContext(now=NOW, run_id="run_1")
    (planned,) = consolidation_plan(mem.stores, mem.settings, recluster=False)
    before = mem.snapshot()

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("mining failed")

    real = consolidate.mine_partition
    monkeypatch.setattr(consolidate, "mine_partition", broken)
    with pytest.raises(RuntimeError):
        consolidate_partition(mem.stores, mem.settings, ctx, planned.unit, recluster=False)
    assert mem.snapshot() == before
    monkeypatch.setattr(consolidate, "mine_partition", real)
    done = consolidate_partition(mem.stores, mem.settings, ctx, planned.unit, recluster=False)
    assert done["skipped"] is False and done["cluster"]["new_members"] > 0
    assert done["mine"]["procedural"] > 0


def test_consolidation_rerun_is_idempotent(mem: Any, kit: SimpleNamespace) -> None:
    """Run the library's consolidation twice on the same input: the second run skips every
    partition and writes nothing; the watermark reached the newest episode."""
    mem.ingest(kit.seed_scenario() + kit.seed_scenario(tenant="beta", prefix="b"))
    ctx = RunContext(now=NOW, run_id="run_1")
    plan = consolidation_plan(mem.stores, mem.settings, recluster=False)
    assert [p.unit.partition for p in plan] == [Partition("acme", "it"), Partition("beta", "it")]
    first = [consolidate_partition(mem.stores, mem.settings, ctx, p.unit, recluster=False)
             for p in plan]  # fmt: skip
    assert [r["skipped"] for r in first] == [False, False]
    assert all(r["mine"]["procedural"] > 0 for r in first)
    after_first = mem.snapshot()
    assert all(p.new_episodes == 0 for p in plan_partitions(mem.stores))

    again = consolidation_plan(mem.stores, mem.settings, recluster=False)
    assert [p.unit.input_hash for p in again] == [p.unit.input_hash for p in plan]
    ctx2 = RunContext(now=NOW, run_id="run_2")
    second = [consolidate_partition(mem.stores, mem.settings, ctx2, p.unit, recluster=False)
              for p in again]  # fmt: skip
    assert [r["skipped"] for r in second] == [True, True]
    assert mem.snapshot() == after_first


def test_changed_facts_change_only_their_partitions_input(mem: Any, kit: SimpleNamespace) -> None:
    """Extracted facts are part of a partition's input: new facts in one partition give it a
    new input hash (mined again), the other partition keeps its hash (skipped)."""
    mem.ingest(kit.seed_scenario() + kit.seed_scenario(tenant="beta", prefix="b"))
    before = {p.unit.partition: p.unit.input_hash
              for p in consolidation_plan(mem.stores, mem.settings, recluster=False)}  # fmt: skip
    fact = ExtractedFactRow(
        fact_id="f1", tenant_id="acme", namespace="it", subject_id="ana", session_key="s-ok0",
        predicate="prefers", object="wired network", kind="preference", evidence=["ok0"],
        authority="user", source="replay",
    )  # fmt: skip
    with mem.stores.meta.transaction() as con:
        write_extraction(con, [], [fact], run_id="run_x", now=NOW)
    after = {p.unit.partition: p.unit.input_hash
             for p in consolidation_plan(mem.stores, mem.settings, recluster=False)}  # fmt: skip
    assert after[Partition("beta", "it")] == before[Partition("beta", "it")]
    assert after[Partition("acme", "it")] != before[Partition("acme", "it")]


def test_index_fold_changes_no_partition_read(mem: Any, kit: SimpleNamespace) -> None:
    """Folding the day's episodes into the scan filters' indices leaves every partition's
    plan, its filtered reads and its consolidation exactly as without the fold; a second
    fold finds nothing to do."""
    from memory_core.stages.consolidate import index_episodes
    from memory_core.stores.maintenance import index_health

    mem.ingest(kit.seed_scenario() + kit.seed_scenario(tenant="beta", prefix="b"))
    where = "tenant_id = 'acme' AND namespace = 'it' AND status = 'active'"
    before = mem.stores.lance.scan("episodes", where=where, columns=["episode_id"])
    plan = [p.unit for p in consolidation_plan(mem.stores, mem.settings, recluster=False)]
    assert index_episodes(mem.stores) > 0
    assert index_episodes(mem.stores) == 0
    health = index_health(mem.stores.lance, "episodes")
    assert {health[f"{c}_idx"] for c in ("tenant_id", "namespace", "status")} == {0}
    after = mem.stores.lance.scan("episodes", where=where, columns=["episode_id"])
    assert sorted(after.column("episode_id").to_pylist()) == sorted(
        before.column("episode_id").to_pylist()
    )
    assert [p.unit for p in consolidation_plan(mem.stores, mem.settings, recluster=False)] == plan
    more = kit.seed_scenario(prefix="late")
    mem.ingest(more)  # appended after the fold: the scan still sees them
    assert mem.stores.lance.count("episodes", where) == before.num_rows + len(more)
    assert index_episodes(mem.stores) == len(more)
