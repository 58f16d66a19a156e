"""Counterexample mining over one cluster: separation, statistics and the policy (pure)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.config import PolicyConfig
from memory_core.stages.mine.counterexamples import (
    find_separator,
    mine_cluster,
    wilson_lower_bound,
)

POLICY = PolicyConfig()
RESET = ("reset network adapter", "reconnect vpn")


def finding_for(findings, steps=RESET):
    matches = [f for f in findings if f.steps == steps]
    assert len(matches) == 1, findings
    return matches[0]


def test_wilson_lower_bound_matches_the_policy_examples() -> None:
    z = POLICY.wilson_z
    assert wilson_lower_bound(3, 3, z) == pytest.approx(1 / (1 + z * z / 3))
    assert wilson_lower_bound(3, 3, z) > 0.5  # 3 of 3 passes
    assert wilson_lower_bound(3, 4, z) < 0.5  # 3 of 4 does not
    assert wilson_lower_bound(3, 4, z) == pytest.approx(0.356, abs=1e-3)
    assert wilson_lower_bound(0, 0, z) == 0.0
    assert wilson_lower_bound(2, 2, z) < wilson_lower_bound(3, 3, z) < wilson_lower_bound(9, 9, z)


def test_seed_scenario_separates_on_adapter_mismatch(kit: SimpleNamespace) -> None:
    found = finding_for(mine_cluster(kit.seed_scenario(), POLICY))
    assert found.preconditions == {"adapter_mismatch": "true"}
    assert sorted(found.counterexample_ids) == ["bad0", "bad1", "bad2"]
    assert found.unexplained_ids == ()
    assert found.separation.perfect and found.separation.score == 1.0
    assert found.passed, found.reason
    assert found.conditions["error_code"] == "720"  # shared context, not a precondition
    assert "error_code" not in found.preconditions
    assert found.stats()["support_subjects"] == 3
    assert found.stats()["support_sessions"] == 4


def test_a_constant_key_never_separates_and_noise_is_not_chosen(kit: SimpleNamespace) -> None:
    eps = kit.seed_scenario()
    separation = find_separator(
        [e["conditions"] for e in eps if e["episode_id"].startswith("ok")],
        [e["conditions"] for e in eps if e["episode_id"].startswith("bad")],
        max_keys=3,
    )
    assert "error_code" not in separation.conditions
    assert not {"os", "region"} & set(separation.conditions)


def test_the_more_specific_of_two_equivalent_separators_wins() -> None:
    # adapter_mismatch=true holds only for these successes; cert_expired=false also holds
    # for the ras-service episodes, so it is the less specific choice.
    ok = [{"adapter_mismatch": "true", "cert_expired": "false"}] * 3
    bad = [{"adapter_mismatch": "false", "cert_expired": "true"}] * 2
    ras = [{"adapter_mismatch": "false", "cert_expired": "false"}] * 4
    found = find_separator(ok, bad, max_keys=3, population=ok + bad + ras)
    assert found.conditions == {"adapter_mismatch": "true"}


def test_two_keys_when_no_single_key_separates() -> None:
    ok = [{"a": "1", "b": "1"}] * 3
    bad = [{"a": "1", "b": "0"}, {"a": "0", "b": "1"}]
    assert find_separator(ok, bad, max_keys=3).conditions == {"a": "1", "b": "1"}
    assert not find_separator(ok, bad, max_keys=1).perfect


def test_imperfect_separator_reports_its_score() -> None:
    ok = [{"a": "1", "n": "x"}] * 3
    bad = [{"a": "0", "n": "x"}, {"a": "1", "n": "x"}]
    found = find_separator(ok, bad, max_keys=3)
    assert found.conditions == {"a": "1"}
    assert found.excluded == 1 and found.score == 0.5 and not found.perfect


def test_one_success_is_not_a_pattern(kit: SimpleNamespace) -> None:
    assert mine_cluster([kit.make_episode("only")], POLICY) == []


def test_two_successes_fail_min_support(kit: SimpleNamespace) -> None:
    eps = [kit.make_episode(f"e{i}", subject_id=f"u{i}") for i in range(2)]
    found = finding_for(mine_cluster(eps, POLICY))
    assert not found.passed
    assert "min_support: 2 distinct supporting episodes < 3" in found.reason


def test_three_of_four_under_the_conditions_fails_wilson(kit: SimpleNamespace) -> None:
    same = {"error_code": "720", "adapter_mismatch": "true"}
    eps = [kit.make_episode(f"e{i}", subject_id=f"u{i}", conditions=same) for i in range(3)]
    eps.append(kit.make_episode("f", subject_id="u9", outcome="failure", conditions=same))
    found = finding_for(mine_cluster(eps, POLICY))
    assert not found.passed
    assert found.success_rate == 0.75
    assert "wilson_lower: 0.36 < 0.50" in found.reason
    assert "unexplained_counterexamples: 1" in found.reason
    assert found.unexplained_ids == ("f",)


def test_tenant_scope_needs_two_subjects(kit: SimpleNamespace) -> None:
    eps = [kit.make_episode(f"e{i}", subject_id="solo") for i in range(4)]
    found = finding_for(mine_cluster(eps, POLICY))
    assert found.failed_tests == ("min_subjects: 1 subject < 2 at tenant scope",)
    eps[0]["subject_id"] = "other"
    assert finding_for(mine_cluster(eps, POLICY)).passed


def test_partial_and_unknown_are_neither(kit: SimpleNamespace) -> None:
    eps = [kit.make_episode(f"e{i}", subject_id=f"u{i % 2}") for i in range(3)]
    eps += [
        kit.make_episode("p", outcome="partial", conditions={"error_code": "720"}),
        kit.make_episode("u", outcome="unknown", conditions={"error_code": "720"}),
    ]
    found = finding_for(mine_cluster(eps, POLICY))
    assert found.passed
    assert found.counterexample_ids == ()
    assert set(found.neither_ids) == {"p", "u"}


def test_without_counterexamples_the_envelope_is_the_precondition(kit: SimpleNamespace) -> None:
    conds = [{"error_code": "720", "adapter_mismatch": "true", "os": f"os{i}"} for i in range(3)]
    eps = [kit.make_episode(f"e{i}", subject_id=f"u{i}", conditions=c) for i, c in enumerate(conds)]
    found = finding_for(mine_cluster(eps, POLICY))
    # adapter_mismatch is shared by all successes: kept (we cannot tell it does not matter);
    # error_code is the cluster's key, so it is context; os differs, so it is not required.
    assert found.preconditions == {"adapter_mismatch": "true"}
    assert found.conditions == {"adapter_mismatch": "true", "error_code": "720"}


def test_ignored_keys_are_never_conditions(kit: SimpleNamespace) -> None:
    policy = PolicyConfig(ignore_condition_keys=["adapter_mismatch"])
    found = finding_for(mine_cluster(kit.seed_scenario(), policy))
    assert "adapter_mismatch" not in found.preconditions
    assert found.preconditions == {"cert_expired": "false"}


def test_exact_sequence_is_the_pattern(kit: SimpleNamespace) -> None:
    eps = kit.seed_scenario()
    eps += [
        kit.make_episode(f"rev{i}", subject_id=f"u{i}", actions=list(reversed(RESET)))
        for i in range(3)
    ]
    findings = mine_cluster(eps, POLICY)
    assert {f.steps for f in findings} == {
        RESET,
        tuple(reversed(RESET)),
        ("renew certificate", "reconnect vpn"),
    }
    assert finding_for(findings).support_ids == ("ok0", "ok1", "ok2", "ok3")


def test_polars_frame_input_gives_the_same_findings(kit: SimpleNamespace) -> None:
    eps = kit.seed_scenario()
    frame = pl.DataFrame([{**e, "conditions": json.dumps(e["conditions"])} for e in eps])
    assert mine_cluster(frame, POLICY) == mine_cluster(eps, POLICY)


_CONDS = [
    {"error_code": "720", "a": "1", "os": "win"},
    {"error_code": "720", "a": "0", "os": "win"},
    {"error_code": "720", "a": "1", "os": "mac"},
    {"error_code": "720", "a": "0", "os": "mac", "b": "x"},
]


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.integers(0, 2),  # pattern
            st.sampled_from(["success", "success", "failure", "partial"]),
            st.integers(0, len(_CONDS) - 1),
            st.integers(0, 3),  # subject
            st.integers(0, 5),  # session (0: none)
        ),
        min_size=1,
        max_size=40,
    )
)
def test_groups_decide_as_episodes_one_by_one(rows: list[tuple[int, str, int, int, int]]) -> None:
    """Mining episodes grouped by shared conditions objects finds exactly what mining them one
    by one (every episode its own object, so every group one episode) finds."""
    from memory_core.stages.mine.counterexamples import MiningEpisode, mine_episodes

    steps = [("reset",), ("reset", "reconnect"), ("reinstall",)]
    shared = [dict(c) for c in _CONDS]

    def episodes(private: bool) -> list[MiningEpisode]:
        return [
            MiningEpisode(
                f"e{i:03d}", f"u{who}", f"s{session}" if session else None, steps[pat],
                outcome, dict(_CONDS[cond]) if private else shared[cond],
            )
            for i, (pat, outcome, cond, who, session) in enumerate(rows)
        ]  # fmt: skip

    policy = PolicyConfig(min_support=2)
    assert mine_episodes(episodes(False), policy) == mine_episodes(episodes(True), policy)
