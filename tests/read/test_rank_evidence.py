"""Ranking across classes: text ranks over the whole pool, neutral unknown priors, the subject's
own name is no entity evidence, a fact no closer than its evidence turn, marked facts kept."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from memory_core.config import RecallConfig
from memory_core.read.pack import pack
from memory_core.read.rank import Candidate, fuse, score_candidates
from memory_core.recall import Recaller
from memory_core.stores.lance import LanceStore
from tests.recall_rows import make_row, write_rows

AT = datetime(2026, 8, 1, tzinfo=UTC)


def test_text_ranks_are_over_the_pool_by_score_not_per_table() -> None:
    weak_fact = Candidate("facts", "f1", {}, text_rank=1)
    weak_fact.text_score = 0.4
    strong_turns = []
    for i in range(3):
        cand = Candidate("episodes", f"e{i}", {}, text_rank=i + 1)
        cand.text_score = 5.0 - i
        strong_turns.append(cand)
    fuse([weak_fact, *strong_turns], rrf_k=60, text_leg=True)
    assert weak_fact.text_rank == 4  # its table's best, but weaker than three turns
    assert [c.text_rank for c in strong_turns] == [1, 2, 3]
    assert weak_fact.relevance < strong_turns[-1].relevance


def test_unknown_priors_take_the_pool_mean_and_the_subject_name_is_no_entity() -> None:
    turn = Candidate("episodes", "e1", {"subject_id": "Caroline", "outcome": "unknown"})
    fact = Candidate(
        "facts", "f1",
        {"subject_id": "Caroline", "importance": 0.9, "confidence": 0.8,
         "predicate": "pet", "object": "Caroline has a guinea pig"},
    )  # fmt: skip
    for cand in (turn, fact):
        cand.relevance = 0.5
    score_candidates([turn, fact], query="When was Caroline's birthday?", at=AT,
                     config=RecallConfig())  # fmt: skip
    assert turn.components["importance"] == fact.components["importance"] == 0.9
    assert turn.components["outcome"] == fact.components["outcome"] == 0.8
    assert fact.components["entity"] == 0.0  # "caroline" names the subject, not the answer
    alone = Candidate("episodes", "e2", {"outcome": "unknown"})
    score_candidates([alone], query="birthday", at=AT, config=RecallConfig())
    assert alone.components["importance"] == 0.5 and alone.components["outcome"] == 0.5


def test_a_contested_fact_is_served_even_when_its_evidence_is() -> None:
    turn = Candidate("episodes", "e1", {"text": "t" * 40}, score=0.9)
    provenance = json.dumps([{"source_id": "e1", "source_kind": "episode"}])
    fact = Candidate(
        "facts", "f1", {"text": "f" * 40, "provenance": provenance, "status": "contested"},
        score=0.8,
    )  # fmt: skip
    chosen, left, _ = pack([turn, fact], k=10, budget_tokens=100, chars_per_token=4.0)
    assert [c.record_id for c in chosen] == ["e1", "f1"] and not left


def test_a_fact_is_no_closer_to_the_query_than_its_evidence_turn(settings, embedder) -> None:
    lance = LanceStore(settings.lance_uri)
    lance.ensure_tables(384)
    write_rows(lance, "episodes", [
        make_row("episodes", embedder, "said", text="we adopted a small dog last spring"),
        make_row("episodes", embedder, "close", text="printer toner cartridge replaced"),
    ])  # fmt: skip
    evidence = json.dumps([{"source_id": "said", "source_kind": "episode"}])
    write_rows(lance, "facts", [
        make_row("facts", embedder, "f1", text="printer toner cartridge", provenance=evidence),
        make_row("facts", embedder, "f2", text="printer toner cartridge"),
    ])  # fmt: skip
    with Recaller.from_settings(settings, embedder=embedder, access_log=False) as memory:
        got = memory.recall(
            "printer toner cartridge", tenant_id="acme", subject_id="u1", memory_type="semantic"
        )
    rel = {r["record_id"]: r["score_components"]["relevance"] for r in got.records}
    # same text, but f1 rests on a turn far from the query: it ranks with that turn
    assert rel["f1"] < rel["f2"]


def test_the_text_leg_ignores_the_scoped_subjects_name(settings, embedder) -> None:
    """Every fact about "mel" names her; her name in the query must not rank them by BM25
    over the record that holds the asked word. Other names in the query still count."""
    from memory_core.read.indexes import ensure_fts
    from memory_core.recall import _text_query

    assert _text_query("What does Mel do to destress with Ann?", "mel") == "destress ann"
    assert _text_query("What does Mel do?", None) == "mel"
    lance = LanceStore(settings.lance_uri)
    lance.ensure_tables(384)
    write_rows(lance, "facts", [
        make_row("facts", embedder, "named", subject_id="mel", text="mel mel likes green tea"),
        make_row("facts", embedder, "asked", subject_id="mel", text="goes running to destress"),
    ])  # fmt: skip
    ensure_fts(lance.table("facts"))
    with Recaller.from_settings(settings, embedder=embedder, access_log=False) as memory:
        got = memory.recall(
            "how does mel destress", tenant_id="acme", subject_id="mel", memory_type="semantic"
        )
    reasons = {r["record_id"]: r["reason"] for r in got.records}
    assert "text #1" in reasons["asked"]
    assert "text #" not in reasons["named"]
