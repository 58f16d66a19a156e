"""The issue's tau-bench procedure checks on hand-made candidates: world-changing steps against
the gold intent (hand-offs are no change), learnable intents, precision, failed runs linked."""

from __future__ import annotations

from typing import Any

from memory_core.config import StepRules, StepsConfig
from memory_core.eval.tau_checks import gold_changes, procedure_checks

RULES = StepsConfig()
CANCEL = "cancel_reservation|get_user_details"
HANDOFF = "transfer_to_human_agents"


def _run(eid: str, user: str, outcome: str) -> dict[str, Any]:
    return {"episode_id": eid, "subject_id": user, "outcome": outcome, "namespace": "airline"}


def _proc(cid: str, wc: list[str], support: list[str], status: str = "pending_score",
          counter: list[str] | None = None) -> dict[str, Any]:  # fmt: skip
    return {
        "candidate_id": cid, "kind": "procedural", "status": status, "support_ids": support,
        "counterexample_ids": counter or [],
        "procedure": {"steps": ["get_user_details(user_id=$user_id)", *wc]},
        "stats": {"world_changing_steps": wc},
    }  # fmt: skip


RUNS = [
    _run("c1", "u1", "success"), _run("c2", "u2", "success"), _run("c3", "u3", "success"),
    _run("c4", "u4", "failure"), _run("c5", "u5", "failure"),
    _run("n1", "u1", "success"), _run("n2", "u2", "success"), _run("h1", "u3", "success"),
    _run("n3", "u6", "success"),
]  # fmt: skip
INTENT = {"c1": CANCEL, "c2": CANCEL, "c3": CANCEL, "c4": CANCEL, "c5": CANCEL,
          "n1": "", "n2": "", "n3": "", "h1": HANDOFF}  # fmt: skip


def test_hand_off_is_no_change_and_the_override_holds() -> None:
    assert gold_changes(CANCEL, RULES, "airline") == {"cancel_reservation"}
    assert gold_changes(HANDOFF, RULES, "airline") == frozenset()
    desk = StepsConfig(namespaces={"airline": StepRules(world_changing_tools=[HANDOFF])})
    assert gold_changes(HANDOFF, desk, "airline") == {HANDOFF}


def test_checks_on_a_hand_made_case() -> None:
    cands = [
        _proc("p-cancel", ["cancel_reservation(reservation_id=$reservation_id)"],
              ["c1", "c2", "c3"], counter=["c4"]),
        # no change: two no-action runs and a run whose gold only adds a hand-off
        _proc("p-none", [], ["n1", "n2", "h1"], status="promoted"),
        # wrong: a cancel procedure resting on a no-action run
        _proc("p-wrong", ["cancel_reservation(reservation_id=$reservation_id)"], ["n3", "c1"],
              status="auto_rejected"),
        {"candidate_id": "pit", "kind": "semantic", "status": "pending_score",
         "support_ids": ["c5"], "stats": {"pitfall": True, "pitfall_of": "p-cancel"}},
    ]  # fmt: skip
    out = procedure_checks(cands, RUNS, INTENT, RULES, promoted_ids=["p-none"])
    assert out["learnable_intents"] == 2  # cancel and no-action; the hand-off has 1 success
    assert out["learnable_with_procedure"] == out["learnable_with_passing_procedure"] == 2
    assert out["per_intent"]["(no gold action)"]["steps"] == ["get_user_details(user_id=$user_id)"]
    assert out["precision_passing"] == 1.0
    assert out["precision_all"] == round(2 / 3, 4)
    assert out["precision_promoted"] == 1.0
    assert out["one_label_precision_promoted"] == 0.0  # the stricter reading: two labels
    assert out["failed_runs_of_learnable"] == 2 and out["failed_linked"] == 2  # c4 and c5
    assert out["failed_linked_rate"] == 1.0
    # with the hand-off called a change, the no-change procedure is wrong
    desk = StepsConfig(namespaces={"airline": StepRules(world_changing_tools=[HANDOFF])})
    strict = procedure_checks(cands, RUNS, INTENT, desk, promoted_ids=["p-none"])
    assert strict["precision_promoted"] == 0.0
