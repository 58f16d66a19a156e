"""Extracted facts through the claims path: proposal by evidence, paraphrase merge,
contradiction and supersession, blocked writes audited; and the rules as a property."""

from __future__ import annotations

import json
from typing import Any

from extract_kit import NOW, conversation, extract_answer, ingest, turn
from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from memory_core.config import Settings
from memory_core.context import Partition, RunContext
from memory_core.embed import HashEmbedder
from memory_core.models import CandidateStatus
from memory_core.stages.consolidate import consolidate_partition, consolidation_plan
from memory_core.stages.consolidate_pool import read_partition_state
from memory_core.stages.embed import embed_episodes
from memory_core.stages.extract import extract_facts
from memory_core.stages.extract.plan import RequestPlan
from memory_core.stages.extract.prompt import ExtractAnswer, Turn
from memory_core.stages.extract.rules import check_answer
from memory_core.stages.mine import mine_partition
from memory_core.stages.shared_state import read_shared_state
from memory_core.stores import Stores
from memory_core.stores.candidates import list_candidates, pending_keys
from memory_core.stores.clusters import blocked_claim_episodes
from memory_core.stores.extract import extracted_facts
from tests.kit.anthropic import FakeAnthropic
from tests.kit.embedders import TableEmbedder

PARTITION = Partition("acme", "chat")
HIKING = {"likes hiking in the mountains", "enjoys hiking in mountains"}


def extract_and_mine(
    stores: Stores,
    settings: Settings,
    *,
    embedder: Any = None,
    run_id: str = "r1",
    fake: FakeAnthropic | None = None,
) -> dict[tuple[str, str, str], Any]:
    if fake is None:  # a run after another needs the same fake: batch ids must not repeat
        fake = FakeAnthropic()
        fake.answer = extract_answer
    ctx = RunContext(now=NOW, run_id=run_id)
    extract_facts(stores, settings, ctx, client=fake.client(), embedder=embedder,
                  sleep=lambda s: None)  # fmt: skip
    mine_partition(stores, settings, ctx, PARTITION)
    return {
        (c.subject_id or "", c.claim.predicate, c.claim.object): c
        for c in list_candidates(stores.meta, tenant_id="acme")
        if c.claim is not None
    }


def test_proposal_needs_sessions_or_one_important_self_statement(
    stores: Stores, settings: Settings
) -> None:
    ingest(stores, settings, conversation())
    cands = extract_and_mine(stores, settings)
    veg = cands[("u1", "diet", "vegetarian")]  # two sessions, two episodes
    assert veg.status is CandidateStatus.pending_score
    assert sorted(veg.support_ids) == ["a1", "b1"] and veg.stats["sessions"] == 2
    aisle = cands[("u2", "prefers_seat", "aisle")]  # one statement, importance 4
    assert aisle.status is CandidateStatus.pending_score
    assert ("u1", "prefers_seat", "window") not in cands  # one statement, importance 3
    assert not any(k[1] == "membership" for k in cands)  # the agent said it: no authority
    assert blocked_claim_episodes(stores.meta, "acme", "chat") == {"a2"}  # audited


def test_paraphrases_in_two_sessions_merge_into_one_proposal(
    stores: Stores, settings: Settings
) -> None:
    ingest(stores, settings, conversation())
    cands = extract_and_mine(stores, settings, embedder=TableEmbedder([HIKING]))
    hiking = [c for k, c in cands.items() if "hiking" in k[2]]
    assert len(hiking) == 1
    (cand,) = hiking
    assert cand.status is CandidateStatus.pending_score
    assert sorted(cand.support_ids) == ["b2", "c1"]
    groups = {(f.group_predicate, f.group_object) for f in extracted_facts(stores.meta)
              if "hiking" in f.object}  # fmt: skip
    assert len(groups) == 1


def test_unrelated_wording_does_not_merge(stores: Stores, settings: Settings) -> None:
    ingest(stores, settings, conversation())
    cands = extract_and_mine(stores, settings)  # lexical hash vectors: no paraphrase merge
    assert not [k for k in cands if "hiking" in k[2]]  # each alone, importance 3


