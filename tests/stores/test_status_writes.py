"""The one status writer: legal changes written and audited once, illegal ones write nothing."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core.embed import HashEmbedder
from memory_core.lifecycle import TRANSITIONS, IllegalTransition, allowed
from memory_core.models import Authority, Candidate, CandidateKind, CandidateStatus, ProcedureSpec
from memory_core.stores.candidates import get_candidates, set_candidate_status, upsert_candidates
from memory_core.stores.status_writes import (
    AUDIT_ACTION,
    InPlace,
    MetaStatuses,
    RowVersions,
    write_status,
)
from tests.recall_rows import make_row, write_rows

NOW = datetime(2026, 7, 2, tzinfo=UTC)
_EMB = HashEmbedder(384)


@pytest.fixture
def facts(stores):
    stores.lance.ensure_tables(384, embedder=_EMB.version)
    rows = [make_row("facts", _EMB, f"F{i}", status=s) for i, s in
            enumerate(["active", "active", "expired", "revoked"])]  # fmt: skip
    write_rows(stores.lance, "facts", rows)
    return stores


def _statuses(stores) -> dict[str, str]:
    t = stores.lance.scan("facts", columns=["fact_id", "status"])
    return dict(zip(t.column("fact_id").to_pylist(), t.column("status").to_pylist(), strict=True))


def _audits(stores) -> list[tuple[str, dict]]:
    with stores.meta.connect() as con:
        rows = con.execute(
            "SELECT event_id, counts FROM audit_log WHERE action = ?", [AUDIT_ACTION]
        ).fetchall()
    return [(e, json.loads(c)) for e, c in rows]


def test_in_place_change_touches_only_rows_in_was_and_is_audited_once(facts):
    change = InPlace("facts", "recorded_to IS NULL", was=("active",), to="expired")
    done = write_status(facts, change, at=NOW, run_id="r1", actor="test")
    assert done.rows == 2 and done.transitions == {"active->expired": 2}
    assert _statuses(facts) == {"F0": "expired", "F1": "expired", "F2": "expired",
                                "F3": "revoked"}  # fmt: skip
    # the same change again: nothing matches, nothing written, no second audit row
    assert write_status(facts, change, at=NOW).rows == 0
    assert _audits(facts) == [(done.event_id, {"active->expired": 2})]


def test_illegal_in_place_change_raises_and_writes_nothing(facts):
    before = _statuses(facts)
    change = InPlace("facts", "recorded_to IS NULL", was=("active", "revoked"), to="stale")
    with pytest.raises(IllegalTransition) as err:
        write_status(facts, change, at=NOW)
    assert (err.value.kind, err.value.record_id, err.value.old, err.value.new) == (
        "fact", "F3", "revoked", "stale",
    )  # fmt: skip
    assert "fact F3: revoked -> stale" in str(err.value)
    assert _statuses(facts) == before and _audits(facts) == []


def test_illegal_row_version_anywhere_in_a_batch_writes_nothing(facts):
    rows = {r["fact_id"]: r for r in facts.lance.scan("facts").to_pylist()}
    stale = {**rows["F0"], "status": "stale"}
    revived = {**rows["F2"], "status": "active"}  # expired -> active: not allowed
    with pytest.raises(IllegalTransition, match="fact F2: expired -> active"):
        write_status(facts, RowVersions("facts", close=[stale, revived]), at=NOW)
    assert _statuses(facts)["F0"] == "active" and _audits(facts) == []
    write_status(facts, RowVersions("facts", close=[stale]), at=NOW)
    assert _statuses(facts)["F0"] == "stale"


def test_new_row_versions_are_checked_as_created(facts):
    new = make_row("facts", _EMB, "F9", status="contested")
    with pytest.raises(IllegalTransition, match=r"F9: \(new record\) -> contested"):
        write_status(facts, RowVersions("facts", insert=[new]), at=NOW)
    assert "F9" not in _statuses(facts)


# -- the table itself ---------------------------------------------------------------------------


def test_every_kind_can_be_created_and_nothing_leaves_revoked():
    for kind, table in TRANSITIONS.items():
        assert table[None], kind
        assert not table.get("revoked"), kind
        statuses = {s for k, v in table.items() for s in v} | {k for k in table if k}
        for status in statuses:
            assert allowed(kind, status, status)  # rewriting a status unchanged is no change


_FACT_STATUSES = sorted({s for v in TRANSITIONS["fact"].values() for s in v})


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
@given(walk=st.lists(st.sampled_from(_FACT_STATUSES), min_size=1, max_size=6))
def test_random_walks_write_legal_steps_and_refuse_illegal_ones(facts, walk):
    """Whatever order changes come in, the stored status is what the table allows."""
    write_rows(facts.lance, "facts", [make_row("facts", _EMB, "W", status="active")])
    status = "active"
    for new in walk:
        where = "fact_id = 'W'"
        if allowed("fact", status, new):
            write_status(facts, InPlace("facts", where, was=(status,), to=new), at=NOW)
            status = new
        else:
            with pytest.raises(IllegalTransition):
                write_status(facts, InPlace("facts", where, was=(status,), to=new), at=NOW)
        assert _statuses(facts)["W"] == status


def _mined(cid: str, support: list[str], status: CandidateStatus) -> Candidate:
    return Candidate(
        candidate_id=cid, kind=CandidateKind.procedural, tenant_id="acme", subject_id=None,
        namespace="it", procedure=ProcedureSpec(name="n", steps=["a", "b"]),
        support_ids=support, counterexample_ids=[], confidence=0.5, status=status,
        authority=Authority.none, text=f"{len(support)} runs",
    )  # fmt: skip


def test_a_rewritten_candidate_moves_once_with_body_and_column_agreeing(stores):
    """The miner's upsert passes the statuses it read and bodies it wrote with the new status
    (``MetaStatuses.stored``, ``body_written``): a scored candidate whose evidence grew goes
    back to pending_score in its column and its body alike, a decided one keeps its status,
    an unchanged status is not audited, and an illegal move still writes nothing."""
    meta = stores.meta
    first = [_mined("c1", ["e1", "e2"], CandidateStatus.pending_score),
             _mined("c2", ["e1", "e2"], CandidateStatus.pending_score),
             _mined("c3", ["e1", "e2"], CandidateStatus.pending_score)]  # fmt: skip
    upsert_candidates(meta, first, run_id="r1", now=NOW)
    scored = {c: (CandidateStatus.pending_review, "scored") for c in ("c1", "c2")}
    set_candidate_status(meta, scored, now=NOW)
    set_candidate_status(meta, {"c2": (CandidateStatus.approved, "ok")}, now=NOW)
    before = len(_audits(stores))
    # from 2 to 4 supporting episodes: the evidence doubled, so the score no longer stands
    # (Candidate.score_basis; within a band the score is kept: tests/stores/test_score_basis.py)
    grown = [
        _mined(c, ["e1", "e2", "e3", "e4"], CandidateStatus.pending_score)
        for c in ("c1", "c2", "c3")
    ]
    upsert_candidates(meta, grown, run_id="r2", now=NOW)
    with meta.connect() as con:
        rows = con.execute(
            "SELECT candidate_id, status, body->>'$.status', json_array_length(body, '$.support_ids') "
            "FROM candidates ORDER BY candidate_id"
        ).fetchall()
    assert rows == [("c1", "pending_score", "pending_score", 4), ("c2", "approved", "approved", 4),
                    ("c3", "pending_score", "pending_score", 4)]  # fmt: skip
    audits = _audits(stores)[before:]
    assert [counts for _, counts in audits] == [{"pending_review->pending_score": 1}]
    with meta.transaction() as con, pytest.raises(IllegalTransition):
        write_status(None, MetaStatuses(con, {"c2": "pending_score"}, stored={"c2": "approved"},
                                        body_written=True), at=NOW)  # fmt: skip
    assert get_candidates(meta, ["c2"])[0].status == CandidateStatus.approved
