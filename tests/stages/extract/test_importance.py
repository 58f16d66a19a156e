"""Importance of extracted facts when the answer carries none: the labelled heuristic, and the
proposal rule's routes (evidence, the answer's importance, the heuristic's)."""

from __future__ import annotations

import json
from typing import Any

from extract_kit import NOW, extract_answer, fake_facts, ingest, turn
from hypothesis import given
from hypothesis import strategies as st

from memory_core.config import ExtractConfig, Settings
from memory_core.context import Partition, RunContext
from memory_core.models import CandidateStatus
from memory_core.stages.extract import extract_facts
from memory_core.stages.extract.importance import (
    fact_importance,
    heuristic_importance,
    proposal_routes,
)
from memory_core.stages.mine import mine_partition
from memory_core.stores import Stores
from memory_core.stores.candidates import list_candidates
from memory_core.stores.extract import extracted_facts
from tests.kit.anthropic import FakeAnthropic


def test_heuristic_follows_the_rubric_words() -> None:
    assert heuristic_importance("fact", "diet", "is vegetarian and allergic to nuts") == 4
    assert heuristic_importance("preference", "prefers_seat", "aisle") == 5
    assert heuristic_importance("event", "went", "to a concert yesterday") == 1
    assert heuristic_importance("fact", "attended", "a meeting") == 3


@given(st.sampled_from(["preference", "fact", "plan", "decision", "event", "other"]),
       st.text(max_size=40), st.text(max_size=200))  # fmt: skip
def test_heuristic_is_always_on_the_1_to_5_scale(kind: str, predicate: str, obj: str) -> None:
    assert 1 <= heuristic_importance(kind, predicate, obj) <= 5


def _without_importance(params: dict[str, Any], attempt: int) -> str:
    return json.dumps({"facts": [{**f, "importance": None} for f in fake_facts(params)]})


def _run(stores: Stores, settings: Settings, answer: Any) -> dict[tuple[str, str, str], Any]:
    fake = FakeAnthropic()
    fake.answer = answer
    ctx = RunContext(now=NOW, run_id="r1")
    extract_facts(stores, settings, ctx, client=fake.client(), sleep=lambda s: None)
    mine_partition(stores, settings, ctx, Partition("acme", "chat"))
    return {
        (c.subject_id or "", c.claim.predicate, c.claim.object): c
        for c in list_candidates(stores.meta, tenant_id="acme")
        if c.claim is not None
    }


def _chat() -> list[dict[str, Any]]:
    return [
        turn("a1", "s1", 0, "I'd like a window seat please"),
        turn("b1", "s2", 60, "I am vegetarian"),
        turn("b2", "s3", 120, "I'm vegetarian, as I said"),
    ]


def test_without_answer_importance_the_heuristic_route_proposes_and_is_labelled(
    stores: Stores, settings: Settings
) -> None:
    ingest(stores, settings, _chat())
    cands = _run(stores, settings, _without_importance)
    window = cands[("u1", "prefers_seat", "window")]  # one statement, heuristic 5
    assert window.status is CandidateStatus.pending_score
    assert window.stats["importance_source"] == ["heuristic"]
    assert window.stats["importance_extracted"] == 5
    facts = extracted_facts(stores.meta)
    assert all(f.importance is None for f in facts)  # never stored as the model's score
    routes = proposal_routes(facts, settings.extract)
    assert routes.as_dict() == {
        "objects": 2, "proposed": 2, "by_evidence": 1, "by_answer_importance": 0,
        "by_heuristic_importance": 1, "not_proposed": 0,
    }  # fmt: skip


def test_the_answers_importance_wins_over_the_heuristic(stores: Stores, settings: Settings) -> None:
    ingest(stores, settings, _chat())
    cands = _run(stores, settings, extract_answer)  # window seat scored 3 by the answer
    assert ("u1", "prefers_seat", "window") not in cands
    facts = extracted_facts(stores.meta)
    window = next(f for f in facts if f.object == "window")
    assert fact_importance(window) == (3, "answer")
    strict = ExtractConfig(single_statement_min_importance=6)
    assert proposal_routes(facts, strict).not_proposed == 1
