"""Supersession rules and bitemporal reads, tested directly (pure functions and real Lance)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memory_core.models import Authority
from memory_core.stages.promote.plan import PromotionPlan
from memory_core.stages.promote.supersede import (
    Verdict,
    fact_key,
    next_version,
    resolve,
    superseded_version,
)
from memory_core.stores.facts import bitemporal_filter, list_rows, write_versions

T0 = datetime(2026, 7, 1, tzinfo=UTC)


def fact(fid: str, obj: str, *, day: int, authority: str = "user_statement", **extra):
    return {
        "fact_id": fid, "tenant_id": "acme", "namespace": "it", "subject_id": "team-a",
        "predicate": "owner", "object": obj, "conditions": "{}",
        "valid_from": T0 + timedelta(days=day), "valid_to": None, "status": "active",
        "authority": authority, "recorded_at": T0, "recorded_to": None, "supersedes": None,
        "superseded_by": None, **extra,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("old", "new", "verdict"),
    [
        (None, fact("b", "Mina", day=5), Verdict.new),
        (fact("a", "Jin", day=0), fact("b", " jin ", day=5), Verdict.unchanged),
        (fact("a", "Jin", day=0), fact("b", "Mina", day=5), Verdict.supersede),
        # equal authority is enough; higher too
        (
            fact("a", "Jin", day=0, authority="user_statement"),
            fact("b", "Mina", day=5, authority="human_approved"),
            Verdict.supersede,
        ),
        # earlier or same valid time: held as a conflict
        (fact("a", "Jin", day=5), fact("b", "Mina", day=0), Verdict.conflict),
        (fact("a", "Jin", day=5), fact("b", "Mina", day=5), Verdict.conflict),
        # lower authority never supersedes, however late
        (
            fact("a", "Jin", day=0, authority="user_statement"),
            fact("b", "Mina", day=9, authority="observation"),
            Verdict.conflict,
        ),
    ],
)
def test_resolve(old, new, verdict):
    assert resolve("facts", old, new).verdict is verdict


def test_conflict_reason_names_the_rule_that_failed():
    res = resolve(
        "facts", fact("a", "Jin", day=5), fact("b", "Mina", day=0, authority="observation")
    )
    assert "not later in valid time" in res.reason
    assert "lower authority (observation < user_statement)" in res.reason
    assert res.reason.startswith("conflicts with a")


def test_reviewer_can_resolve_a_conflict():
    old, new = fact("a", "Jin", day=5), fact("b", "Mina", day=0)
    assert resolve("facts", old, new, force=True).verdict is Verdict.supersede


def test_superseded_version_closes_old_and_keeps_meaning_apart():
    old = fact("a", "Jin", day=0)
    now = T0 + timedelta(days=15)
    closed, version = superseded_version(
        "facts", old, now=now, valid_to=T0 + timedelta(days=1), superseded_by="b"
    )
    assert closed == {**old, "recorded_to": now}
    assert version["fact_id"] != "a"
    assert version["object"] == "Jin" and version["status"] == "superseded"
    assert version["valid_to"] == T0 + timedelta(days=1)
    assert version["recorded_at"] == now and version["recorded_to"] is None
    # a correction that starts before the old row leaves an empty interval, never a negative one
    _, early = superseded_version(
        "facts", fact("a", "Jin", day=5), now=now, valid_to=T0, superseded_by="b"
    )
    assert early["valid_to"] == early["valid_from"]


@pytest.mark.parametrize(
    ("old", "new", "version"),
    [
        (None, {}, "1.0.0"),
        ({"version": "1.0.0", "steps": ["a"]}, {"steps": ["a", "b"]}, "2.0.0"),
        (
            {"version": "2.1.0", "steps": ["a"], "preconditions": "{}"},
            {"steps": ["a"], "preconditions": '{"os":"win"}'},
            "2.2.0",
        ),
        (
            {"version": "1.2.3", "steps": ["a"], "effect": "x"},
            {"steps": ["a"], "effect": "y"},
            "1.2.4",
        ),
    ],
)
def test_next_version(old, new, version):
    assert next_version(old, new) == version


# --- property: whatever arrives in whatever order, one current active object per key ------

_change = st.tuples(
    st.sampled_from(["Jin", "Mina", "Kai"]),
    st.integers(min_value=0, max_value=30),
    st.sampled_from([Authority.observation.value, Authority.user_statement.value]),
    st.booleans(),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_change, min_size=1, max_size=8))
@example([("Jin", 0, "user_statement", False), ("Mina", 15, "user_statement", False)])
def test_plan_keeps_one_current_active_object_per_key(changes):
    current: dict = {}
    rows: dict[str, dict] = {}
    for step, (obj, day, authority, force) in enumerate(changes):
        now = T0 + timedelta(days=40 + step)
        plan = PromotionPlan("facts", dict(current))
        new = fact(f"f{step}", obj, day=day, authority=authority, recorded_at=now)
        res = plan.apply(f"c{step}", fact_key(new), new, now=now, force=force)
        for rid, row in {**plan.close, **plan.insert}.items():
            rows[rid] = row
        current = plan.current
        live = [r for r in rows.values() if r["recorded_to"] is None and r["status"] == "active"]
        assert len(live) <= 1
        if res.verdict is Verdict.supersede:
            assert new["supersedes"] is not None
            version = rows[new["supersedes"]]
            assert version["status"] == "superseded" and version["superseded_by"] == new["fact_id"]
            assert version["valid_to"] >= version["valid_from"]
        # nothing is ever deleted: every row id written stays
        assert all(r["fact_id"] in rows for r in rows.values())


# --- bitemporal filter on a real Lance table vs the definition in Python -------------------


def _visible(row: dict, as_of: datetime | None, known_at: datetime | None) -> bool:
    if known_at is None:
        known = row["recorded_to"] is None
    else:
        known = row["recorded_at"] <= known_at and (
            row["recorded_to"] is None or row["recorded_to"] > known_at
        )
    if as_of is None:
        return known
    return (
        known
        and (row["valid_from"] is None or row["valid_from"] <= as_of)
        and (row["valid_to"] is None or row["valid_to"] > as_of)
    )


_day = st.integers(min_value=0, max_value=20).map(lambda d: T0 + timedelta(days=d))
_row = st.tuples(_day, st.none() | st.integers(1, 10), _day, st.none() | st.integers(1, 10))


@pytest.fixture(scope="module")
def lance_rows(tmp_path_factory):
    from memory_core.stores.lance import LanceStore

    store = LanceStore(str(tmp_path_factory.mktemp("bt") / "lance"))
    store.ensure_tables(8)
    return store


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.lists(_row, min_size=1, max_size=6),
    st.none() | _day,
    st.none() | _day,
)
def test_bitemporal_filter_matches_its_definition(lance_rows, spans, as_of, known_at):
    store = lance_rows
    store.delete("facts", "true")
    rows = []
    for i, (vf, vlen, ra, rlen) in enumerate(spans):
        rows.append(
            fact(
                f"r{i}", f"o{i}", day=0, valid_from=vf,
                valid_to=vf + timedelta(days=vlen) if vlen else None,
                recorded_at=ra, recorded_to=ra + timedelta(days=rlen) if rlen else None,
                sensitivity="low", content_hash="h", vector=[0.0] * 8,
            )
        )  # fmt: skip
    write_versions(store, "facts", close=[], insert=rows)
    got = {r["fact_id"] for r in list_rows(store, "facts", as_of=as_of, known_at=known_at)}
    assert got == {r["fact_id"] for r in rows if _visible(r, as_of, known_at)}


def test_bitemporal_filter_text():
    assert bitemporal_filter(None, None) == "recorded_to IS NULL"
    text = bitemporal_filter(T0, T0)
    assert "recorded_at <= TIMESTAMP '2026-07-01T00:00:00.000000Z'" in text
    assert "(valid_to IS NULL OR valid_to > TIMESTAMP '2026-07-01T00:00:00.000000Z')" in text
    with pytest.raises(ValueError, match="timezone-aware"):
        bitemporal_filter(datetime(2026, 7, 1), None)


def test_write_versions_closes_a_row_only_once(lance_rows):
    store = lance_rows
    store.delete("facts", "true")
    base = fact("a", "Jin", day=0, sensitivity="low", content_hash="h", vector=[0.0] * 8)
    write_versions(store, "facts", close=[], insert=[base])
    first = T0 + timedelta(days=3)
    write_versions(store, "facts", close=[{**base, "recorded_to": first}], insert=[])
    write_versions(store, "facts", close=[{**base, "recorded_to": first + timedelta(1)}], insert=[])
    (row,) = store.scan("facts").to_pylist()
    assert row["recorded_to"] == first
    assert pa.types.is_timestamp(store.table("facts").schema.field("recorded_to").type)