def test_later_explicit_change_supersedes_the_current_fact(
    stores: Stores, settings: Settings
) -> None:
    ingest(stores, settings, [
        turn("w1", "s1", 0, "I'd like a window seat."),
        turn("w2", "s2", 60 * 24, "Window seat again, please."),
    ])  # fmt: skip
    fake = FakeAnthropic()
    fake.answer = extract_answer
    first = extract_and_mine(stores, settings, fake=fake)
    window = first[("u1", "prefers_seat", "window")]
    assert window.status is CandidateStatus.pending_score
    ingest(stores, settings, [
        turn("x1", "s3", 60 * 48, "Actually, from now on I want an aisle seat."),
    ])  # fmt: skip
    later = extract_and_mine(stores, settings, run_id="r2", fake=fake)
    aisle = later[("u1", "prefers_seat", "aisle")]
    assert aisle.status is CandidateStatus.pending_score
    assert aisle.stats["explicit_change"] is True and aisle.supersedes == window.candidate_id
    assert later[("u1", "prefers_seat", "window")].status is CandidateStatus.auto_rejected
    assert "x1" in later[("u1", "prefers_seat", "window")].counterexample_ids


# -- tenant and subject isolation of the rules, as a property ---------------------------------

_TURNS = [
    Turn("t1", "acme:e1", "s1", "user", "u1", "2026-07-01T09:00:00+00:00", "a"),
    Turn("t2", "acme:e2", "s1", "agent", "u1", "2026-07-01T09:01:00+00:00", "b"),
    Turn("t3", "acme:e3", "s2", "user", "u2", "2026-07-01T09:02:00+00:00", "c"),
    Turn("t4", "acme:e4", "s2", "tool", "u2", "2026-07-01T09:03:00+00:00", "d"),
]
PLAN = RequestPlan(
    custom_id="x_1", request_hash="1", tenant_id="acme", namespace="chat",
    sessions=[], turns={t.ref: t for t in _TURNS}, params={},
)  # fmt: skip
_REFS = ["t1", "t2", "t3", "t4", "t5", "acme:e1", "acme:e3", "globex:e1", "e1", ""]
_FACT = st.fixed_dictionaries({
    "subject_id": st.sampled_from(["u1", "u2", "u3", "globex-u1"]),
    "predicate": st.sampled_from(["prefers", "lives_in", "likes"]),
    "object": st.sampled_from(["tea", "Paris", "hiking"]),
    "kind": st.sampled_from(["preference", "fact", "plan", "decision", "event"]),
    "evidence": st.lists(st.sampled_from(_REFS), min_size=1, max_size=4),
    "speaker_role": st.sampled_from(["user", "agent", "tool", "system"]),
    "importance": st.one_of(st.none(), st.integers(1, 5)),
})  # fmt: skip


@hyp_settings(max_examples=200, deadline=None)
@given(st.lists(_FACT, max_size=12))
def test_rules_keep_every_fact_inside_its_request_and_subject(facts: list[dict[str, Any]]):
    answer = ExtractAnswer.model_validate({"facts": facts})
    checked = check_answer(answer, PLAN, source="anthropic", model="m", prompt_version="p")
    shown = {t.episode_id: t for t in _TURNS}
    for fact in checked.facts:
        assert fact.tenant_id == "acme" and fact.namespace == "chat"
        assert set(fact.evidence) <= set(shown)  # only turns this request showed
        assert fact.subject_id in {"u1", "u2"}
        for eid in fact.self_evidence:  # own statements: the subject speaking as a user
            assert shown[eid].subject_id == fact.subject_id and shown[eid].role == "user"
        assert (fact.authority == "user_statement") == bool(fact.self_evidence)
    kept_or_dropped = len(checked.facts) + sum(checked.dropped.values())
    assert kept_or_dropped == len(facts)
    assert json.dumps([f.model_dump(mode="json") for f in checked.facts])  # serialisable


_SESSION = st.tuples(
    st.sampled_from(["acme", "globex", "initech"]),
    st.sampled_from(["chat", "it"]),
    st.integers(0, 30),
    st.integers(1, 6),
    st.integers(10, 3000),
)


