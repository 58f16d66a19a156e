"""Packing does not spend budget twice on one statement: a fact whose every evidence episode
is already packed is left out (with the reason), so the next record fits instead; a turn a
packed fact summarises is still served (the turn holds the wording the summary drops)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from memory_core.read.pack import pack
from memory_core.read.rank import Candidate


def _episode(eid: str, score: float, chars: int = 120) -> Candidate:
    return Candidate("episodes", eid, {"text": "t" * chars}, score=score)


def _fact(fid: str, score: float, sources: list[tuple[str, str]]) -> Candidate:
    provenance = [{"source_id": s, "source_kind": kind} for s, kind in sources]
    row = {"text": "f" * 40, "provenance": json.dumps(provenance)}
    return Candidate("facts", fid, row, score=score)


def test_a_fact_whose_evidence_is_served_leaves_room_for_the_next_turn() -> None:
    ranked = [
        _episode("e1", 0.9),
        _fact("f1", 0.8, [("e1", "episode")]),
        _episode("e2", 0.7),
    ]
    chosen, left, used = pack(ranked, k=10, budget_tokens=60, chars_per_token=4.0)
    assert [c.record_id for c in chosen] == ["e1", "e2"] and used == 60
    assert [(c.record_id, r) for c, r in left] == [("f1", "covered by its served evidence: e1")]


def test_a_fact_is_kept_when_any_evidence_is_not_served_or_not_an_episode() -> None:
    ranked = [
        _episode("e1", 0.9),
        _fact("part", 0.8, [("e1", "episode"), ("e3", "episode")]),
        _fact("doc", 0.7, [("e1", "episode"), ("kb1", "corpus")]),
    ]
    chosen, left, _ = pack(ranked, k=10, budget_tokens=1000, chars_per_token=4.0)
    assert [c.record_id for c in chosen] == ["e1", "part", "doc"] and not left


def test_a_turn_a_higher_ranked_fact_summarises_is_still_served() -> None:
    ranked = [
        _fact("f1", 0.95, [("e1", "episode")]),
        _episode("e1", 0.9),
        _episode("e2", 0.7),
    ]
    chosen, left, used = pack(ranked, k=10, budget_tokens=40, chars_per_token=4.0)
    assert [c.record_id for c in chosen] == ["f1", "e1"] and used == 40
    assert [(c.record_id, r) for c, r in left] == [("e2", "over token budget (needs 30, 0 left)")]


@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(0, 5), st.sets(st.integers(0, 5), max_size=3)),
        max_size=12,
    ),
    st.integers(0, 200),
)
def test_only_facts_fully_covered_by_packed_turns_are_left_out_as_covered(
    items: list[tuple[bool, int, set[int]]], budget: int
) -> None:
    ranked = []
    for i, (is_fact, eid, cites) in enumerate(items):
        if is_fact:
            ranked.append(_fact(f"f{i}", -i, [(f"e{c}", "episode") for c in sorted(cites)]))
        else:
            ranked.append(_episode(f"e{eid}", -i, chars=40))
    chosen, left, used = pack(ranked, k=8, budget_tokens=budget, chars_per_token=4.0)
    assert used <= budget and len(chosen) <= 8
    served = {c.record_id for c in chosen if c.table == "episodes"}
    for cand, reason in left:
        assert cand.table == "facts" or not reason.startswith("covered")  # turns: k or budget
        if reason.startswith("covered by"):
            cited = set(reason.split(": ", 1)[1].split(", "))
            assert cand.table == "facts" and cited and cited <= served
