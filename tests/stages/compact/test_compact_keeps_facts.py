"""Compaction is not a deletion of content: extracted facts whose evidence turns are folded
into a session digest keep that evidence (resolved through the turn -> digest lineage), so a
fact waiting for a second session still reaches the proposal rule; a user deletion of the
subject still removes the fact."""

from __future__ import annotations

from datetime import timedelta

from memory_core.config import Settings
from memory_core.context import Partition, RunContext
from memory_core.embed import HashEmbedder
from memory_core.models import Authority, CandidateStatus
from memory_core.stages.compact import compact_episodes
from memory_core.stages.extract import extract_facts
from memory_core.stages.extract.statements import extracted_claim_rows, with_extracted_claims
from memory_core.stages.forget import forget_subject
from memory_core.stages.forget.revoke import revoke_source
from memory_core.stages.mine import mine_partition
from memory_core.stages.promote.commit_gate import check_candidate
from memory_core.stages.promote.rows import evidence_episodes
from memory_core.stores import Stores
from memory_core.stores.candidates import list_candidates
from memory_core.stores.extract import extracted_facts
from memory_core.stores.folded import folded_episodes
from tests.kit.anthropic import FakeAnthropic
from tests.stages.extract.extract_kit import NOW, extract_answer, ingest, turn

LATER = NOW + timedelta(days=90)
PARTITION = Partition("acme", "chat")
WINDOW = ("u1", "prefers_seat", "window")  # importance 3: needs two sessions


def _extract_and_mine(
    stores: Stores, settings: Settings, ctx: RunContext, fake: FakeAnthropic
) -> dict:
    extract_facts(stores, settings, ctx, client=fake.client(), sleep=lambda s: None)
    mine_partition(stores, settings, ctx, PARTITION)
    return {
        (c.subject_id or "", c.claim.predicate, c.claim.object): c
        for c in list_candidates(stores.meta, tenant_id="acme")
        if c.claim is not None
    }


def test_fact_survives_folding_and_reaches_proposal_with_a_later_session(
    stores: Stores, settings: Settings
) -> None:
    fake = FakeAnthropic()  # one fake for every run: its batch ids do not repeat
    fake.answer = extract_answer
    ingest(stores, settings, [turn("a1", "sA", 0, "I'd like a window seat."),
                              turn("a2", "sA", 1, "and some water")])  # fmt: skip
    first = _extract_and_mine(stores, settings, RunContext(now=NOW, run_id="r1"), fake)
    assert WINDOW not in first  # one session, importance 3: not enough yet
    before = {f.fact_id: f.evidence for f in extracted_facts(stores.meta)}
    assert before

    result = compact_episodes(stores, settings, RunContext(now=LATER, run_id="c1"))
    assert result.episodes_folded == 2 and result.digests == 1
    assert not stores.lance.count("episodes", "episode_id = 'a1'")
    after = {f.fact_id: f.evidence for f in extracted_facts(stores.meta)}
    assert after == before  # folded, not forgotten: the fact and its evidence stay

    later_minutes = int((LATER - NOW).total_seconds() // 60) + 31 * 24 * 60
    ingest(stores, settings, [turn("b1", "sB", later_minutes, "A window seat again, please.")])
    cands = _extract_and_mine(stores, settings, RunContext(now=LATER, run_id="r2"), fake)
    window = cands[WINDOW]
    assert window.status is CandidateStatus.pending_score
    assert sorted(window.support_ids) == ["a1", "b1"] and window.stats["sessions"] == 2
    # the commit gate reads the folded turn back from its digest line: a user statement
    episodes = with_extracted_claims(
        stores.meta, evidence_episodes(stores.lance, [window], stores.meta)
    )
    assert episodes["a1"]["folded_into"] and episodes["a1"]["source_role"] == "user"
    gate = check_candidate(window, episodes, reviewer="ana")
    assert gate.refusal is None and gate.authority is Authority.user_statement

    forget_subject(stores, settings, RunContext(now=LATER, run_id="d1"), "u1", tenant_id="acme")
    assert not extracted_facts(stores.meta)
    assert not [c for c in list_candidates(stores.meta, tenant_id="acme") if c.subject_id == "u1"]


def test_a_revoked_folded_turn_no_longer_counts(stores: Stores, settings: Settings) -> None:
    fake = FakeAnthropic()  # one fake for every run: its batch ids do not repeat
    fake.answer = extract_answer
    ingest(stores, settings, [turn("a1", "sA", 0, "I'd like a window seat."),
                              turn("a2", "sA", 1, "and some water")])  # fmt: skip
    _extract_and_mine(stores, settings, RunContext(now=NOW, run_id="r1"), fake)
    compact_episodes(stores, settings, RunContext(now=LATER, run_id="c1"))
    assert [r["episode_id"] for r in extracted_claim_rows(stores, PARTITION)] == ["a1"]
    assert set(folded_episodes(stores.lance, stores.meta, "acme", ["a1", "a2"])) == {"a1", "a2"}

    ctx = RunContext(now=LATER, run_id="v1")
    revoke_source(
        stores, settings, ctx, "a1", reason="wrong", embedder=HashEmbedder(settings.embed.dim)
    )
    assert set(folded_episodes(stores.lance, stores.meta, "acme", ["a1", "a2"])) == {"a2"}
    assert extracted_claim_rows(stores, PARTITION) == []  # out of its digest: gone for good
