"""Candidates read without their evidence pins (``list_candidates(pins=False)``) are the stored
candidates with ``provenance`` left out and nothing else changed, and ``support_pin_subjects``
gives the subjects a reader would have taken from the pins of the supporting episodes."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core.config import load_settings
from memory_core.models import (
    Authority,
    Candidate,
    CandidateKind,
    CandidateStatus,
    ClaimSpec,
    Provenance,
)
from memory_core.stages.score.evidence import Evidence, needs_pin_subjects
from memory_core.stores import open_stores
from memory_core.stores.candidates import list_candidates, support_pin_subjects, upsert_candidates

NOW = datetime(2026, 7, 1, tzinfo=UTC)
EPISODES = [f"e{i}" for i in range(6)]

# each episode: its role (None = not cited), whether it is pinned, and its pin's subject
episode = st.tuples(
    st.sampled_from([None, "support", "counterexample"]),
    st.booleans(),
    st.sampled_from([None, "u0", "u1", "u2"]),
)


def _candidate(
    cid: str, cited: list[tuple[str | None, bool, str | None]], stats: dict
) -> Candidate:
    support = [e for e, (role, _, _) in zip(EPISODES, cited, strict=True) if role == "support"]
    counter = [
        e for e, (role, _, _) in zip(EPISODES, cited, strict=True) if role == "counterexample"
    ]
    pins = [
        Provenance(source_id=e, subject_id=subject, content_hash=f"h-{e}")
        for e, (_, pinned, subject) in zip(EPISODES, cited, strict=True)
        if pinned
    ]
    return Candidate(
        candidate_id=cid, kind=CandidateKind.semantic, tenant_id="acme", subject_id=None,
        namespace="it", claim=ClaimSpec(predicate="p", object="o"), support_ids=support,
        counterexample_ids=counter, confidence=0.5, status=CandidateStatus.pending_score,
        authority=Authority.none, text=f"{cid}: {len(support)} runs", stats=stats,
        provenance=pins,
    )  # fmt: skip


stats = st.dictionaries(
    st.sampled_from(["support_subjects", "distinct_subjects", "rationale", "twin_of", "nested"]),
    st.one_of(st.none(), st.integers(0, 5), st.text(max_size=5), st.just({"k": None})),
    max_size=3,
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    versions=st.lists(
        st.tuples(st.lists(episode, min_size=len(EPISODES), max_size=len(EPISODES)), stats),
        min_size=1,
        max_size=3,
    )
)
def test_reads_without_pins_leave_out_only_the_pins(
    versions: list[tuple[list[tuple[str | None, bool, str | None]], dict]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        meta = open_stores(load_settings(home=Path(tmp), embed={"model": "hash"})).meta
        cands = [_candidate(f"c{i}", cited, st_) for i, (cited, st_) in enumerate(versions)]
        upsert_candidates(meta, cands, run_id="r", now=NOW)
        whole = list_candidates(meta)
        light = list_candidates(meta, pins=False)
        assert [c.model_copy(update={"provenance": []}) for c in whole] == light
        assert all(c.provenance == [] for c in light)
        subjects = support_pin_subjects(meta, [c.candidate_id for c in whole])
        for cand in whole:
            light_cand = cand.model_copy(update={"provenance": []})
            assert Evidence.from_candidate(cand) == Evidence.from_candidate(
                light_cand, subjects[cand.candidate_id]
            )
            if not needs_pin_subjects(cand):  # the score stage then reads no pin subjects
                assert Evidence.from_candidate(cand) == Evidence.from_candidate(light_cand, set())
        assert support_pin_subjects(meta, []) == {}
        assert support_pin_subjects(meta, ["missing"]) == {}
