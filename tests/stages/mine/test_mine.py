"""The mining stage end to end: real Lance + DuckDB, cluster -> mine -> candidates."""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core.context import Partition, RunContext
from memory_core.models import Candidate, CandidateKind, CandidateStatus
from memory_core.stages.cluster.stage import list_clusters
from memory_core.stages.mine.stage import (
    MineState,
    compute_mining,
    mine_partition,
    read_mine_state,
    read_shared_mine_state,
)
from memory_core.stores.candidates import list_candidates
from memory_core.stores.clusters import load_partition

RESET = ["reset network adapter", "reconnect vpn"]


def procedures(mem, steps=RESET, status=None):
    return [
        c
        for c in list_candidates(mem.stores.meta, kind="procedural", status=status)
        if c.procedure is not None and c.procedure.steps == steps
    ]


def blocked_events(mem) -> list[tuple[str, dict]]:
    with mem.stores.meta.connect() as con:
        rows = con.execute(
            "SELECT tenant_id, counts FROM audit_log WHERE action = 'blocked_preference_write'"
        ).fetchall()
    return [(t, json.loads(c)) for t, c in rows]


def test_seed_scenario_yields_the_conditioned_procedure(mem, kit) -> None:
    mem.ingest(kit.seed_scenario())
    mem.consolidate()
    [cand] = procedures(mem)
    assert cand.status == CandidateStatus.pending_score, cand.reason
    assert cand.subject_id is None and cand.tenant_id == "acme"
    assert cand.procedure.preconditions == {"adapter_mismatch": "true"}
    assert cand.conditions == {"adapter_mismatch": "true", "error_code": "720"}
    assert cand.counterexample_ids == ["bad0", "bad1", "bad2"]
    assert cand.support_ids == ["ok0", "ok1", "ok2", "ok3"]
    assert cand.authority == "none"  # a mined procedure still needs human approval
    assert cand.stats["wilson_lower"] > 0.5 and cand.stats["support_subjects"] == 3
    assert {p.source_id for p in cand.provenance} == {*cand.support_ids, *cand.counterexample_ids}
    assert all(p.content_hash for p in cand.provenance)
    assert "3 failure" in cand.text and "adapter_mismatch=true" in cand.text
    # no candidate anywhere says "error 720 -> reset" without the condition; the failures,
    # all explained by adapter_mismatch=false, are a pitfall of the same steps
    pitfalls = []
    for other in list_candidates(mem.stores.meta, status="pending_score"):
        said = other.procedure.steps if other.procedure else other.claim.object
        if other.stats.get("pitfall"):
            pitfalls.append(other)
        elif "reset network adapter" in str(said):
            assert other.conditions.get("adapter_mismatch") == "true"
    [pitfall] = pitfalls
    assert pitfall.stats["pitfall_of"] == cand.candidate_id
    assert pitfall.conditions == {"adapter_mismatch": "false", "error_code": "720"}
    assert pitfall.support_ids == ["bad0", "bad1", "bad2"]
    assert "failed 3 of 3 times when adapter_mismatch=false" in pitfall.claim.object
    [twin] = [
        c
        for c in list_candidates(mem.stores.meta, kind="semantic")
        if c.stats.get("twin_of") == cand.candidate_id
    ]
    assert twin.subject_id is None and twin.status == CandidateStatus.pending_score
    assert twin.claim.predicate == "resolution:error_720"
    assert (
        twin.claim.object == "reset network adapter, then reconnect vpn when adapter_mismatch=true"
    )
    assert twin.counterexample_ids == cand.counterexample_ids


def test_candidate_rows_and_evidence_are_stored(mem, kit) -> None:
    mem.ingest(kit.seed_scenario())
    mem.consolidate()
    [cand] = procedures(mem)
    with mem.stores.meta.connect() as con:
        rows = con.execute(
            "SELECT episode_id, role, subject_id FROM candidate_evidence "
            "WHERE candidate_id = ? ORDER BY episode_id",
            [cand.candidate_id],
        ).fetchall()
    assert ("bad0", "counterexample", "ben") in rows and ("ok0", "support", "ana") in rows
    assert len(rows) == 7


def test_one_success_alone_yields_no_pending_candidate(mem, kit) -> None:
    mem.ingest([kit.make_episode("only")])
    mem.consolidate()
    assert procedures(mem, status="pending_score") == []
    for cand in list_candidates(mem.stores.meta):
        assert cand.status == CandidateStatus.auto_rejected and "min_support" in cand.reason


