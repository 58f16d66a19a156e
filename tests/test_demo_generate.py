"""The demo generator: valid episodes, determinism, and a ground truth that matches the data."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memory_core.demo import DemoData, generate_demo, write_demo
from memory_core.models import Episode

Ep = dict[str, Any]


@pytest.fixture(scope="module")
def demo() -> DemoData:
    return generate_demo(seed=7)


@pytest.fixture(scope="module")
def by_id(demo: DemoData) -> dict[str, Ep]:
    return {ep["episode_id"]: ep for ep in demo.episodes}


def _strings(ep: Ep) -> list[str]:
    """Every free-text value of an episode, where a secret could hide."""
    values = [ep["text"], ep["goal"], ep["feedback"], *ep["actions"], *ep["observations"]]
    values += list(ep["conditions"].values())
    values += [c["span"] for c in ep["claims"]] + [c["object"] for c in ep["claims"]]
    return [v for v in values if v]


def _luhn_ok(number: str) -> bool:
    digits = [int(c) for c in number if c.isdigit()]
    total = 0
    for i, d in enumerate(reversed(digits)):
        total += sum(divmod(d * 2, 10)) if i % 2 == 1 else d
    return total % 10 == 0


def test_every_episode_validates(demo: DemoData) -> None:
    for ep in demo.episodes:
        assert "vector" not in ep
        Episode.model_validate(ep)


def test_size_and_shape(demo: DemoData) -> None:
    assert 1200 <= len(demo.episodes) <= 2500
    ids = [ep["episode_id"] for ep in demo.episodes]
    assert len(ids) == len(set(ids))
    assert {ep["tenant_id"] for ep in demo.episodes} == {"acme-it", "globex-dev", "initech"}
    for tenant in ("acme-it", "globex-dev", "initech"):
        people = {
            ep["subject_id"]
            for ep in demo.episodes
            if ep["tenant_id"] == tenant and ep["source_role"] != "system"
        }
        assert 8 <= len(people) <= 15
    spaces = {(ep["tenant_id"], ep["namespace"]) for ep in demo.episodes}
    assert spaces == {
        ("acme-it", "it-support"),
        ("globex-dev", "coding"),
        ("initech", "it-support"),
        ("initech", "coding"),
    }


def test_timestamps(demo: DemoData) -> None:
    first = min(ep["occurred_at"] for ep in demo.episodes)
    last = max(ep["occurred_at"] for ep in demo.episodes)
    assert first.startswith("2026-06-01") and last < "2026-08-05"
    for ep in demo.episodes:
        for key in ("occurred_at", "recorded_at", "expires_at"):
            assert ep[key] is None or ep[key].endswith("Z")
        assert ep["recorded_at"] >= ep["occurred_at"]
        assert all(isinstance(v, str) for v in ep["conditions"].values())
    assert [ep["occurred_at"] for ep in demo.episodes] == sorted(
        ep["occurred_at"] for ep in demo.episodes
    )


def test_deterministic() -> None:
    assert generate_demo(seed=7) == generate_demo(seed=7)
    other = generate_demo(seed=8)
    assert other.episodes != generate_demo(seed=7).episodes
    assert other.truth["seed"] == 8


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="scale"):
        generate_demo(scale=0)
    with pytest.raises(ValueError, match="timezone"):
        generate_demo(start=datetime(2026, 6, 1, tzinfo=UTC).replace(tzinfo=None))


def test_seed_scenario(demo: DemoData) -> None:
    vpn = [
        ep
        for ep in demo.episodes
        if ep["tenant_id"] == "acme-it" and ep["goal"] and "720" in ep["goal"]
    ]
    reset = [ep for ep in vpn if ep["actions"] == ["reset network adapter", "reconnect vpn"]]
    wins = [
        ep
        for ep in reset
        if ep["outcome"] == "success" and ep["conditions"]["adapter_mismatch"] == "true"
    ]
    assert len(wins) >= 4
    assert len({ep["subject_id"] for ep in wins}) >= 3
    losses = [
        ep
        for ep in reset
        if ep["outcome"] == "failure"
        and ep["conditions"]["cert_expired"] == "true"
        and ep["conditions"]["adapter_mismatch"] == "false"
    ]
    assert len(losses) >= 3
    renew = [
        ep
        for ep in vpn
        if ep["actions"] == ["renew certificate", "reconnect vpn"]
        and ep["outcome"] == "success"
        and ep["conditions"]["cert_expired"] == "true"
    ]
    assert len(renew) >= 4
    assert any(ep["goal"] == "VPN fails with error 720" for ep in vpn)
    assert len({ep["goal"] for ep in vpn}) >= 3  # paraphrased
    procedure = next(
        p
        for p in demo.truth["procedures"]
        if p["tenant_id"] == "acme-it" and p["steps"] == ["reset network adapter", "reconnect vpn"]
    )
    assert procedure["preconditions"] == {"adapter_mismatch": "true"}
    assert {ep["episode_id"] for ep in wins} <= set(procedure["support_ids"])
    assert {ep["episode_id"] for ep in losses} <= set(procedure["counterexample_ids"])


def test_procedures_separate_only_by_their_precondition(
    demo: DemoData, by_id: dict[str, Ep]
) -> None:
    per_space = Counter((p["tenant_id"], p["namespace"]) for p in demo.truth["procedures"])
    assert all(6 <= n <= 10 for n in per_space.values()), per_space
    for p in demo.truth["procedures"]:
        support = [by_id[i] for i in p["support_ids"]]
        counter = [by_id[i] for i in p["counterexample_ids"]]
        assert len(support) >= 4 and len(counter) >= 2
        assert len({ep["subject_id"] for ep in support}) >= 3
        assert all(ep["actions"] == p["steps"] for ep in support + counter)
        assert all(ep["outcome"] == "success" for ep in support)
        assert all(ep["outcome"] == "failure" for ep in counter)
        assert "error_code" not in p["preconditions"]
        for key, value in p["preconditions"].items():
            assert all(ep["conditions"][key] == value for ep in support)
            assert all(ep["conditions"][key] != value for ep in counter)
        exempt = set(p["preconditions"]) | {k for e in p["equivalent_preconditions"] for k in e}
        for key in set(support[0]["conditions"]) - exempt:
            ok = {ep["conditions"].get(key) for ep in support}
            bad = {ep["conditions"].get(key) for ep in counter}
            assert ok & bad, f"{p['name']} in {p['tenant_id']}: {key} separates by chance"


def test_every_successful_pattern_is_a_procedure_or_a_trap(demo: DemoData) -> None:
    wins = {
        (ep["tenant_id"], ep["namespace"], tuple(ep["actions"]))
        for ep in demo.episodes
        if ep["outcome"] == "success"
    }
    known = {
        (p["tenant_id"], p["namespace"], tuple(p["steps"]))
        for p in demo.truth["procedures"] + demo.truth["traps"]
    }
    assert wins <= known


def test_traps(demo: DemoData, by_id: dict[str, Ep]) -> None:
    kinds = Counter(t["kind"] for t in demo.truth["traps"])
    assert set(kinds) == {"single_success", "coin_flip", "two_successes", "one_subject"}
    procedures = {(p["tenant_id"], tuple(p["steps"])) for p in demo.truth["procedures"]}
    for trap in demo.truth["traps"]:
        assert (trap["tenant_id"], tuple(trap["steps"])) not in procedures
        eps = [by_id[i] for i in trap["episode_ids"]]
        wins = [ep for ep in eps if ep["outcome"] == "success"]
        if trap["kind"] == "single_success":
            assert len(wins) == 1
        elif trap["kind"] == "two_successes":
            assert len(wins) == 2
        elif trap["kind"] == "one_subject":
            assert len(wins) >= 3 and len({ep["subject_id"] for ep in wins}) == 1
        else:
            assert len(wins) * 2 == len(eps) >= 8
            outcomes: dict[str, set[str]] = defaultdict(set)
            for ep in eps:
                outcomes[json.dumps(ep["conditions"], sort_keys=True)].add(ep["outcome"])
            assert all(o == {"success", "failure"} for o in outcomes.values())


def test_truth_ids_exist(demo: DemoData, by_id: dict[str, Ep]) -> None:
    truth = demo.truth
    json.dumps(truth)  # serialisable
    ids: list[str] = []
    for p in truth["procedures"]:
        ids += p["support_ids"] + p["counterexample_ids"]
    for group in ("traps", "preferences"):
        for item in truth[group]:
            ids += item["episode_ids"]
    for group in ("injected_instructions", "agent_claims", "secrets"):
        ids += [item["episode_id"] for item in truth[group]]
    ids += truth["sensitive_episode_ids"] + truth["expiring_episode_ids"]
    ids += list(truth["intent_of_episode"])
    assert ids and set(ids) <= set(by_id)
    assert truth["episode_count"] == len(demo.episodes)
    intents = truth["intent_of_episode"]
    for p in truth["procedures"]:
        assert {intents[i] for i in p["support_ids"] + p["counterexample_ids"]} == {
            p["problem_key"]
        }


def test_secrets_planted(demo: DemoData, by_id: dict[str, Ep]) -> None:
    secrets = demo.truth["secrets"]
    kinds = {s["kind"] for s in secrets}
    assert kinds == {
        "anthropic_api_key",
        "aws_access_key",
        "github_token",
        "bearer_token",
        "private_key",
        "password_in_url",
        "card_number",
    }
    fields = {s["field"] for s in secrets}
    assert {"text", "observations", "actions", "feedback", "conditions"} <= fields
    for secret in secrets:
        assert secret["needle"] in secret["value"]
        assert any(secret["value"] in s for s in _strings(by_id[secret["episode_id"]]))
        holders = [ep for ep in demo.episodes if any(secret["needle"] in s for s in _strings(ep))]
        listed = {s["episode_id"] for s in secrets if s["needle"] == secret["needle"]}
        assert {ep["episode_id"] for ep in holders} == listed
    values = {s["kind"]: s["value"] for s in secrets}
    assert values["password_in_url"] == "postgres://admin:S3cretPass!@db.internal:5432/app"
    assert values["private_key"].startswith("-----BEGIN RSA PRIVATE KEY-----\n")
    assert values["bearer_token"].startswith("Authorization: Bearer ")
    for secret in secrets:
        if secret["kind"] == "card_number":
            assert _luhn_ok(secret["value"])
        if secret["kind"] == "anthropic_api_key":
            assert len(secret["value"]) == len("sk-ant-api03-") + 40


def test_preferences(demo: DemoData, by_id: dict[str, Ep]) -> None:
    rule = demo.truth["preference_rule"]
    prefs = demo.truth["preferences"]
    assert any(p["changed"] for p in prefs) and any(not p["qualifies"] for p in prefs)
    for pref in prefs:
        eps = sorted((by_id[i] for i in pref["episode_ids"]), key=lambda ep: ep["occurred_at"])
        assert all(ep["source_role"] == "user" for ep in eps)
        assert all(ep["subject_id"] == pref["subject_id"] for ep in eps)
        claims = [(c["predicate"], c["object"]) for ep in eps for c in ep["claims"]]
        assert {c[0] for c in claims} == {pref["predicate"]}
        assert claims[-1][1] == pref["current_object"] == pref["history"][-1]["object"]
        assert pref["history"][0]["valid_from"] == eps[0]["occurred_at"]
        if pref["changed"]:
            change = next(ep for ep in eps if ep["claims"][0]["object"] == pref["current_object"])
            assert "from now on I prefer" in change["text"]
            assert change["occurred_at"] == pref["history"][-1]["valid_from"]
        same = sum(obj == pref["current_object"] for _, obj in claims)
        assert pref["qualifies"] == (same >= rule["min_statements"] or pref["changed"])
    # the shared subject id holds different truths in two tenants
    tz = {
        p["tenant_id"]: p["current_object"]
        for p in prefs
        if p["subject_id"] == "jordan.lee" and p["predicate"] == "timezone"
    }
    assert len(tz) == 2 and len(set(tz.values())) == 2


def test_injected_and_agent_claims(demo: DemoData, by_id: dict[str, Ep]) -> None:
    injected = demo.truth["injected_instructions"]
    assert {i["tenant_id"] for i in injected} == {"acme-it", "globex-dev", "initech"}
    assert any(i["object"] == "external-archive@evil.example" for i in injected)
    for item in injected:
        ep = by_id[item["episode_id"]]
        assert ep["source_role"] == "tool"
        claim = ep["claims"][0]
        assert (claim["predicate"], claim["object"]) == (item["predicate"], item["object"])
    for item in demo.truth["agent_claims"]:
        assert by_id[item["episode_id"]]["source_role"] == "agent"
    claim_roles = {ep["source_role"] for ep in demo.episodes if ep["claims"]}
    assert claim_roles == {"user", "tool", "agent"}
    listed = {p["episode_id"] for p in injected + demo.truth["agent_claims"]}
    listed |= {i for p in demo.truth["preferences"] for i in p["episode_ids"]}
    assert {ep["episode_id"] for ep in demo.episodes if ep["claims"]} == listed


def test_sensitive_and_expiring(demo: DemoData, by_id: dict[str, Ep]) -> None:
    sensitive = demo.truth["sensitive_episode_ids"]
    assert len(sensitive) >= 3
    assert sensitive == [i for i in sensitive if by_id[i]["sensitivity"] == "high"]
    assert all(by_id[i]["purpose"] for i in sensitive)
    assert {ep["episode_id"] for ep in demo.episodes if ep["sensitivity"] == "high"} == set(
        sensitive
    )
    expiring = demo.truth["expiring_episode_ids"]
    assert len(expiring) >= 10
    assert all(by_id[i]["expires_at"] > by_id[i]["occurred_at"] for i in expiring)


def test_write_demo(tmp_path: Path, demo: DemoData) -> None:
    episodes_path, truth_path = write_demo(demo, tmp_path / "out")
    lines = episodes_path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == demo.episodes
    assert json.loads(truth_path.read_text(encoding="utf-8")) == demo.truth
