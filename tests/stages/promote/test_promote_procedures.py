"""Procedures: versions, supersession, insight twins that follow, narrowing edits, lineage."""

from __future__ import annotations

import pytest
from promote_kit import at, consolidate, statuses

from memory_core.context import RunContext
from memory_core.errors import InvalidReview
from memory_core.models import Authority, CandidateStatus
from memory_core.stages.review import build_review_batches, decide_batch
from memory_core.stages.review.decisions import AUTO_REVIEWER, ItemEdit, ReviewRequest
from memory_core.stores.candidates import list_candidates
from memory_core.stores.facts import list_rows
from memory_core.stores.lineage import derived_from, sources_of
from memory_core.stores.review import get_items, list_batches

NOW = at("2026-08-01T12:00:00Z")
LATER = at("2026-08-20T12:00:00Z")
ADAPTER = "error 720: reset network adapter, then reconnect vpn"
CERT = "error 720: renew certificate, then reconnect vpn"


@pytest.fixture
def mined(mem, kit):
    eps = kit.seed_scenario()
    eps[0]["sources"] = [{"source_id": "kb/vpn-720", "revision": "r3"}]
    mem.ingest(eps)
    consolidate(mem, NOW)
    build_review_batches(mem.stores, mem.settings, RunContext(now=NOW))
    # the certificate failures also teach a pitfall, reviewed in a semantic batch of its own
    (batch,) = _open_batches(mem, "procedural")
    return mem, batch


def _open_batches(mem, kind):
    return [b for b in list_batches(mem.stores.meta, status="open") if b.kind == kind]


def _procedural(mem):
    return {c.procedure.name: c for c in list_candidates(mem.stores.meta, kind="procedural")}


def _decide(mem, batch_id, now=NOW, **request):
    request.setdefault("reviewer", "alice")
    return decide_batch(
        mem.stores, mem.settings, RunContext(now=now), batch_id, ReviewRequest(**request),
        embedder=mem.embedder,
    )  # fmt: skip


def test_twins_ride_with_their_procedure_and_follow_it(mined):
    mem, batch = mined
    assert batch.kind == "procedural" and batch.item_count == 2  # twins are not items
    procs = _procedural(mem)
    result = _decide(mem, batch.batch_id, decision="approve", items=[procs[ADAPTER].candidate_id])
    assert len(result.followers) == 1
    _decide(
        mem, batch.batch_id, decision="reject", reason="cert renewal needs a ticket",
        items=[procs[CERT].candidate_id],
    )  # fmt: skip
    (proc,) = list_rows(mem.stores.lance, "procedures")
    assert proc["name"] == ADAPTER and proc["version"] == "1.0.0"
    assert proc["authority"] == Authority.human_approved.value and proc["approver"] == "alice"
    assert proc["steps"] == ["reset network adapter", "reconnect vpn"]
    assert proc["preconditions"] == {"adapter_mismatch": "true"}
    (insight,) = list_rows(mem.stores.lance, "facts")
    assert insight["predicate"] == "resolution:error_720"
    assert insight["authority"] == Authority.human_approved.value
    assert insight["subject_id"] is None
    by_status = {}
    for cid, status in statuses(mem).items():
        by_status.setdefault(status, set()).add(cid)
    assert len(by_status[CandidateStatus.promoted]) == 2  # procedure + its insight
    assert len(by_status[CandidateStatus.rejected]) == 2  # procedure + its insight
    twin = next(
        c for c in list_candidates(mem.stores.meta, status="rejected") if c.stats.get("twin_of")
    )
    assert twin.reason.startswith(f"follows procedure {procs[CERT].candidate_id}")


def test_procedure_lineage_reaches_episodes_and_corpus(mined):
    mem, batch = mined
    _decide(mem, batch.batch_id, decision="approve")
    proc = next(r for r in list_rows(mem.stores.lance, "procedures") if r["name"] == ADAPTER)
    edges = sources_of(mem.stores.meta, proc["procedure_id"])
    kinds = {(e.source_kind, e.source_id) for e in edges}
    assert ("corpus", "kb/vpn-720") in kinds
    assert {e.source_id for e in edges if e.source_kind == "episode"} == {
        "ok0", "ok1", "ok2", "ok3", "bad0", "bad1", "bad2",
    }  # fmt: skip
    reached = {d for d, _, _ in derived_from(mem.stores.meta, ["ok0"])}
    assert proc["procedure_id"] in reached
    assert len(reached) == 2  # the procedure and its insight


def test_narrowing_edit_flows_into_the_insight(mined):
    mem, batch = mined
    procs = _procedural(mem)
    pid = procs[ADAPTER].candidate_id
    edit = ItemEdit(preconditions={"adapter_mismatch": "true", "os": "windows-11"}, rollback="x")
    _decide(mem, batch.batch_id, decision="approve", items=[pid], edits={pid: edit})
    (proc,) = list_rows(mem.stores.lance, "procedures")
    assert proc["preconditions"] == {"adapter_mismatch": "true", "os": "windows-11"}
    assert proc["rollback"] == "x"
    (insight,) = list_rows(mem.stores.lance, "facts")
    assert insight["object"].endswith("when adapter_mismatch=true, os=windows-11")
    assert insight["conditions"]["os"] == "windows-11"
    (item,) = [i for i in get_items(mem.stores.meta, batch.batch_id) if i.candidate_id == pid]
    assert item.edits == {"preconditions": {"adapter_mismatch": "true", "os": "windows-11"},
                          "rollback": "x"}  # fmt: skip