def test_two_successes_are_kept_as_auto_rejected_naming_min_support(mem, kit) -> None:
    mem.ingest([kit.make_episode(f"e{i}", minutes=i, subject_id=f"u{i}") for i in range(2)])
    mem.consolidate()
    [cand] = procedures(mem)
    assert cand.status == CandidateStatus.auto_rejected
    assert "min_support: 2 distinct supporting episodes < 3" in cand.reason
    assert [c for c in list_candidates(mem.stores.meta) if c.kind == "semantic"] == []


def test_three_of_four_is_auto_rejected_naming_wilson(mem, kit) -> None:
    same = {"error_code": "720", "adapter_mismatch": "true"}
    eps = [
        kit.make_episode(f"e{i}", minutes=i, subject_id=f"u{i}", conditions=same) for i in range(3)
    ]
    eps.append(kit.make_episode("f", minutes=9, outcome="failure", conditions=same))
    mem.ingest(eps)
    mem.consolidate()
    [cand] = procedures(mem)
    assert cand.status == CandidateStatus.auto_rejected
    assert "wilson_lower: 0.36 < 0.50" in cand.reason
    assert cand.counterexample_ids == ["f"]


def test_a_stored_twin_follows_its_procedure_when_it_stops_passing(mem, kit) -> None:
    """A twin is written while its procedure passes; once the procedure fails the policy the
    stored twin is kept in step (auto_rejected, the procedure's reason), not left pending."""
    same = {"error_code": "720", "adapter_mismatch": "true"}
    mem.ingest(
        [
            kit.make_episode(f"e{i}", minutes=i, subject_id=f"u{i}", conditions=same)
            for i in range(3)
        ]
    )
    mem.consolidate()
    [cand] = procedures(mem, status="pending_score")

    def twins() -> list:
        return [c for c in list_candidates(mem.stores.meta) if c.stats.get("twin_of")]

    [twin] = twins()
    assert twin.status == CandidateStatus.pending_score
    mem.ingest([kit.make_episode("f", minutes=9, outcome="failure", conditions=same)])
    mem.consolidate(now=kit.NOW.replace(day=2))
    [cand] = procedures(mem)
    assert cand.status == CandidateStatus.auto_rejected
    [after] = twins()
    assert after.candidate_id == twin.candidate_id
    assert after.status == CandidateStatus.auto_rejected and after.reason == cand.reason


def test_a_failing_procedures_twin_is_built_only_when_the_store_holds_it(mem, kit) -> None:
    """Mining's compute (which may run in a worker process) builds a failing procedure's
    twin only when the partition's stored semantic candidates hold it, the only twins
    ``_keep_twins`` keeps; without that read it builds all of them for the writer to check."""
    same = {"error_code": "720", "adapter_mismatch": "true"}
    passing = [
        kit.make_episode(f"e{i}", minutes=i, subject_id=f"u{i}", conditions=same) for i in range(3)
    ]
    mem.ingest(passing)
    mem.consolidate()
    [stored] = [c for c in list_candidates(mem.stores.meta) if c.stats.get("twin_of")]
    # the passing procedure now fails, and a second one (two successes) never passed
    mem.ingest(
        [
            kit.make_episode("f", minutes=9, outcome="failure", conditions=same),
            *(
                kit.make_episode(
                    f"o{i}",
                    minutes=10 + i,
                    subject_id=f"v{i}",
                    conditions=same,
                    actions=["restart router"],
                )
                for i in range(2)
            ),
        ]
    )
    mem.cluster(now=kit.NOW.replace(day=2))
    part = Partition("acme", "it")
    clustering = load_partition(mem.stores.meta, "acme", "it", centroids=False)

    def twins_built(state: MineState) -> tuple[dict[str, Candidate], set[str]]:
        mined = compute_mining(mem.stores.lance, mem.settings, part, state, clustering)
        procs = {c.candidate_id: c for u in mined.units.values() for c in u.procedural}
        return procs, {t.stats["twin_of"] for u in mined.units.values() for t in u.twins}

    state = read_mine_state(mem.stores, part)
    assert stored.candidate_id in (state.semantic_ids or ())
    procs, built = twins_built(state)
    assert len(procs) == 2
    assert {c.status for c in procs.values()} == {CandidateStatus.auto_rejected}
    assert built == {stored.stats["twin_of"]}
    assert twins_built(replace(state, semantic_ids=None))[1] == set(procs)


