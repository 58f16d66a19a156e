"""Revocation through lineage: episode -> fact -> procedure, and what survives."""

from __future__ import annotations

import json

import pytest
from forget_rows import add_fact, add_procedure, prov, status_of

from memory_core.context import RunContext
from memory_core.errors import NotFound
from memory_core.stages.forget import revoke_source
from memory_core.stores.candidates import list_candidates
from memory_core.stores.lineage import sources_of


@pytest.fixture
def world(mem, kit):
    s = kit.statement
    mem.ingest([
        *kit.seed_scenario(),
        s("st1", "ana", "editor", "vim"), s("st2", "ana", "editor", "vim", minutes=5),
        s("st3", "ana", "theme", "dark"), s("st4", "ana", "theme", "dark", minutes=5),
        s("st5", "ana", "theme", "dark", minutes=9),
    ])  # fmt: skip
    mem.consolidate()
    st = mem.stores
    add_fact(st, "F1", sources=prov(st, ["st1", "st2"]), subject="ana")
    add_fact(st, "F2", sources=prov(st, ["st3", "st4", "st5"]), subject="ana", predicate="theme",
             obj="dark")  # fmt: skip
    ok = prov(st, ["ok0", "ok1", "ok2", "ok3"])
    add_procedure(st, "P1", sources=ok + prov(st, ["F1"], kind="fact"))
    add_procedure(st, "P2", sources=ok, name="fix vpn 720 (plain)")
    return mem


def _revoke(mem, kit, source, reason="poisoned"):
    return revoke_source(mem.stores, mem.settings, RunContext(now=kit.NOW), source, reason=reason)


def test_revocation_walks_two_levels(world, kit):
    receipt = _revoke(world, kit, "st1", "user never said that").receipt
    st = world.stores
    assert status_of(st, "episodes", "episode_id", "st1") == "revoked"
    assert status_of(st, "facts", "fact_id", "F1") == "revoked"
    assert status_of(st, "procedures", "procedure_id", "P1") == "revoked"  # cites F1
    assert status_of(st, "procedures", "procedure_id", "P2") == "active"
    changed = {c["id"]: c for c in receipt["changed"]}
    assert (
        changed["F1"]["action"] == "revoked"
        and "1 statement(s) left < 2" in changed["F1"]["reason"]
    )
    assert changed["P1"]["reason"].endswith("cites revoked F1")
    assert "P2" not in changed
    assert receipt["reason"] == "user never said that"
    with st.meta.connect() as con:
        body = json.loads(con.execute("SELECT body FROM receipts WHERE receipt_id = ?",
                                      [receipt["receipt_id"]]).fetchone()[0])  # fmt: skip
    assert body["counts"] == receipt["counts"]


def test_fact_with_enough_other_support_survives(world, kit):
    receipt = _revoke(world, kit, "st3").receipt
    st = world.stores
    assert status_of(st, "facts", "fact_id", "F2") == "active"
    row = st.lance.scan("facts", where="fact_id = 'F2'", columns=["provenance"]).to_pylist()[0]
    assert [p["source_id"] for p in json.loads(row["provenance"])] == ["st4", "st5"]
    assert [e.source_id for e in sources_of(st.meta, "F2")] == ["st4", "st5"]
    assert {c["id"]: c["action"] for c in receipt["changed"]}["F2"] == "sources_removed"


def test_procedure_rechecked_on_support_and_subjects(world, kit):
    st = world.stores
    _revoke(world, kit, "ok1")  # ben: 3 episodes from ana and cy remain -> passes
    assert status_of(st, "procedures", "procedure_id", "P2") == "active"
    receipt = _revoke(world, kit, "ok2").receipt  # cy: 2 episodes left < min_support 3
    assert status_of(st, "procedures", "procedure_id", "P2") == "revoked"
    reasons = {c["id"]: c.get("reason", "") for c in receipt["changed"]}
    assert "min_support: 2 supporting episodes left < 3" in reasons["P2"]
    # the mined candidates that rested on those episodes are revoked too, with the reason
    cands = [c for c in list_candidates(st.meta) if "ok0" in c.support_ids]
    assert cands and all(c.status == "revoked" and "ok2" not in c.support_ids for c in cands)
    assert all(c.reason.startswith("poisoned: min_support") for c in cands)


def test_revoking_twice_changes_nothing_more(world, kit):
    _revoke(world, kit, "st1")
    again = _revoke(world, kit, "st1").receipt
    assert again["changed"] == []


def test_unknown_source_is_an_error(world, kit):
    with pytest.raises(NotFound, match="no source 'nope'"):
        _revoke(world, kit, "nope")