def test_widening_edit_is_refused_and_nothing_recorded(mined):
    mem, batch = mined
    pid = _procedural(mem)[ADAPTER].candidate_id
    with pytest.raises(InvalidReview) as info:
        _decide(
            mem, batch.batch_id, decision="approve", items=[pid],
            edits={pid: ItemEdit(preconditions={"os": "windows-11"})},
        )  # fmt: skip
    assert info.value.candidate_id == pid and info.value.field == "edits.preconditions"
    assert "keep adapter_mismatch=true" in str(info.value)
    assert "nothing was recorded" in str(info.value)
    assert all(i.decision is None for i in get_items(mem.stores.meta, batch.batch_id))
    with pytest.raises(InvalidReview, match="object: does not apply"):
        _decide(
            mem, batch.batch_id, decision="approve", items=[pid],
            edits={pid: ItemEdit(object="x")},
        )  # fmt: skip


def test_changed_procedure_of_the_same_name_is_a_new_version(mined):
    mem, batch = mined
    procs = _procedural(mem)
    _decide(mem, batch.batch_id, decision="approve", items=[procs[ADAPTER].candidate_id])
    # the reviewer says the certificate procedure replaces it under the same name
    cid = procs[CERT].candidate_id
    _decide(
        mem, batch.batch_id, LATER, decision="approve", items=[cid],
        edits={cid: ItemEdit(name=ADAPTER, effect="VPN connects again")},
    )  # fmt: skip
    rows = {r["version"]: r for r in list_rows(mem.stores.lance, "procedures")}
    assert set(rows) == {"1.0.0", "2.0.0"}
    old, new = rows["1.0.0"], rows["2.0.0"]
    assert old["status"] == "superseded" and old["valid_to"] == new["valid_from"]
    assert old["superseded_by"] == new["procedure_id"] and new["supersedes"] == old["procedure_id"]
    assert new["steps"] == ["renew certificate", "reconnect vpn"]
    assert new["effect"] == "VPN connects again"
    current = list_rows(mem.stores.lance, "procedures", as_of=LATER, status="active")
    assert [r["version"] for r in current] == ["2.0.0"]
    before = list_rows(mem.stores.lance, "procedures", as_of=NOW, known_at=NOW)
    assert [r["version"] for r in before] == ["1.0.0"]


def test_procedures_are_never_auto_approved(tmp_path, kit):
    mem = kit.open_mem(
        tmp_path / "h",
        review={"auto_approve_user_semantic": True, "auto_approve_min_confidence": 0.0},
    )
    mem.ingest(kit.seed_scenario())
    consolidate(mem, NOW)
    result = build_review_batches(mem.stores, mem.settings, RunContext(now=NOW))
    assert result.auto_approved == []
    assert sorted(b.kind for b in list_batches(mem.stores.meta, status="open")) == [
        "procedural",
        "semantic",
    ]
    # and the gate refuses auto-approval even if something hands a procedure to it
    from memory_core.stages.promote import commit_candidates

    proc = next(iter(_procedural(mem).values()))
    done = commit_candidates(
        mem.stores, mem.settings, RunContext(now=NOW), [proc], reviewer=AUTO_REVIEWER
    )
    assert list(done.refused.values()) == ["procedures and their insights are never auto-approved"]
    assert mem.stores.lance.count("procedures") == 0


def test_a_twin_whose_procedure_left_the_queue_is_batched_on_its_own(mined):
    """The queue is picked from ids, kinds and ``twin_of`` before any body is read: a twin
    rides with its procedure only while that procedure awaits review too."""
    from memory_core.stores.candidates import set_candidate_status

    mem, _ = mined
    procs = _procedural(mem)
    adapter = procs[ADAPTER].candidate_id
    twins = {c.stats["twin_of"]: c.candidate_id
             for c in list_candidates(mem.stores.meta, status="pending_review")
             if c.stats.get("twin_of")}  # fmt: skip
    assert set(twins) == {adapter, procs[CERT].candidate_id}
    set_candidate_status(
        mem.stores.meta, {adapter: (CandidateStatus.pending_score, "evidence grew")}, now=NOW
    )
    result = build_review_batches(mem.stores, mem.settings, RunContext(now=NOW))
    assert result.twins_attached == 1  # the certificate procedure's, still pending review
    assert result.items == 1
    (batch,) = [b for b in _open_batches(mem, "semantic") if b.batch_id in result.created]
    assert [i.candidate_id for i in get_items(mem.stores.meta, batch.batch_id)] == [twins[adapter]]
