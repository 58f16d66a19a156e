"""What later stages decided about a candidate survives the miner's rewrite of it.

The miner rebuilds every touched candidate from its evidence each night. A decided candidate
keeps its status, score, scoring stats and the reviewer's reason; a scored one awaiting review
keeps its score while ``Candidate.score_basis`` holds (same content, support and counterexamples
in the same power-of-two bands) and goes back to ``pending_score`` when it does not. Either way
the body carries the new evidence."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.models import (
    Authority,
    Candidate,
    CandidateKind,
    CandidateStatus,
    ProcedureSpec,
    evidence_band,
)
from memory_core.stores.candidates import (
    candidate_hashes,
    get_candidates,
    set_candidate_scores,
    set_candidate_status,
    upsert_candidates,
)
from memory_core.stores.meta import MetaStore

NOW = datetime(2026, 7, 3, tzinfo=UTC)
SCORE = {
    "importance": 0.9,
    "scorer": "claude-test",
    "status": "pending_review",
    "stats": {"rationale": "recurring fix", "risk_flags": ["none"]},
}


def _mined(support: int, counter: int = 0, *, steps: tuple[str, ...] = ("a", "b")) -> Candidate:
    """The miner's version of one procedure: ``support`` and ``counter`` episodes cited."""
    return Candidate(
        candidate_id="c1", kind=CandidateKind.procedural, tenant_id="acme", subject_id=None,
        namespace="it", procedure=ProcedureSpec(name="reset", steps=list(steps)),
        support_ids=[f"s{i}" for i in range(support)],
        counterexample_ids=[f"x{i}" for i in range(counter)], confidence=0.5,
        status=CandidateStatus.pending_score, authority=Authority.none,
        text=f"{support} runs", stats={"successes": support, "failures": counter},
    )  # fmt: skip


def _row(meta: MetaStore) -> tuple:
    with meta.connect() as con:
        return con.execute(
            "SELECT status, importance, scorer, reason, body->>'$.status', "
            "CAST(body->>'$.importance' AS DOUBLE), json_array_length(body, '$.support_ids') "
            "FROM candidates WHERE candidate_id = 'c1'"
        ).fetchone()


def _scored(meta: MetaStore, support: int, counter: int = 0) -> None:
    upsert_candidates(meta, [_mined(support, counter)], run_id="r1", now=NOW)
    set_candidate_scores(meta, {"c1": SCORE}, now=NOW)


def test_an_approved_candidate_keeps_score_rationale_and_reason_when_its_evidence_grows(
    tmp_path: Path,
) -> None:
    meta = MetaStore(tmp_path / "m.duckdb")
    meta.migrate()
    _scored(meta, 3)
    set_candidate_status(meta, {"c1": (CandidateStatus.approved, "checked by alice")}, now=NOW)
    # far past its band: a decided candidate keeps its status whatever the evidence does
    upsert_candidates(meta, [_mined(40, 2)], run_id="r2", now=NOW)
    assert _row(meta) == ("approved", 0.9, "claude-test", "checked by alice", "approved", 0.9, 40)
    cand = get_candidates(meta, ["c1"])[0]
    assert cand.stats["rationale"] == "recurring fix" and cand.stats["risk_flags"] == ["none"]
    # mined stats are the new night's
    assert cand.stats["successes"] == 40 and cand.stats["failures"] == 2
    assert len(cand.counterexample_ids) == 2


def test_a_scored_candidate_keeps_its_score_within_its_band_and_is_rescored_past_it(
    tmp_path: Path,
) -> None:
    meta = MetaStore(tmp_path / "m.duckdb")
    meta.migrate()
    _scored(meta, 4)
    upsert_candidates(meta, [_mined(7)], run_id="r2", now=NOW)  # 4-7: one band
    assert _row(meta) == ("pending_review", 0.9, "claude-test", "", "pending_review", 0.9, 7)
    assert get_candidates(meta, ["c1"])[0].stats["rationale"] == "recurring fix"
    upsert_candidates(meta, [_mined(7, 1)], run_id="r3", now=NOW)  # its first counterexample
    assert _row(meta) == ("pending_score", None, None, "", "pending_score", None, 7)


