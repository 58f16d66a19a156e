"""``load_evidence`` adds up a candidate's supporting episodes in columns (one join and one
group-by); what it adds up is defined row by row below (the code it replaced, s35), and the
two must agree on any candidates over any stored episodes: both ways of reading them (IN
lists; one tenant scan), ids listed twice, ids of another tenant or never stored."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core.config import load_settings
from memory_core.context import RunContext
from memory_core.embed import HashEmbedder
from memory_core.models import Candidate, utc
from memory_core.stages.ingest import ingest_records
from memory_core.stages.score import evidence
from memory_core.stages.score.evidence import Evidence, feedback_polarity, load_evidence
from memory_core.stores import Stores, open_stores
from tests.kit.anthropic import candidate

NOW = datetime(2026, 8, 1, tzinfo=UTC)
TENANTS = ("acme", "globex")
IDS = [f"ep{i}" for i in range(24)]
FEEDBACK = [None, "thanks, that worked", "still broken", "thanks, but still fails", "ok", ""]
RANK = {"low": 0, "medium": 1, "high": 2}


def _reference(lance: Any, candidates: list[Candidate]) -> dict[str, Evidence]:
    """The definition: every supporting episode read as a row, the candidate refined by them."""
    base = {c.candidate_id: Evidence.from_candidate(c) for c in candidates}
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for tenant in {c.tenant_id for c in candidates}:
        table = lance.scan("episodes", where=f"tenant_id = '{tenant}'")
        for r in table.to_pylist():
            rows[(tenant, r["episode_id"])] = r
    out = {}
    for cand in candidates:
        found = [rows[(cand.tenant_id, e)] for e in cand.support_ids if (cand.tenant_id, e) in rows]
        if not found:
            out[cand.candidate_id] = base[cand.candidate_id]
            continue
        b = base[cand.candidate_id]
        times = [utc(r["occurred_at"]) for r in found]
        polarity = [feedback_polarity(r.get("feedback")) for r in found]
        out[cand.candidate_id] = replace(
            b,
            subjects=max(b.subjects, len({r["subject_id"] for r in found if r["subject_id"]})),
            last_seen=max(times),
            successes=sum(r["outcome"] == "success" for r in found) or b.successes,
            failures=sum(r["outcome"] == "failure" for r in found) or b.failures,
            feedback_positive=sum(p > 0 for p in polarity) or b.feedback_positive,
            feedback_negative=sum(p < 0 for p in polarity) or b.feedback_negative,
            sensitivity=max(
                [b.sensitivity, *(str(r["sensitivity"] or "low") for r in found)],
                key=lambda s: RANK.get(s, 0),
            ),
        )
    return out


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Stores:
    """Both tenants' episodes with varied fields; a candidate may cite the other tenant's."""
    rng = random.Random(35)
    settings = load_settings(home=tmp_path_factory.mktemp("evidence"), embed={"model": "hash"})
    stores = open_stores(settings)
    lines = []
    for tenant, ids in zip(TENANTS, (IDS[:12], IDS[12:]), strict=True):
        for eid in rng.sample(ids, 9):  # episode ids are global: each tenant has its own
            record = {
                "episode_id": eid, "tenant_id": tenant, "namespace": "it",
                "subject_id": rng.choice(["u1", "u2", "u3"]),
                "occurred_at": (NOW - timedelta(hours=rng.randrange(500))).isoformat(),
                "source_role": "agent", "goal": "VPN fails", "actions": ["reset adapter"],
                "outcome": rng.choice(["success", "failure", "unknown"]),
                "feedback": rng.choice(FEEDBACK),
                "sensitivity": rng.choice(["low", "low", "medium", "high"]),
                "text": f"episode {eid}",
            }  # fmt: skip
            lines.append(json.dumps({k: v for k, v in record.items() if v is not None}))
    ingest_records(
        stores, settings, RunContext(now=NOW), lines, embedder=HashEmbedder(384), source="t"
    )
    return stores


cited = st.lists(st.sampled_from([*IDS, "never-stored"]), max_size=8)
candidates = st.lists(
    st.tuples(
        st.sampled_from(TENANTS),
        cited,
        st.sampled_from(["low", "medium", "high", "secret"]),  # the record's own sensitivity
        st.dictionaries(
            st.sampled_from(
                ["successes", "failures", "feedback_negative", "last_seen", "support_subjects"]
            ),
            st.sampled_from([0, 2, "2026-07-01T00:00:00Z"]),
            max_size=2,
        ),
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=candidates, tenant_scan=st.booleans())
def test_columnar_evidence_equals_the_row_by_row_definition(
    home: Stores, drawn: list[tuple[str, list[str], str, dict]], tenant_scan: bool
) -> None:
    cands = [
        candidate(i, tenant_id=tenant, support_ids=ids, provenance=[], subject_id=None,
                  stats={**stats, "sensitivity": sensitivity})
        for i, (tenant, ids, sensitivity, stats) in enumerate(drawn)
    ]  # fmt: skip
    old = evidence._SCAN_OVER
    evidence._SCAN_OVER = 0 if tenant_scan else 5_000
    try:
        got = load_evidence(home.lance, cands)
    finally:
        evidence._SCAN_OVER = old
    assert got == _reference(home.lance, cands)


def test_the_fixture_has_what_the_property_needs(home: Stores) -> None:
    """Otherwise the property above could pass on data that never exercises a branch."""
    rows = home.lance.scan("episodes").to_pylist()
    assert {r["tenant_id"] for r in rows} == set(TENANTS)
    assert {r["sensitivity"] for r in rows} >= {"low", "medium"}
    assert {feedback_polarity(r["feedback"]) for r in rows} == {-1, 0, 1}
    assert {r["outcome"] for r in rows} >= {"success", "failure"}
    assert len({r["subject_id"] for r in rows}) == 3
    assert len(rows) < len(IDS), "some cited ids were never stored"


def test_a_table_without_episodes_leaves_the_record(tmp_path: Path) -> None:
    stores = open_stores(load_settings(home=tmp_path, embed={"model": "hash"}))
    stores.lance.ensure_tables(384)
    cand = candidate(1, stats={"successes": 3})
    assert load_evidence(stores.lance, [cand]) == {cand.candidate_id: Evidence.from_candidate(cand)}