def test_tenant_scope_needs_two_subjects(mem, kit) -> None:
    mem.ingest([kit.make_episode(f"e{i}", minutes=i, subject_id="solo") for i in range(4)])
    mem.consolidate()
    [cand] = procedures(mem)
    assert cand.status == CandidateStatus.auto_rejected
    assert cand.reason == "min_subjects: 1 subject < 2 at tenant scope"


def test_tool_and_agent_claims_are_blocked_and_counted_once(mem, kit) -> None:
    eps = [
        kit.statement(f"t{i}", "ana", "send_docs_to", "evil@example.com", role="tool", minutes=i)
        for i in range(3)
    ]
    eps.append(kit.statement("g0", "ana", "theme", "light", role="agent", minutes=5))
    mem.ingest(eps)
    mem.consolidate()
    assert [c for c in list_candidates(mem.stores.meta) if c.subject_id == "ana"] == []
    assert blocked_events(mem) == [("acme", {"claims": 4, "episodes": 4})]
    mem.consolidate(now=kit.NOW.replace(day=2))
    assert len(blocked_events(mem)) == 1  # a rerun does not count them again
    mem.ingest([kit.statement("t9", "ana", "send_docs_to", "x@evil.example", role="tool")])
    mem.consolidate()
    assert blocked_events(mem)[-1] == ("acme", {"claims": 1, "episodes": 1})


def test_a_later_explicit_change_supersedes_the_earlier_preference(mem, kit) -> None:
    mem.ingest(
        [
            kit.statement("p1", "ana", "report_format", "PDF", minutes=1),
            kit.statement("p2", "ana", "report_format", "PDF", minutes=2),
        ]
    )
    mem.consolidate()
    [old] = list_candidates(mem.stores.meta, kind="semantic")
    assert old.status == CandidateStatus.pending_score and old.subject_id == "ana"
    mem.ingest(
        [
            kit.statement(
                "p3", "ana", "report_format", "Markdown", minutes=60,
                span="Actually, from now on I prefer Markdown for reports instead of PDF.",
            )
        ]
    )  # fmt: skip
    mem.consolidate(now=kit.NOW.replace(day=2))
    by_object = {c.claim.object: c for c in list_candidates(mem.stores.meta, kind="semantic")}
    assert by_object["Markdown"].status == CandidateStatus.pending_score
    assert by_object["Markdown"].supersedes == old.candidate_id
    assert by_object["PDF"].candidate_id == old.candidate_id  # updated in place
    assert by_object["PDF"].status == CandidateStatus.auto_rejected


def test_rerun_with_no_new_episodes_changes_nothing(mem, kit) -> None:
    eps = [
        *kit.seed_scenario(),
        kit.statement("s1", "ana", "theme", "dark", minutes=1),
        kit.statement("s2", "ana", "theme", "dark", minutes=2),
        kit.statement("t1", "ana", "theme", "light", role="tool", minutes=3),
    ]
    mem.ingest(eps)
    mem.consolidate()
    before = mem.snapshot()
    assert before["candidates"] and before["cluster_members"] and before["candidate_evidence"]
    result = mem.mine(now=kit.NOW.replace(day=3))
    mem.consolidate(now=kit.NOW.replace(day=4))
    # units whose input is unchanged are carried forward unread; the claims are re-aggregated
    assert result.units_mined == 0 and result.units_kept >= 1
    assert result.upserted["inserted"] == result.upserted["updated"] == 0
    assert mem.snapshot() == before


