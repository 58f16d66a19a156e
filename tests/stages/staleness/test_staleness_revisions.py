"""Source revisions: stale on a newer revision, revoked on deletion unless other support."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from promote_kit import at, consolidate, review_all, user_says

from memory_core.config import load_settings
from memory_core.context import RunContext
from memory_core.errors import ValidationFailed
from memory_core.recall import Recaller
from memory_core.stages.review import ReviewRequest, decide_batch
from memory_core.stages.staleness import run_staleness
from memory_core.stages.staleness.source_file import update_sources
from memory_core.stores import open_stores
from memory_core.stores.facts import list_rows
from memory_core.stores.lineage import sources_of
from memory_core.stores.review import get_items, list_batches
from memory_core.stores.sources import list_sources

NOW = at("2026-08-01T12:00:00Z")
LATER = at("2026-08-02T12:00:00Z")
LAST = at("2026-08-03T12:00:00Z")
KB = "kb/vpn-servers"


def _said(eid, subject, *, day, cites=True):
    ep = user_says(
        eid, subject, "vpn_server", "vpn1.acme.example", when=f"2026-07-{day:02d}T09:00:00Z"
    )
    if cites:
        ep["sources"] = [{"source_id": KB, "revision": "r1"}]
    return ep


def _revision(mem, revision, when, *, deleted=False, now=NOW):
    line = json.dumps(
        {"source_id": KB, "revision": revision, "changed_at": when, "deleted": deleted}
    )
    return update_sources(mem.stores, RunContext(now=now), [line], path="src.jsonl")


def _facts(mem):
    return {r["subject_id"]: r for r in list_rows(mem.stores.lance, "facts")}


@pytest.fixture
def bound(mem):
    """u1's fact rests on two statements citing the KB; u2's on three, only one citing it."""
    mem.ingest(
        [
            _said("a1", "u1", day=1), _said("a2", "u1", day=2),
            _said("b1", "u2", day=1), _said("b2", "u2", day=2, cites=False),
            _said("b3", "u2", day=3, cites=False),
        ]
    )  # fmt: skip
    consolidate(mem, NOW, cluster=False)
    review_all(mem, NOW)
    return mem


def _recall(reader, subject, **kw):
    got = reader.recall("vpn server", tenant_id="acme", subject_id=subject, now=LAST, **kw)
    return [r for r in got.records if r["table"] == "facts"]


def test_newer_revision_makes_bound_facts_stale_then_deletion_revokes_sole_dependents(bound):
    mem = bound
    facts = _facts(mem)
    assert {f["status"] for f in facts.values()} == {"active"}
    assert facts["u1"]["sources"] == [{"source_id": KB, "revision": "r1"}]
    assert any(
        e.source_kind == "corpus" for e in sources_of(mem.stores.meta, facts["u1"]["fact_id"])
    )
    reader = Recaller.from_settings(mem.settings, embedder=mem.embedder, access_log=False)
    assert [r["record_id"] for r in _recall(reader, "u1")] == [facts["u1"]["fact_id"]]

    # the revision the facts are bound to: nothing changes
    _revision(mem, "r1", "2026-07-01T00:00:00Z")
    assert run_staleness(mem.stores, mem.settings, RunContext(now=NOW))["revisions"]["stale"] == []

    _revision(mem, "r2", "2026-08-01T00:00:00Z", now=LATER)
    done = run_staleness(mem.stores, mem.settings, RunContext(now=LATER))
    assert sorted(done["revisions"]["stale"]) == sorted(f["fact_id"] for f in facts.values())
    assert {f["status"] for f in _facts(mem).values()} == {"stale"}
    assert _recall(reader, "u1") == []  # not served by default, and the open reader sees it
    (marked,) = _recall(reader, "u1", include_stale=True)
    assert marked["stale"] is True and "stale" in marked["reason"]
    (batch,) = list_batches(mem.stores.meta, status="open")
    assert batch.kind == "revalidate"
    assert {i.candidate_id for i in get_items(mem.stores.meta, batch.batch_id)} == {
        f["fact_id"] for f in facts.values()
    }
    # a second run queues nothing new and changes nothing
    again = run_staleness(mem.stores, mem.settings, RunContext(now=LATER))
    assert again["revisions"]["stale"] == [] and again["revisions"]["revalidate_batches"] == []

    _revision(mem, "r2", "2026-08-02T06:00:00Z", deleted=True, now=LAST)
    done = run_staleness(mem.stores, mem.settings, RunContext(now=LAST))
    (receipt,) = done["revisions"]["deleted_sources"]
    by_id = {c["id"]: c for c in receipt["changed"]}
    assert by_id[facts["u1"]["fact_id"]]["action"] == "revoked"
    assert by_id[facts["u2"]["fact_id"]]["action"] == "source_removed"
    after = _facts(mem)
    assert after["u1"]["status"] == "revoked"
    assert after["u2"]["status"] == "active" and after["u2"]["sources"] == []
    assert [r["record_id"] for r in _recall(reader, "u2")] == [facts["u2"]["fact_id"]]
    assert _recall(reader, "u1", include_stale=True) == []
    (src,) = list_sources(mem.stores.meta)
    assert src.deleted and src.receipt_id == receipt["receipt_id"]
    # handled once: the next run does not revoke again
    assert (
        run_staleness(mem.stores, mem.settings, RunContext(now=LAST))["revisions"][
            "deleted_sources"
        ]
        == []
    )
    with mem.stores.meta.connect() as con:
        kinds = {r[0] for r in con.execute("SELECT kind FROM receipts").fetchall()}
    assert {"source_deleted", "revoke"} <= kinds
    reader.close()


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_revalidation_decision_reaches_an_open_reader(bound, decision):
    mem = bound
    reader = Recaller.from_settings(mem.settings, embedder=mem.embedder, access_log=False)
    _revision(mem, "r2", "2026-08-01T00:00:00Z", now=LATER)
    run_staleness(mem.stores, mem.settings, RunContext(now=LATER))
    (batch,) = list_batches(mem.stores.meta, status="open")
    u1 = _facts(mem)["u1"]["fact_id"]
    request = ReviewRequest(
        decision=decision,
        reviewer="alice",
        items=[u1],
        reason="" if decision == "approve" else "moved",
    )
    result = decide_batch(mem.stores, mem.settings, RunContext(now=LAST), batch.batch_id, request)
    (effect,) = result.as_dict()["effects"]
    row = _facts(mem)["u1"]
    if decision == "approve":
        assert effect["action"] == "revalidated" and row["status"] == "active"
        assert row["sources"] == [{"source_id": KB, "revision": "r2"}]
        assert [r["record_id"] for r in _recall(reader, "u1")] == [u1]
        # re-bound: the next run does not mark it stale again
        assert (
            run_staleness(mem.stores, mem.settings, RunContext(now=LAST))["revisions"]["stale"]
            == []
        )
    else:
        assert effect["action"] == "revoked" and row["status"] == "revoked"
        assert _recall(reader, "u1", include_stale=True) == []
    assert result.status == "open"  # u2's item is still undecided
    with mem.stores.meta.connect() as con:
        (n,) = con.execute(
            "SELECT count(*) FROM audit_log WHERE action = 'revalidate_decision'"
        ).fetchone()
    assert n == 1
    reader.close()


def test_sources_file_is_validated_whole_and_older_updates_are_ignored(mem):
    bad = [
        json.dumps({"source_id": "kb/a", "revision": "r1", "changed_at": "2026-07-01T00:00:00Z"}),
        json.dumps({"source_id": "kb/b", "revision": "", "changed_at": "2026-07-01"}),
        "{not json",
    ]
    with pytest.raises(ValidationFailed) as err:
        update_sources(mem.stores, RunContext(now=NOW), bad, path="s.jsonl")
    assert {e.line for e in err.value.errors} == {2, 3}
    assert "source_id=kb/b" in str(err.value)
    assert list_sources(mem.stores.meta) == []  # nothing written
    _revision(mem, "r2", "2026-08-01T00:00:00Z")
    stale = _revision(mem, "r1", "2026-07-01T00:00:00Z")
    assert stale["ignored"] == [KB]
    (src,) = list_sources(mem.stores.meta)
    assert src.revision == "r2"


@settings(max_examples=15, deadline=None)
@given(
    updates=st.lists(
        st.tuples(st.sampled_from(["kb/a", "kb/b"]), st.integers(0, 5), st.booleans()),
        min_size=1,
        max_size=8,
    ),
    data=st.data(),
)
def test_revision_updates_converge_whatever_their_order(tmp_path_factory, updates, data):
    """Files replayed in any order and grouping end with each source's latest change."""
    records = [
        {"source_id": sid, "revision": f"r{day}-{int(gone)}", "deleted": gone,
         "changed_at": f"2026-07-{day + 1:02d}T00:00:00Z"}
        for sid, day, gone in updates
    ]  # fmt: skip
    # one change per (source, time): two different changes at the same instant are ambiguous
    records = list({(r["source_id"], r["changed_at"]): r for r in records}.values())
    order = data.draw(st.permutations(records))
    cut = data.draw(st.integers(0, len(order)))
    home = tmp_path_factory.mktemp("conv") / "home"
    mem = SimpleNamespace(stores=open_stores(load_settings(home=home, embed={"model": "hash"})))
    for chunk in (order[:cut], order[cut:]):
        if chunk:
            update_sources(mem.stores, RunContext(now=NOW), [json.dumps(r) for r in chunk])
    latest = {}
    for r in sorted(records, key=lambda r: r["changed_at"]):
        latest[r["source_id"]] = (r["revision"], r["deleted"])
    got = {s.source_id: (s.revision, s.deleted) for s in list_sources(mem.stores.meta)}
    assert got == latest
