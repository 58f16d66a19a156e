"""Retrieval measurement over the real read path: arms, scope, forbidden probes, sampling."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from memory_core.config import Settings
from memory_core.embed import HashEmbedder
from memory_core.eval.retrieval import (
    MemoEmbedder,
    Query,
    _merge,
    evenly,
    open_reader,
    run_queries,
)
from memory_core.stores import Stores
from tests.conftest import NOW, episode, lines_of


def test_evenly_is_deterministic_and_spread() -> None:
    assert evenly(list(range(10)), 5) == [0, 2, 4, 6, 8]
    assert evenly(list(range(3)), 5) == [0, 1, 2]
    assert evenly(list(range(3)), None) == [0, 1, 2]
    assert evenly(list(range(3)), 0) == []


def test_memo_embedder_embeds_each_text_once() -> None:
    calls: list[int] = []

    class Counting(HashEmbedder):
        def embed(self, texts):  # type: ignore[no-untyped-def]
            calls.append(len(texts))
            return super().embed(texts)

    memo = MemoEmbedder(Counting(16))
    memo.prime(["a", "b", "a"])
    first = memo.embed(["b", "a"])
    assert calls == [2]  # primed once, in one batch; later calls hit the memo
    assert np.array_equal(first, HashEmbedder(16).embed(["b", "a"]))
    assert memo.dim == 16 and memo.version == HashEmbedder(16).version


def test_run_queries_arms_scope_and_forbidden(
    stores: Stores, settings: Settings, ingest: Callable, embedder: HashEmbedder
) -> None:
    stores.lance.ensure_tables(embedder.dim, embedder=embedder.version)
    ingest(
        lines_of(
            episode(episode_id="mine", subject_id="u1", text="printer jam on floor three"),
            episode(episode_id="theirs", subject_id="u2", text="printer jam on floor three"),
            episode(
                episode_id="other-tenant",
                tenant_id="globex",
                subject_id="u1",
                text="printer jam on floor three",
            ),
        )
    )
    queries = [
        Query(
            text="printer jam on floor three", tenant_id="acme", subjects=("u1",),
            relevant=frozenset({"mine"}), answers=("floor three",), kind="q",
            forbidden=frozenset({"theirs", "other-tenant"}),
        )
    ]  # fmt: skip
    with open_reader(settings.lance_uri, embedder, settings.recall) as memory:
        run = run_queries(memory, queries, now=NOW, k=5, budget_tokens=500).as_dict()
    assert run["recall_at_k"] == 1.0 and run["answer_in_context"] == 1.0
    arms = run["ablation"]
    assert arms["no_memory"] == {"recall_at_k": 0.0, "answer_in_context": 0.0}
    assert arms["episodes"]["recall_at_k"] == 1.0
    assert run["wrong_scope_retrievals"] == 0 and run["served_records"] >= 1
    assert run["forbidden_probes"] == 1 and run["forbidden_served"] == 0
    assert 0 < run["context_budget_utilisation"] <= 1
    assert run["by_kind"] == {"q": {"queries": 1, "hits": 1, "answered": 1}}


def test_merge_packs_through_the_read_path_and_pays_for_a_statement_once() -> None:
    """Two subjects' calls merged: the best copy of each record, packed by ``read/pack.pack``,
    so a fact whose evidence turn is packed leaves its budget to the next record."""
    turn = {"table": "episodes", "record_id": "e1", "score": 0.9, "text": "t" * 80}
    fact = {
        "table": "facts", "record_id": "f1", "score": 0.8, "text": "f" * 80,
        "provenance": [{"source_id": "e1", "source_kind": "episode"}],
    }  # fmt: skip
    other = {"table": "episodes", "record_id": "e2", "score": 0.7, "text": "o" * 80}
    weaker_copy = dict(turn, score=0.1)
    packed, used = _merge([[weaker_copy, fact], [turn, other]], k=10, budget=40, cpt=4.0)
    assert [r["record_id"] for r in packed] == ["e1", "e2"] and used == 40
    assert packed[0]["score"] == 0.9  # the best-scored copy of a record served twice
