"""bench/llm_cost.py runs on a home and counts both sides from the request bodies it receives."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memory_core.config import Settings
from memory_core.models import CandidateKind, ProcedureSpec
from memory_core.stores import Stores
from memory_core.stores.candidates import set_candidate_scores, upsert_candidates
from memory_core.stores.llm import list_batches
from tests.kit.anthropic import T0 as NOW
from tests.kit.anthropic import candidate

BENCH = Path(__file__).resolve().parents[3] / "bench" / "llm_cost.py"


def load_bench() -> Any:
    spec = importlib.util.spec_from_file_location("llm_cost", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.duckdb_at_rest  # the bench copies meta.duckdb (bench/llm_cost.py)
def test_bench_counts_ours_and_baseline(
    stores: Stores, settings: Settings, ingest: Callable[..., Any]
) -> None:
    from tests.conftest import episode, lines_of

    ingest(
        lines_of(
            *(
                episode(episode_id=f"ep{i}_{k}", session_id=f"s{i}_{k}", text="long " * 200)
                for i in range(2)
                for k in range(3)
            )
        )
    )
    cands = [
        candidate(
            i,
            kind=CandidateKind.procedural,
            subject_id=None,
            claim=None,
            procedure=ProcedureSpec(
                name=f"fix {i}", steps=["reset", "retry"], preconditions={"x": "1"}
            ),
        )
        for i in range(2)
    ]
    upsert_candidates(stores.meta, cands, run_id="r0", now=NOW)
    set_candidate_scores(
        stores.meta,
        {c.candidate_id: {"importance": 3.0, "scorer": "heuristic"} for c in cands},
        now=NOW,
    )
    report = load_bench().measure(settings.home)
    assert report["episodes"] == 6 and report["sessions"] == 6
    assert report["ours"]["requests"] == 2  # one per scored candidate
    assert report["baseline"]["requests"] == 6  # one per session
    assert report["baseline"]["input_tokens"] > report["ours"]["input_tokens"]
    assert list_batches(stores.meta) == []  # the home itself is left as it was
