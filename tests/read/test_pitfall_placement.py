"""Recall packing puts a pitfall right after the procedure it qualifies (read/pack.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memory_core.models import pitfall_candidate_id
from memory_core.read.pack import place_pitfalls
from memory_core.read.rank import Candidate


def proc(rid: str, cand: str) -> Candidate:
    row = {"candidate_id": cand, "tenant_id": "t", "namespace": "n", "policy_version": "1"}
    return Candidate("procedures", rid, row)


def pitfall(rid: str, of: str | None) -> Candidate:
    cand = pitfall_candidate_id("t", "n", of, "1") if of else "cand_unrelated"
    return Candidate("facts", rid, {"predicate": "pitfall:x", "candidate_id": cand})


def fact(rid: str) -> Candidate:
    return Candidate("facts", rid, {"predicate": "prefers", "candidate_id": "c"})


def test_each_pitfall_follows_its_procedure_and_nothing_else_moves() -> None:
    chosen = [
        pitfall("pit-b", "cand_b"), proc("p-a", "cand_a"), fact("f1"), proc("p-b", "cand_b"),
        pitfall("pit-a", "cand_a"), pitfall("pit-lost", "cand_gone"), fact("f2"),
    ]  # fmt: skip
    out = place_pitfalls(chosen)
    assert [c.record_id for c in out] == ["p-a", "pit-a", "f1", "p-b", "pit-b", "pit-lost", "f2"]
    assert chosen[0].row["_qualifies"] == "p-b"
    assert "_qualifies" not in chosen[5].row  # its procedure is not served: it stays put


def test_another_tenants_procedure_is_not_its_owner() -> None:
    other = Candidate("procedures", "p-x", {"candidate_id": "cand_a", "tenant_id": "u",
                                             "namespace": "n", "policy_version": "1"})  # fmt: skip
    chosen = [pitfall("pit-a", "cand_a"), fact("f"), other]
    assert [c.record_id for c in place_pitfalls(chosen)] == ["pit-a", "f", "p-x"]


@given(st.permutations(["p-a", "pit-a", "p-b", "pit-b", "f1", "f2"]))
def test_placement_keeps_every_record_once(order: list[str]) -> None:
    make = {
        "p-a": lambda: proc("p-a", "cand_a"), "p-b": lambda: proc("p-b", "cand_b"),
        "pit-a": lambda: pitfall("pit-a", "cand_a"), "pit-b": lambda: pitfall("pit-b", "cand_b"),
        "f1": lambda: fact("f1"), "f2": lambda: fact("f2"),
    }  # fmt: skip
    out = [c.record_id for c in place_pitfalls([make[r]() for r in order])]
    assert sorted(out) == sorted(order)
    assert out.index("pit-a") == out.index("p-a") + 1
    assert out.index("pit-b") == out.index("p-b") + 1
