"""Step abstraction: typed variables from varying values, constants only from values several
sources agree on, lookups told apart from world-changing steps, and the mining pattern built
from them."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from memory_core.config import PolicyConfig, StepRules, StepsConfig
from memory_core.stages.mine.counterexamples import mine_cluster
from memory_core.step_abstract import (
    MIN_CONSTANT_SOURCES,
    abstract_steps,
    is_read_only,
    pattern_of,
    policy_steps,
    step_class,
    step_signature,
    value_kind,
)
from memory_core.steps import ToolCall, encode_step

RULES = StepsConfig()


def call(tool: str, **args: object) -> str:
    return encode_step(ToolCall(tool=tool, args=args))


def test_value_kinds_are_inferred_from_values_and_keys() -> None:
    assert value_kind("reservation_id", "ZFA04Y") == "id"
    assert value_kind("x", "HAT039") == "id"
    assert value_kind("date", "2024-05-20") == "date"
    assert value_kind("when", "2024-05-20T10:00:00") == "datetime"
    assert value_kind("amount", 120) == "amount"
    assert value_kind("refund", "120.50") == "amount"
    assert value_kind("count", 3) == "number"
    assert value_kind("price", "$12.50") == "amount"
    assert value_kind("cabin", "economy") == "word"
    assert value_kind("email", "a@b.io") == "email"
    assert value_kind("flag", True) == "bool"


def test_varying_values_become_typed_variables_with_examples() -> None:
    runs = [
        [call("cancel_reservation", reservation_id=r, date=d, amount=a, cabin=c)]
        for r, d, a, c in [
            ("ZFA04Y", "2024-05-20", 120, "economy"),
            ("H9ZU1C", "2024-05-21", 80, "business"),
            ("SI5UKW", "2024-05-22", 99, "economy"),
            ("HXDUBJ", "2024-05-23", 45, "economy"),
        ]
    ]
    [step] = abstract_steps(runs, RULES).values()
    by_key = {v.key: v for v in step.variables}
    assert by_key["reservation_id"].kind == "id" and not by_key["reservation_id"].is_constant
    assert by_key["date"].kind == "date" and by_key["amount"].kind == "amount"
    assert by_key["cabin"].kind == "enum"  # short words that recur
    # examples are values several runs gave: each reservation id, date and amount is one
    # run's (quoting them would show one user's booking to the others), "economy" is three's
    assert by_key["cabin"].examples == ["economy"]
    assert by_key["reservation_id"].examples == by_key["date"].examples == []
    assert step.text() == (
        "cancel_reservation(amount=$amount, cabin=$cabin, date=$date, "
        "reservation_id=$reservation_id)"
    )
    assert step.as_call()["args"]["reservation_id"] == "$reservation_id"
    assert not step.read_only


def test_examples_never_quote_a_person() -> None:
    """Examples sit in tenant-scope candidates: no user id, e-mail or free text among them."""
    runs = [
        [call("update_profile", user_id=u, contact=m, note=n, seats=s)]
        for u, m, n, s in [
            ("mia_3668", "mia@example.com", "please call me after five pm", 2),
            ("noah_1", "noah@example.org", "I am travelling with my dog", 3),
            ("ana_77", "ana@example.net", "wheelchair needed at the gate", 2),
            ("li_9", "li@example.com", "no calls before nine please", 3),
        ]
    ]
    [step] = abstract_steps(runs, RULES).values()
    by_key = {v.key: v for v in step.variables}
    assert not by_key["user_id"].is_constant and by_key["user_id"].examples == []
    assert by_key["contact"].examples == [] and by_key["note"].examples == []
    assert by_key["seats"].examples == [2, 3]  # counts name nobody
    assert "five pm" not in json.dumps(step.as_dict())
    assert "mia" not in json.dumps(step.as_dict())


def test_a_value_is_a_constant_only_when_several_sources_agree_on_it() -> None:
    # seen once: one observation is no evidence that the procedure fixes it
    once = abstract_steps([[call("send_certificate", cabin="economy", amount=150)]], RULES)
    [step] = once.values()
    assert not any(v.is_constant for v in step.variables)
    assert step.text() == "send_certificate(amount=$amount, cabin=$cabin)"
    # nor quoted as an example: one source's value would be shown to every user of the tenant
    assert all(v.examples == [] for v in step.variables)
    # always the same in several runs: a constant
    same = abstract_steps(
        [[call("book", cabin="economy", user=u)] for u in ("a1", "b2", "c3")], RULES
    )
    [step] = same.values()
    assert step.text() == "book(cabin=economy, user=$user)"
    # except a person's id: never a constant, never quoted to the tenant
    twice = abstract_steps([[call("get_user_details", user_id="mia_3668")]] * 3, RULES)
    [step] = twice.values()
    assert step.text() == "get_user_details(user_id=$user_id)"
    assert step.variables[0].examples == []
    # one run calling twice with the same value is still one source
    [step] = abstract_steps([[call("pay", amount=5), call("pay", amount=5)]], RULES).values()
    assert step.text() == "pay(amount=$amount)" and step.calls == 2


def test_runs_of_one_subject_are_one_source() -> None:
    """One user's attempts at one request agree on their own reservation and gift card; that
    is no evidence that the procedure fixes them. Two users agreeing on a value is."""
    mia = [call("update_flights", reservation_id="1N99U6", payment_id="gift_card_5634230",
                cabin="economy")]  # fmt: skip
    noah = [call("update_flights", reservation_id="ZFA04Y", payment_id="credit_card_77",
                 cabin="economy")]  # fmt: skip
    runs = [mia, mia, mia]
    [alone] = abstract_steps(runs, RULES, sources=["mia", "mia", "mia"]).values()
    assert not any(v.is_constant for v in alone.variables)
    assert "1N99U6" not in json.dumps(alone.as_dict()) and "gift_card" not in json.dumps(
        alone.as_dict()
    )
    # the same three runs with no subjects named count as three sources (as before)
    [unnamed] = abstract_steps(runs, RULES).values()
    assert unnamed.text() == (
        "update_flights(cabin=economy, payment_id=gift_card_5634230, reservation_id=1N99U6)"
    )
    # a second user who agrees on the cabin only: the cabin is a constant, the rest vary
    [both] = abstract_steps([*runs, noah], RULES, sources=["mia", "mia", "mia", "noah"]).values()
    assert both.text() == (
        "update_flights(cabin=economy, payment_id=$payment_id, reservation_id=$reservation_id)"
    )
    # a run of an unknown subject is a source of its own
    [unknown] = abstract_steps(runs, RULES, sources=["mia", None, "mia"]).values()
    assert unknown.text() == unnamed.text()
    assert MIN_CONSTANT_SOURCES == 2


def test_sources_must_match_the_runs() -> None:
    import pytest

    with pytest.raises(ValueError, match="2 sources for 1 runs"):
        abstract_steps([[call("do", v=1)]], RULES, sources=["a", "b"])


def test_signature_ignores_values_and_key_order() -> None:
    a = ToolCall(tool="update", args={"b": 1, "a": "x"})
    b = ToolCall(tool="update", args={"a": "y", "b": 2})
    assert step_signature(a) == step_signature(b) == "update(a=$a, b=$b)"
    assert step_signature("restart service") == "restart service"


def test_read_only_guess_from_prefixes_is_overridable_per_namespace() -> None:
    assert is_read_only("get_user_details", RULES)
    assert is_read_only("search_direct_flight", RULES)
    assert not is_read_only("cancel_reservation", RULES)
    assert not is_read_only("get rid of cache", RULES)  # free text is what the agent did
    rules = StepsConfig(
        world_changing_tools=["get_and_reset_counter"],
        namespaces={"airline": StepRules(read_only_tools=["transfer_to_human_agents"])},
    )
    assert not is_read_only("get_and_reset_counter", rules)
    assert is_read_only("transfer_to_human_agents", rules, "airline")
    assert not is_read_only("transfer_to_human_agents", rules, "other")


def test_hand_offs_are_control_steps_overridable_per_namespace() -> None:
    """A hand-off/escalation is neither a lookup nor a change: no part of the pattern."""
    assert step_class("transfer_to_human_agents", RULES) == "control"
    assert step_class("escalate_ticket", RULES) == "control"
    assert step_class("get_escalation_status", RULES) == "read_only"  # read prefix first
    assert step_class("transfer_funds", RULES) == "world_changing"  # a transfer of money
    assert not is_read_only("transfer_to_human_agents", RULES)
    rules = StepsConfig(
        control_tools=["page_oncall"],
        namespaces={"desk": StepRules(world_changing_tools=["transfer_to_human_agents"])},
    )
    assert step_class("page_oncall", rules) == "control"
    assert step_class("transfer_to_human_agents", rules, "desk") == "world_changing"
    assert step_class("transfer_to_human_agents", rules, "other") == "control"
    cancel = call("cancel_reservation", reservation_id="R1")
    hand_off = call("transfer_to_human_agents", summary="x")
    assert pattern_of([cancel, hand_off], RULES) == pattern_of([cancel], RULES)
    assert pattern_of([call("get_user_details", user_id="u1"), hand_off], RULES) == ()


def test_procedure_shows_a_common_hand_off_last() -> None:
    runs = [
        [call("get_user_details", user_id=u), call("transfer_to_human_agents", summary=u),
         call("cancel", reservation_id=r)]
        for u, r in [("u1", "R1"), ("u2", "R2"), ("u3", "R3")]
    ]  # fmt: skip
    shown = policy_steps(pattern_of(runs[0], RULES), abstract_steps(runs, RULES), runs, RULES)
    assert [s.tool for s in shown] == ["get_user_details", "cancel", "transfer_to_human_agents"]
    assert [s.changes_world for s in shown] == [False, True, False]
    assert shown[-1].as_dict()["control"] is True


def test_pattern_keeps_world_changing_steps_and_collapses_retries() -> None:
    actions = [
        call("get_user_details", user_id="u1"),
        call("update_flights", reservation_id="R1"),
        call("update_flights", reservation_id="R1"),
        call("get_reservation_details", reservation_id="R1"),
    ]
    assert pattern_of(actions, RULES) == ("update_flights(reservation_id=$reservation_id)",)
    assert pattern_of([call("get_user_details", user_id="u1")], RULES) == ()
    assert pattern_of(["a b", "c d"], RULES) == ("a b", "c d")  # v1 actions unchanged


def test_a_refused_call_is_no_step_of_the_pattern() -> None:
    """A call the tool answered with an error changed nothing: a run whose only change was
    refused has the empty pattern, and a refused try before the one that worked is no step."""
    refused = encode_step(ToolCall(tool="update_flights", args={"reservation_id": "R1"},
                                   failed=True))  # fmt: skip
    worked = call("update_flights", reservation_id="R1")
    assert pattern_of([call("get_user_details", user_id="u1"), refused], RULES) == ()
    assert pattern_of([refused, worked], RULES) == pattern_of([worked], RULES)
    sig = "update_flights(reservation_id=$reservation_id)"
    assert pattern_of([worked, refused, worked], RULES) == (sig,)
    assert step_signature(refused) == sig  # the same step, when it works
    # values are abstracted over the calls that worked
    runs = [[encode_step(ToolCall(tool="pay", args={"method": "card_9"}, failed=True)),
             call("pay", method=m)] for m in ("gift_1", "gift_2", "gift_1")]  # fmt: skip
    [pay] = abstract_steps(runs, RULES).values()
    assert pay.variables[0].examples == ["gift_1"]  # card_9 was refused; gift_2 is one run's
    # mining: successes that changed nothing share one pattern whatever was refused on the way
    runs = [
        _episode("a", "u1", "success", [refused]),
        _episode("b", "u2", "success", [call("get_user_details", user_id="u2")]),
        _episode("c", "u3", "success", [worked]),
    ]
    findings = {f.steps: f.success_ids for f in mine_cluster(runs, PolicyConfig())}
    assert findings == {(): ("a", "b")}


def test_procedure_shows_common_lookups_then_the_pattern() -> None:
    runs = [
        [call("get_user_details", user_id=u), call("cancel", reservation_id=r)]
        for u, r in [("u1", "R1"), ("u2", "R2"), ("u3", "R3")]
    ]
    runs[2].insert(0, call("list_airports"))  # made once: not shown
    abstract = abstract_steps(runs, RULES)
    shown = policy_steps(pattern_of(runs[0], RULES), abstract, runs, RULES)
    assert [s.text() for s in shown] == [
        "get_user_details(user_id=$user_id)",
        "cancel(reservation_id=$reservation_id)",
    ]
    assert [s.read_only for s in shown] == [True, False]


def _episode(eid: str, subject: str, outcome: str, actions: list[str], **conditions: str):
    return {
        "episode_id": eid, "subject_id": subject, "session_id": None, "actions": actions,
        "outcome": outcome, "conditions": conditions,
    }  # fmt: skip


def test_pitfall_from_explained_failures_and_none_from_one_failure() -> None:
    def cancel(r: str) -> list[str]:
        return [call("get_user_details", user_id=r), call("cancel_reservation", reservation_id=r)]

    wins = [_episode(f"ok{i}", f"u{i % 3}", "success", cancel(f"R{i}"), membership="gold")
            for i in range(4)]  # fmt: skip
    fails = [_episode(f"bad{i}", f"v{i % 2}", "failure", cancel(f"X{i}"), membership="basic")
             for i in range(4)]  # fmt: skip
    [finding] = mine_cluster([*wins, *fails], PolicyConfig())
    assert finding.preconditions == {"membership": "gold"} and finding.passed
    assert finding.pitfall is not None
    assert finding.pitfall.conditions == {"membership": "basic"}
    assert finding.pitfall.failure_ids == ("bad0", "bad1", "bad2", "bad3")
    [alone] = mine_cluster([*wins, fails[0]], PolicyConfig())
    assert alone.pitfall is None  # one failure teaches nothing
    # an unexplained failure stays a counterexample that blocks the rule
    odd = _episode("odd", "w", "failure", cancel("Z"), membership="gold")
    [blocked] = mine_cluster([*wins, *fails, odd], PolicyConfig())
    assert blocked.unexplained_ids == ("odd",) and not blocked.passed


@given(st.lists(st.sampled_from(["R1", "R2", "Q7", "2024-01-02", "x y"]), min_size=1, max_size=6))
def test_abstraction_is_deterministic_and_order_free(values: list[str]) -> None:
    runs = [[call("do", v=v)] for v in values]
    one = {k: s.as_dict() for k, s in abstract_steps(runs, RULES).items()}
    two = {k: s.as_dict() for k, s in abstract_steps(list(reversed(runs)), RULES).items()}
    assert one == two
    [step] = one.values()
    assert ("constant" in step["args"][0]) == (len(set(values)) == 1 and len(values) >= 2)