@hyp_settings(max_examples=100, deadline=None)
@given(st.lists(_SESSION, max_size=25, unique_by=lambda s: (s[0], s[1], s[2])))
def test_requests_never_mix_tenants_and_replan_identically(sessions: list[tuple]) -> None:
    from datetime import UTC, datetime, timedelta

    from memory_core.config import ExtractConfig
    from memory_core.stages.extract.plan import SessionPlan, pack_requests

    cfg = ExtractConfig(max_request_chars=4000, max_sessions_per_request=4)
    t0 = datetime(2026, 7, 1, tzinfo=UTC)
    plans_in = []
    for tenant, namespace, n, turns, chars in sessions:
        plan = SessionPlan(tenant, namespace, f"{tenant}-s{n}", first_at=t0 + timedelta(hours=n))
        plan.turns = [
            {"episode_id": f"{tenant}:{namespace}:{n}:{i}", "source_role": "user",
             "subject_id": f"{tenant}-u{n % 3}", "occurred_at": t0 + timedelta(hours=n, minutes=i),
             "text": "x" * (chars // turns)}
            for i in range(turns)
        ]  # fmt: skip
        plan.content_hash = f"h-{tenant}-{namespace}-{n}-{turns}-{chars}"
        plans_in.append(plan)
    requests = pack_requests(plans_in, cfg, model="m", prompt_version="p")
    seen = []
    for req in requests:
        assert {(s.tenant_id, s.namespace) for s in req.sessions} == {
            (req.tenant_id, req.namespace)
        }
        for shown in req.turns.values():
            assert shown.episode_id.startswith(f"{req.tenant_id}:{req.namespace}:")
        seen += [(s.tenant_id, s.namespace, s.session_key) for s in req.sessions]
    assert sorted(seen) == sorted((s.tenant_id, s.namespace, s.session_key) for s in plans_in)
    again = pack_requests(list(reversed(plans_in)), cfg, model="m", prompt_version="p")
    assert sorted(r.custom_id for r in again) == sorted(r.custom_id for r in requests)
    assert len({r.custom_id for r in requests}) == len(requests)


def test_a_nights_shared_state_reads_give_each_partition_its_own_reads(
    stores: Stores, settings: Settings
) -> None:
    """The process pool reads every partition's small state once for the night
    (``read_shared_state``); each partition's part must be what its own reads give: a
    partition with extracted facts, one with clusters, mined units, a stored insight twin
    and recorded cluster parameters, and one the night has not seen before."""
    ingest(stores, settings, conversation())
    vpn = [
        turn(f"v{i}", f"sv{i}", 10 + i, "Reset the adapter, then reconnected.",
             namespace="it", subject_id=f"w{i}", source_role="agent",
             goal="VPN fails with error 720",
             actions=["reset network adapter", "reconnect vpn"], outcome="success",
             conditions={"error_code": "720", "adapter_mismatch": "true"})
        for i in range(4)
    ]  # fmt: skip
    ingest(stores, settings, vpn)
    extract_and_mine(stores, settings)
    ctx = RunContext(now=NOW, run_id="r2")
    embed_episodes(stores, settings, ctx, embedder=HashEmbedder(settings.embed.dim))
    for unit in [p.unit for p in consolidation_plan(stores, settings, recluster=False)]:
        consolidate_partition(stores, settings, ctx, unit, recluster=False)
    ingest(stores, settings, [turn("n1", "sn", 5, "Hello there", tenant_id="other")])
    shared = read_shared_state(stores)
    parts = [Partition("acme", "chat"), Partition("acme", "it"), Partition("other", "chat")]
    # a night of two of them: the clusters of those alone are held, the third reads its own
    night = read_shared_state(stores, [parts[0], parts[2]])
    assert set(night.cluster.clusters) <= {("acme", "chat"), ("other", "chat")}
    assert ("acme", "it") in shared.cluster.clusters
    seen = {"facts": 0, "recorded": 0, "units": 0, "twins": 0, "pending": 0}
    for part in parts:
        alone = read_partition_state(stores, part)
        for together in (read_partition_state(stores, part, shared),
                         read_partition_state(stores, part, night)):  # fmt: skip
            assert together.cluster.recorded == alone.cluster.recorded, part
            assert together.cluster.clusters.equals(alone.cluster.clusters), part
            assert together.cluster.members.equals(alone.cluster.members), part
            assert together.mine == alone.mine, part
        pending = {k[0] for k in pending_keys(stores.meta, part.tenant_id, part.namespace)}
        key = (part.tenant_id, part.namespace)
        assert shared.mine.pending_ids.get(key, frozenset()) == pending, part
        seen["pending"] += bool(pending)
        seen["facts"] += bool(alone.mine.extracted)
        seen["recorded"] += alone.cluster.recorded is not None
        seen["units"] += bool(alone.mine.units)
        seen["twins"] += bool(alone.mine.semantic_ids)
    assert all(seen.values()), seen  # each kind of state was there to compare
