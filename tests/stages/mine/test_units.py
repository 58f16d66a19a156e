"""Incremental mining: units whose input is unchanged are carried forward, and what is stored
after any sequence of nights equals what mining every unit again would store."""

from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core.context import Partition
from memory_core.stages.mine.units import plan_units
from memory_core.stores.mine_units import load_units


def _second_problem(kit: Any) -> list[dict[str, Any]]:
    """Error 800: clearing the cache works for three users (a unit of its own)."""
    return [
        kit.make_episode(
            f"dns{i}", minutes=400 + i * 10, subject_id=who, goal="DNS lookups fail with 800",
            actions=["flush dns cache", "restart resolver"],
            conditions={"error_code": "800", "os": "linux"},
        )
        for i, who in enumerate(["ana", "ben", "cy", "dee"])
    ]  # fmt: skip


def _remined_from_scratch(mem: Any, now: Any) -> dict[str, int]:
    """Forget the unit state, mine every unit again; what that upsert changed."""
    with mem.stores.meta.transaction() as con:
        con.execute("DELETE FROM mine_units")
    return mem.mine(now=now).upserted


def test_an_unchanged_unit_is_carried_forward_and_a_touched_one_mined(mem, kit) -> None:
    mem.ingest([*kit.seed_scenario(), *_second_problem(kit)])
    mem.consolidate()
    first = load_units(mem.stores.meta, "acme", "it")
    assert len(first) == 2
    later = kit.NOW + timedelta(days=1)
    extra = kit.make_episode(
        "dns9", minutes=900, subject_id="eve", goal="DNS lookups fail with 800",
        actions=["flush dns cache", "restart resolver"],
        conditions={"error_code": "800", "os": "linux"},
    )  # fmt: skip
    mem.ingest([extra], now=later)
    mem.cluster(now=later)
    result = mem.mine(now=later)
    assert (result.units_mined, result.units_kept) == (1, 1)
    second = load_units(mem.stores.meta, "acme", "it")
    changed = {k for k in first if first[k][0] != second[k][0]}
    assert changed == {"code:800"}
    assert second["code:720"] == first["code:720"]
    # nothing mining every unit again would change
    assert _remined_from_scratch(mem, later)["updated"] == 0


def test_a_policy_change_remines_every_unit(tmp_path: Path, kit) -> None:
    mem = kit.open_mem(tmp_path / "a")
    mem.ingest([*kit.seed_scenario(), *_second_problem(kit)])
    mem.consolidate()
    again = kit.open_mem(tmp_path / "a", policy={"min_support": 4})
    result = again.mine(now=kit.NOW + timedelta(days=1))
    assert (result.units_mined, result.units_kept) == (2, 0)


def test_a_home_mined_by_an_older_miner_is_mined_again_once(mem, kit, monkeypatch) -> None:
    """Units stored by the miner before a change of what candidates hold (``_VERSION``; 2:
    procedures quote only values two sources gave) are all mined again on the next night, so
    no stored procedure keeps what the older miner wrote; the night after carries them."""
    from memory_core.stages.mine import units

    mem.ingest([*kit.seed_scenario(), *_second_problem(kit)])
    with monkeypatch.context() as older:
        older.setattr(units, "_VERSION", units._VERSION - 1)
        mem.consolidate()
    upgraded = mem.mine(now=kit.NOW + timedelta(days=1))
    assert (upgraded.units_mined, upgraded.units_kept) == (2, 0)
    after = mem.mine(now=kit.NOW + timedelta(days=2))
    assert (after.units_mined, after.units_kept) == (0, 2)


def test_fingerprints_do_not_depend_on_row_order(mem, kit) -> None:
    mem.ingest([*kit.seed_scenario(), *_second_problem(kit)])
    mem.consolidate()
    from memory_core.stages.mine.stage import _scan
    from memory_core.stores import clusters as cluster_store

    _, table, has_actions = _scan(mem.stores.lance, Partition("acme", "it"))
    info, members = cluster_store.load_partition(mem.stores.meta, "acme", "it", centroids=False)
    plan = plan_units(table, has_actions, info, members, ["cfg"])
    order = list(reversed(range(table.num_rows)))
    flipped = plan_units(table.take(order), has_actions.take(order), info, members, ["cfg"])
    assert plan.fingerprints == flipped.fingerprints
    assert plan_units(table, has_actions, info, members, ["other"]).fingerprints.keys() == (
        plan.fingerprints.keys()
    )
    assert plan_units(table, has_actions, info, members, ["other"]).fingerprints != (
        plan.fingerprints
    )


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    nights=st.lists(st.integers(0, 3), min_size=17, max_size=17),
    revoked=st.none() | st.tuples(st.integers(0, 13), st.integers(1, 3)),
)
def test_incremental_nights_store_what_a_full_remine_stores(
    kit, nights: list[int], revoked: tuple[int, int] | None
) -> None:
    """Episodes arrive over up to four nights in any split (a unit mined one night gets only
    its new episodes the next: its groups grow), one episode of a unit may be revoked before
    a later night (the unit's input shrinks); after every night the stored candidates,
    evidence and clusters are exactly what mining every unit again gives."""
    from memory_core.context import RunContext
    from memory_core.stages.forget.revoke import revoke_source

    episodes = [*kit.seed_scenario(), *_second_problem(kit)]
    episodes += [kit.statement("s1", "ana", "theme", "dark", minutes=1),
                 kit.statement("s2", "ana", "theme", "dark", minutes=2),
                 kit.statement("s3", "ben", "theme", "dark", minutes=3)]  # fmt: skip
    assert len(episodes) == len(nights)
    with tempfile.TemporaryDirectory() as tmp:
        mem = kit.open_mem(Path(tmp) / "home")
        for night in range(4):
            batch = [e for e, n in zip(episodes, nights, strict=True) if n == night]
            now = kit.NOW + timedelta(days=night)
            if batch:
                mem.ingest(batch, now=now)
            if revoked is not None and revoked[1] == night:
                victim = episodes[revoked[0]]["episode_id"]  # an episode with actions
                if nights[revoked[0]] < night:  # stored by an earlier night
                    ctx = RunContext(now=now)
                    revoke_source(mem.stores, mem.settings, ctx, victim, reason="test")
            if all(n > night for n in nights):
                continue  # nothing stored yet: the home has no tables to mine
            mem.consolidate(now=now)
            before = mem.snapshot()
            upserted = _remined_from_scratch(mem, now)
            assert upserted["inserted"] == upserted["updated"] == 0, (night, upserted)
            assert mem.snapshot() == before
