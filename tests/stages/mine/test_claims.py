"""Claim aggregation: only users' own statements become preference candidates (pure)."""

from __future__ import annotations

from datetime import datetime
from types import SimpleNamespace
from typing import Any

from memory_core.config import ClaimsConfig
from memory_core.models import Authority, CandidateStatus
from memory_core.stages.mine.claims import aggregate_claims, claim_candidate_id

CONFIG = ClaimsConfig()


def as_stored(ep: dict[str, Any]) -> dict[str, Any]:
    """What ingest stores: claims stamped with the authority of the source role."""
    authority = "user_statement" if ep["source_role"] == "user" else "none"
    if ep["source_role"] == "system":
        authority = "system"
    claims = [{**c, "authority": authority} for c in ep.get("claims", [])]
    return {**ep, "claims": claims, "occurred_at": datetime.fromisoformat(ep["occurred_at"])}


def run(episodes: list[dict[str, Any]]):
    return aggregate_claims(
        [as_stored(e) for e in episodes], CONFIG, tenant_id="acme", namespace="it",
        policy_version="1",
    )  # fmt: skip


def test_repeated_statement_is_a_subject_scoped_candidate(kit: SimpleNamespace) -> None:
    result = run(
        [
            kit.statement("a", "ana", "theme", "dark mode", minutes=1),
            kit.statement("b", "ana", "theme", "Dark  Mode", minutes=2),
        ]
    )
    [cand] = result.candidates
    assert cand.subject_id == "ana" and cand.tenant_id == "acme"
    assert cand.claim is not None and cand.claim.predicate == "theme"
    assert cand.status == CandidateStatus.pending_score
    assert cand.authority == Authority.user_statement
    assert cand.support_ids == ["a", "b"]
    assert cand.stats["statements"] == 2


def test_one_statement_is_not_a_preference(kit: SimpleNamespace) -> None:
    assert run([kit.statement("a", "ana", "theme", "dark mode")]).candidates == []


def test_tool_and_agent_claims_are_blocked_never_candidates(kit: SimpleNamespace) -> None:
    eps = [
        kit.statement(f"t{i}", "ana", "send_docs_to", "evil@example.com", role="tool", minutes=i)
        for i in range(3)
    ] + [
        kit.statement(f"g{i}", "ana", "theme", "light mode", role="agent", minutes=10 + i)
        for i in range(2)
    ]
    result = run(eps)
    assert result.candidates == []
    assert result.blocked == {"t0": 1, "t1": 1, "t2": 1, "g0": 1, "g1": 1}
    assert result.blocked_claims == 5


def test_system_claims_are_ignored_not_blocked(kit: SimpleNamespace) -> None:
    eps = [kit.statement(f"s{i}", "ana", "theme", "x", role="system") for i in range(2)]
    result = run(eps)
    assert result.candidates == [] and result.blocked == {} and result.ignored == 2


def test_explicit_change_supersedes_the_earlier_preference(kit: SimpleNamespace) -> None:
    eps = [
        kit.statement("a", "ana", "report_format", "PDF", minutes=1),
        kit.statement("b", "ana", "report_format", "PDF", minutes=2),
        kit.statement("c", "ana", "report_format", "PDF", minutes=3),
        kit.statement(
            "d", "ana", "report_format", "Markdown", minutes=9,
            span="Actually, from now on I prefer Markdown for reports instead of PDF.",
        ),
    ]  # fmt: skip
    result = run(eps)
    by_object = {c.claim.object: c for c in result.candidates if c.claim}
    new, old = by_object["Markdown"], by_object["PDF"]
    assert new.status == CandidateStatus.pending_score
    assert new.supersedes == old.candidate_id
    assert new.stats["explicit_change"] is True
    assert old.status == CandidateStatus.auto_rejected
    assert old.reason.startswith("superseded")
    assert old.counterexample_ids == ["d"]  # the later statement contradicts it
    assert new.counterexample_ids == []  # earlier statements were superseded, not conflicts
    [group] = result.groups
    assert group.counts == {"pdf": 3, "markdown": 1} and group.conflicts == 1
    assert [s.episode_id for s in group.statements] == ["a", "b", "c", "d"]


def test_without_an_explicit_change_the_majority_holds(kit: SimpleNamespace) -> None:
    eps = [
        kit.statement("a", "ana", "editor", "vim", minutes=1),
        kit.statement("b", "ana", "editor", "vim", minutes=2),
        kit.statement("c", "ana", "editor", "emacs", minutes=3),
        kit.statement("d", "ana", "editor", "emacs", minutes=4),
        kit.statement("e", "ana", "editor", "emacs", minutes=5),
    ]
    by_object = {c.claim.object: c for c in run(eps).candidates if c.claim}
    assert by_object["emacs"].status == CandidateStatus.pending_score
    assert by_object["emacs"].supersedes is None
    assert by_object["vim"].status == CandidateStatus.auto_rejected
    assert by_object["vim"].reason.startswith("outweighed")


def test_markers_match_whole_words_only(kit: SimpleNamespace) -> None:
    eps = [
        kit.statement("a", "ana", "editor", "vim", minutes=1),
        kit.statement("b", "ana", "editor", "emacs", minutes=2, span="Emacs, unchanged."),
    ]
    assert run(eps).candidates == []  # 'unchanged' is not 'changed'; one statement each


def test_preferences_never_aggregate_across_subjects(kit: SimpleNamespace) -> None:
    eps = [
        kit.statement("a", "ana", "theme", "dark mode", minutes=1),
        kit.statement("b", "ben", "theme", "dark mode", minutes=2),
    ]
    assert run(eps).candidates == []
    eps.append(kit.statement("c", "ben", "theme", "dark mode", minutes=3))
    [cand] = run(eps).candidates
    assert cand.subject_id == "ben" and cand.support_ids == ["b", "c"]
    assert {p.subject_id for p in cand.provenance} == {"ben"}


def test_candidate_id_is_scope_content_and_policy_version() -> None:
    one = claim_candidate_id("acme", "it", "ana", "theme", "Dark mode", "1")
    assert one == claim_candidate_id("acme", "it", "ana", "theme", "dark  MODE", "1")
    assert one != claim_candidate_id("globex", "it", "ana", "theme", "dark mode", "1")
    assert one != claim_candidate_id("acme", "it", "ben", "theme", "dark mode", "1")
    assert one != claim_candidate_id("acme", "it", "ana", "theme", "dark mode", "2")
