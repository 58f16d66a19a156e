"""Incremental mining: units whose input is unchanged are carried forward, and what is stored
after any sequence of nights equals what mining every unit again would store."""

from __future__ import annotations

import hashlib
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core.context import Partition
from memory_core.models import content_hash
from memory_core.stages.mine import units as units_module
from memory_core.stages.mine.units import plan_units, unit_key
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


def _reference_fingerprints(
    rows: list[tuple[str, str | None, bool]], cluster_of: dict[str, str],
    codes: dict[str, str | None], config: Any,
) -> dict[str, str]:  # fmt: skip
    """The fingerprints as ``units.py`` defines them, written plainly: per unit, the SHA-256 of
    the salt and its episodes' (cluster, id, content hash) lines in id order. Stored
    fingerprints must keep this value across rewrites of ``plan_units``: any other value makes
    every stored unit look touched, and the next night mines them all again."""
    lines: dict[str, list[tuple[str, str]]] = {}
    for eid, chash, with_actions in rows:
        if not with_actions or eid not in cluster_of:
            continue
        cid = cluster_of[eid]
        unit = unit_key(cid, codes[cid])
        lines.setdefault(unit, []).append((eid, f"{cid}\x1f{eid}\x1f{chash or ''}"))
    salt = content_hash([units_module._VERSION, config])
    return {
        unit: hashlib.sha256(
            (f"{salt}\n" + "\n".join(line for _, line in sorted(found))).encode()
        ).hexdigest()[:32]
        for unit, found in lines.items()
    }


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.text("abcde0123", min_size=1, max_size=4),
            st.none() | st.text("xyz", max_size=3),
            st.booleans(),
        ),
        max_size=30,
        unique_by=lambda r: r[0],
    ),
    clusters=st.lists(st.sampled_from(["c1", "c2", "c3", "c4"]), min_size=30, max_size=30),
    unclustered=st.sets(st.integers(0, 29), max_size=5),
    codes=st.fixed_dictionaries(
        {c: st.none() | st.sampled_from(["", "720", "800"]) for c in ["c1", "c2", "c3", "c4"]}
    ),
)
def test_fingerprints_are_their_definition(
    rows: list[tuple[str, str | None, bool]], clusters: list[str], unclustered: set[int],
    codes: dict[str, str | None],
) -> None:  # fmt: skip
    cluster_of = {row[0]: clusters[i] for i, row in enumerate(rows) if i not in unclustered}
    table = pa.table(
        {
            "episode_id": pa.array([r[0] for r in rows], pa.string()),
            "content_hash": pa.array([r[1] for r in rows], pa.string()),
        }
    )
    has_actions = pa.array([r[2] for r in rows], pa.bool_())
    members = pa.table(
        {
            "episode_id": pa.array(list(cluster_of), pa.string()),
            "cluster_id": pa.array(list(cluster_of.values()), pa.string()),
        }
    )
    info = pa.table(
        {
            "cluster_id": pa.array(list(codes), pa.string()),
            "error_code": pa.array(list(codes.values()), pa.string()),
        }
    )
    plan = plan_units(table, has_actions, info, members, ["cfg"])
    assert plan.fingerprints == _reference_fingerprints(rows, cluster_of, codes, ["cfg"])
    assert sorted(plan.episodes.get_column("episode_id").to_list()) == sorted(
        r[0] for r in rows if r[2] and r[0] in cluster_of
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
