"""Contested facts: a weaker contradiction demotes, a reviewer settles, an explicit change
still supersedes as before."""

from __future__ import annotations

import pytest
from promote_kit import at, consolidate, review_all, user_says

from memory_core.context import RunContext
from memory_core.recall import Recaller
from memory_core.stages.review import ReviewRequest, decide_batch
from memory_core.stages.staleness import run_staleness
from memory_core.stores.facts import list_rows
from memory_core.stores.review import list_batches

NOW = at("2026-08-01T12:00:00Z")
LATER = at("2026-08-05T12:00:00Z")
LAST = at("2026-08-09T12:00:00Z")


def _theme(eid, obj, day, *, said=None, role="user"):
    return user_says(
        eid, "u1", "ui_theme", obj, when=f"2026-07-{day:02d}T09:00:00Z", said=said, role=role
    )


def _current(mem):
    return [r for r in list_rows(mem.stores.lance, "facts") if r["status"] != "superseded"]


def _served(reader, **kw):
    got = reader.recall("ui theme", tenant_id="acme", subject_id="u1", now=LAST, **kw)
    return [r for r in got.records if r["table"] == "facts"]


@pytest.fixture
def confirmed(mem):
    """u1 said twice that they prefer dark mode: an active preference."""
    mem.ingest([_theme("d1", "dark", 1), _theme("d2", "dark", 2)])
    consolidate(mem, NOW, cluster=False)
    review_all(mem, NOW)
    (fact,) = _current(mem)
    assert fact["status"] == "active" and fact["object"] == "dark"
    return mem, fact


def _contradict_once(mem):
    mem.ingest([_theme("l1", "light", 20)], now=LATER)
    consolidate(mem, LATER, cluster=False)
    return run_staleness(mem.stores, mem.settings, RunContext(now=LATER))


def test_single_weaker_statement_contests_and_explicit_change_supersedes(confirmed):
    mem, fact = confirmed
    reader = Recaller.from_settings(mem.settings, embedder=mem.embedder, access_log=False)
    done = _contradict_once(mem)
    assert done["contested"]["contested"] == {fact["fact_id"]: ["l1"]}
    (served,) = _served(reader)  # still served, with a conflict marker
    assert served["record_id"] == fact["fact_id"] and served["status"] == "contested"
    assert served["conflict"] is True and "contested" in served["reason"]
    (batch,) = list_batches(mem.stores.meta, status="open")
    assert batch.kind == "settle"
    # the same evidence does not contest twice
    assert (
        run_staleness(mem.stores, mem.settings, RunContext(now=LATER))["contested"]["contested"]
        == {}
    )
    # a later explicit statement supersedes the contested fact through promotion, as before
    mem.ingest(
        [_theme("l2", "light", 25, said="Actually, from now on I prefer light mode.")], now=LAST
    )
    consolidate(mem, LAST, cluster=False)
    review_all(mem, LAST, kind="semantic")
    rows = {r["object"]: r for r in _current(mem)}
    assert rows["light"]["status"] == "active"
    history = [r for r in list_rows(mem.stores.lance, "facts") if r["object"] == "dark"]
    assert {r["status"] for r in history} == {"superseded"}
    assert [r["object"] for r in _served(reader)] == ["light"]
    reader.close()


@pytest.mark.parametrize(("decision", "status"), [("approve", "active"), ("reject", "revoked")])
def test_settling_either_way_is_recorded_and_served_at_once(confirmed, decision, status):
    mem, fact = confirmed
    reader = Recaller.from_settings(mem.settings, embedder=mem.embedder, access_log=False)
    _contradict_once(mem)
    (batch,) = list_batches(mem.stores.meta, status="open")
    reason = "" if decision == "approve" else "they switched to light"
    request = ReviewRequest(decision=decision, reviewer="rita", reason=reason)
    result = decide_batch(mem.stores, mem.settings, RunContext(now=LAST), batch.batch_id, request)
    assert result.status == ("approved" if decision == "approve" else "rejected")
    (row,) = [r for r in list_rows(mem.stores.lance, "facts") if r["fact_id"] == fact["fact_id"]]
    assert row["status"] == status
    served = _served(reader)
    if decision == "approve":
        assert [(r["record_id"], r["conflict"]) for r in served] == [(fact["fact_id"], False)]
        # settled: the same contradiction does not contest it again
        assert (
            run_staleness(mem.stores, mem.settings, RunContext(now=LAST))["contested"]["contested"]
            == {}
        )
    else:
        assert served == []
    with mem.stores.meta.connect() as con:
        audit = con.execute(
            "SELECT actor, detail FROM audit_log WHERE action = 'settle_decision'"
        ).fetchall()
        settled = con.execute("SELECT settlement FROM contest_evidence").fetchall()
    assert len(audit) == 1 and audit[0][0] == "rita"
    assert settled == [("kept" if decision == "approve" else "overturned",)]
    reader.close()


def test_tool_output_never_contests_a_preference(confirmed):
    mem, _ = confirmed
    mem.ingest([_theme("t1", "light", 20, role="tool")], now=LATER)
    done = run_staleness(mem.stores, mem.settings, RunContext(now=LATER))
    assert done["contested"]["contested"] == {}
    assert _current(mem)[0]["status"] == "active"


def test_an_open_contest_keeps_its_evidence_when_the_turn_is_folded(confirmed):
    """Compaction's hard delete of a folded turn (``purge_record_rows(folded=True)``) keeps
    the settle card's evidence (a fold is not a deletion); an expiry's delete removes it."""
    from memory_core.stages.staleness.summary import record_batch_summary
    from memory_core.stores.forgetting import purge_record_rows

    mem, _ = confirmed
    _contradict_once(mem)
    (batch,) = list_batches(mem.stores.meta, status="open")
    with mem.stores.meta.transaction() as con:
        purge_record_rows(con, record_ids=["l1"], text_hashes=[], folded=True)
    (item,) = record_batch_summary(mem.stores, batch)["items"]
    assert item["evidence"] == [{"episode_id": "l1", "settlement": None}]
    with mem.stores.meta.transaction() as con:
        counts = purge_record_rows(con, record_ids=["l1"], text_hashes=[])
    assert counts.get("contest_evidence") == 1
    (item,) = record_batch_summary(mem.stores, batch)["items"]
    assert item["evidence"] == []