def test_new_evidence_updates_the_candidate_in_place(mem, kit) -> None:
    mem.ingest(kit.seed_scenario())
    mem.consolidate()
    [first] = procedures(mem)
    extra = kit.make_episode(
        "ok9", minutes=300, subject_id="eve",
        conditions={"error_code": "720", "adapter_mismatch": "true", "cert_expired": "false"},
    )  # fmt: skip
    mem.ingest([extra])
    mem.consolidate(now=kit.NOW.replace(day=2))
    [second] = procedures(mem)
    assert second.candidate_id == first.candidate_id
    assert "ok9" in second.support_ids and second.stats["support_subjects"] == 4


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    placement=st.lists(
        st.tuples(st.sampled_from(["t1", "t2", "t3"]), st.sampled_from(["it", "ops"])),
        min_size=2,
        max_size=4,
        unique=True,
    )
)
def test_identical_episodes_in_several_partitions_never_mix(
    kit: SimpleNamespace, placement: list[tuple[str, str]]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        mem = kit.open_mem(Path(tmp))
        episodes = []
        for tenant, namespace in placement:
            prefix = f"{tenant}-{namespace}-"
            for ep in kit.seed_scenario(tenant=tenant, prefix=prefix):
                episodes.append({**ep, "namespace": namespace})
        mem.ingest(episodes)
        for tenant, namespace in placement:
            mem.consolidate(tenant, namespace)
        passing = procedures(mem, status="pending_score")
        assert sorted((c.tenant_id, c.namespace) for c in passing) == sorted(placement)
        for cand in list_candidates(mem.stores.meta):
            prefix = f"{cand.tenant_id}-{cand.namespace}-"
            evidence = [*cand.support_ids, *cand.counterexample_ids]
            assert evidence and all(e.startswith(prefix) for e in evidence)
            assert all(p.source_id.startswith(prefix) for p in cand.provenance)
            if cand.kind == CandidateKind.procedural and cand.procedure.steps == RESET:
                assert cand.procedure.preconditions == {"adapter_mismatch": "true"}


def _direction(cos_to_first: float) -> list[float]:
    """A unit vector in the plane of the first two axes, at the given cosine to axis 0."""
    vector = [0.0] * 384
    vector[0] = cos_to_first
    vector[1] = (1 - cos_to_first**2) ** 0.5
    return vector


def test_a_recluster_merge_retires_the_absorbed_clusters_candidate(tmp_path: Path, kit) -> None:
    # vectors alone decide here: same goal and steps everywhere, so no goal or step feature;
    # no error code, so each cluster is mined on its own (clusters sharing a code are one
    # unit); the threshold is the default's plus the error-code credit the episodes lack
    mem = kit.open_mem(
        tmp_path / "home",
        cluster={"select": False, "steps_weight": 0.0, "goal_weight": 0.0, "threshold": 0.6},
    )
    a, b = _direction(1.0), _direction(0.1)  # too far apart to share a cluster
    bridge = _direction((1.1 / 2) ** 0.5)  # halfway: near both
    cond = {"adapter_mismatch": "true"}
    mem.ingest(
        [
            kit.make_episode(
                f"a{i}", minutes=10 + 2 * i, subject_id=f"u{i % 2}", vector=a, conditions=cond
            )
            for i in range(3)
        ]
    )
    mem.consolidate()
    mem.ingest(
        [
            kit.make_episode(
                f"b{i}", minutes=11 + 2 * i, subject_id=f"u{i % 2}", vector=b, conditions=cond
            )
            for i in range(3)
        ]
    )
    mem.consolidate()
    assert len(procedures(mem, status="pending_score")) == 2  # one per cluster
    mem.ingest(
        [kit.make_episode(f"m{i}", minutes=i, vector=bridge, conditions=cond) for i in range(2)]
    )
    mem.consolidate()
    mem.cluster(recluster=True)
    result = mem.mine()
    assert result.stale == 2  # the absorbed cluster's procedure and its insight twin
    [live] = procedures(mem, status="pending_score")
    assert live.support_ids == ["a0", "a1", "a2", "b0", "b1", "b2", "m0", "m1"]
    [retired] = procedures(mem, status="auto_rejected")
    assert retired.reason.startswith("stale: cluster") and "merged" in retired.reason


def test_clusters_sharing_an_error_code_are_judged_together(tmp_path: Path, kit) -> None:
    """Two wordings of one problem (same error code) in two clusters: the steps that failed in
    one count against the same steps in the other, and the procedure is proposed once."""
    mem = kit.open_mem(
        tmp_path / "home", cluster={"select": False, "steps_weight": 0.0, "goal_weight": 0.0}
    )
    a, b = _direction(1.0), _direction(0.1)  # too far apart to share a cluster
    wins = [kit.make_episode(f"a{i}", minutes=i, subject_id=f"u{i % 2}", vector=a,
                             conditions={"error_code": "720", "os": "linux"})
            for i in range(3)]  # fmt: skip
    fail = kit.make_episode("b0", minutes=9, vector=b, outcome="failure",
                            conditions={"error_code": "720", "os": "mac"})  # fmt: skip
    other = [kit.make_episode(f"b{i}", minutes=9 + i, subject_id=f"u{i % 2}", vector=b,
                              actions=["renew certificate", "reconnect vpn"],
                              conditions={"error_code": "720", "os": "mac"})
             for i in range(1, 4)]  # fmt: skip
    mem.ingest([*wins, fail, *other])
    mem.consolidate()
    assert len(list_clusters(mem.stores.meta, "acme")) == 2
    [proc] = procedures(mem)  # once, not once per cluster
    assert proc.counterexample_ids == ["b0"]  # the other wording's failure counts against it
    assert proc.support_ids == ["a0", "a1", "a2"]
    assert proc.procedure.preconditions == {"os": "linux"}  # what separates them


@pytest.mark.parametrize("shared", [False, True])
def test_a_policy_change_retires_candidates_of_the_old_version(
    tmp_path: Path, kit, shared: bool
) -> None:
    """With ``shared``: the partitions' pending ids as a night of many reads them once
    (``read_shared_mine_state``), which is what staleness then goes by."""
    old = kit.open_mem(tmp_path / "home")
    old.ingest(kit.seed_scenario())
    old.consolidate()
    new = kit.open_mem(tmp_path / "home", policy={"version": "2"})
    if shared:
        new.cluster()
        once = read_shared_mine_state(new.stores)
        mine_partition(new.stores, new.settings, RunContext(now=kit.NOW), Partition("acme", "it"),
                       shared=once)  # fmt: skip
    else:
        new.consolidate()
    by_version = {c.policy_version: c for c in procedures(new)}
    assert by_version["2"].status == CandidateStatus.pending_score
    assert by_version["1"].status == CandidateStatus.auto_rejected
    assert by_version["1"].reason == "stale: mined under policy version 1, now 2"


def _structured_scenario(kit) -> list[dict]:
    """The seed scenario with tool calls: ``reset_adapter(mode=full, ticket=T-<run>)`` then
    ``reconnect_vpn()``; ana (ok0, ok3) first looks up her own device, ``DEV-ANA-7``."""
    reconnect = {"tool": "reconnect_vpn", "args": {}}
    own_device = {"tool": "get_device", "args": {"device_id": "DEV-ANA-7"}}
    episodes = kit.seed_scenario()
    for episode in episodes:
        eid = episode["episode_id"]
        reset = {"tool": "reset_adapter", "args": {"mode": "full", "ticket": f"T-{eid}"}}
        if eid.startswith(("ok", "bad")):
            episode["actions"] = [reset, reconnect]
        if eid in ("ok0", "ok3"):  # both ana's
            episode["actions"] = [own_device, reset, reconnect]
    return episodes


def test_a_procedure_quotes_no_value_that_only_one_user_gave(mem, kit) -> None:
    """Structured steps: three users agree on ``mode=full`` (a constant of the procedure) and
    each run files its own ticket (a variable, none quoted as an example: each is one run's);
    one user looked up their own device in two of the four successful runs, which is half the
    support, so the lookup is shown, but as a variable: two runs of one user agreeing on their
    device id are no evidence that the procedure fixes it, and the id is that user's."""
    mem.ingest(_structured_scenario(kit))
    mem.consolidate()
    [cand] = [
        c for c in list_candidates(mem.stores.meta, kind="procedural", status="pending_score")
        if c.support_ids == ["ok0", "ok1", "ok2", "ok3"]
    ]  # fmt: skip
    assert cand.procedure.steps == [
        "get_device(device_id=$device_id)",
        "reset_adapter(mode=full, ticket=$ticket)",
        "reconnect_vpn()",
    ]
    stored = cand.model_dump_json()
    assert "DEV-ANA-7" not in stored and "T-ok" not in stored


def test_forgetting_a_user_leaves_no_value_of_theirs_in_a_procedure(mem, kit) -> None:
    """A procedure that had quoted ana's device id kept it after ana was forgotten (her
    episodes gone, the candidate's pins of them removed, its body unchanged), and the
    deletion's verification, which looks for her name and record ids, passed: seen on
    tau-bench with a user's reservation id. Now nothing of hers is in any file of the home."""
    from memory_core.context import RunContext
    from memory_core.stages.forget import forget_subject

    mem.ingest(_structured_scenario(kit))
    mem.consolidate()
    receipt = forget_subject(
        mem.stores, mem.settings, RunContext(now=kit.NOW), "ana", tenant_id="acme"
    )
    assert receipt["verification"]["verified"]
    holding = [
        str(path) for path in Path(mem.settings.home).rglob("*")
        if path.is_file() and b"DEV-ANA-7" in path.read_bytes()
    ]  # fmt: skip
    assert holding == []
    # the procedure itself is still there, supported by the others' runs
    assert [
        c.procedure.steps
        for c in list_candidates(mem.stores.meta, kind="procedural")
        if c.procedure and "reset_adapter(mode=full, ticket=$ticket)" in c.procedure.steps
    ]