def test_a_changed_procedure_is_rescored_whatever_its_evidence(tmp_path: Path) -> None:
    meta = MetaStore(tmp_path / "m.duckdb")
    meta.migrate()
    _scored(meta, 4)
    upsert_candidates(meta, [_mined(4, steps=("a", "c"))], run_id="r2", now=NOW)
    assert _row(meta)[:3] == ("pending_score", None, None)


def test_a_candidate_scored_before_migration_11_is_rescored_on_its_next_change(
    tmp_path: Path,
) -> None:
    """Rows written before the score basis was stored have none: the first change re-queues
    them, as every change did before; from then on the band holds."""
    meta = MetaStore(tmp_path / "m.duckdb")
    meta.migrate()
    _scored(meta, 4)
    with meta.transaction() as con:
        con.execute("UPDATE candidates SET score_basis = NULL")
    upsert_candidates(meta, [_mined(5)], run_id="r2", now=NOW)
    assert _row(meta)[:2] == ("pending_score", None)
    set_candidate_scores(meta, {"c1": SCORE}, now=NOW)
    upsert_candidates(meta, [_mined(6)], run_id="r3", now=NOW)
    assert _row(meta)[:2] == ("pending_review", 0.9)


def test_migration_11_adds_the_score_basis_to_an_older_store_keeping_its_rows(
    tmp_path: Path,
) -> None:
    meta = MetaStore(tmp_path / "m.duckdb")
    meta.migrate(target=10)
    with meta.transaction() as con:
        con.execute(
            "INSERT INTO candidates (candidate_id, kind, tenant_id, namespace, status, body) "
            "VALUES ('old', 'procedural', 'acme', 'it', 'pending_review', '{}')"
        )
    meta.migrate()
    with meta.connect() as con:
        assert con.execute(
            "SELECT candidate_id, status, score_basis FROM candidates"
        ).fetchall() == [("old", "pending_review", None)]


@settings(max_examples=40, deadline=None)
@given(
    before=st.tuples(st.integers(1, 40), st.integers(0, 10)),
    after=st.tuples(st.integers(1, 40), st.integers(0, 10)),
    handed=st.booleans(),
)
def test_a_scored_candidate_is_rescored_exactly_when_a_band_changes(
    before: tuple[int, int], after: tuple[int, int], handed: bool
) -> None:
    """``handed``: the hashes come with the candidate, as the pool's workers hand them over
    (``candidate_hashes``), instead of being computed by the upsert."""
    mined = _mined(*after)
    assert mined.hashes() == (mined.content_hash(), mined.score_basis())
    with tempfile.TemporaryDirectory() as tmp:
        meta = MetaStore(Path(tmp) / "m.duckdb")
        meta.migrate()
        _scored(meta, *before)
        hashes = candidate_hashes([mined]) if handed else None
        upsert_candidates(meta, [mined], run_id="r2", now=NOW, hashes=hashes)
        status, importance, *_ = _row(meta)
        cand = get_candidates(meta, ["c1"])[0]
    same_band = all(
        evidence_band(a) == evidence_band(b) for a, b in zip(before, after, strict=True)
    )
    if same_band:
        assert (status, importance) == ("pending_review", 0.9)
    else:
        assert (status, importance) == ("pending_score", None)
    # the body always carries the night's evidence
    assert len(cand.support_ids) == after[0] and len(cand.counterexample_ids) == after[1]
    assert cand.status.value == status


def test_evidence_bands_are_powers_of_two() -> None:
    assert [evidence_band(n) for n in (0, 1, 2, 3, 4, 7, 8, 15, 16)] == [
        0, 1, 2, 2, 3, 3, 4, 4, 5,
    ]  # fmt: skip
