"""Every metric on a tiny hand-made case whose value is known in advance."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory_core.eval import metrics
from memory_core.eval.runner import _gates

NOW = datetime(2026, 8, 1, tzinfo=UTC)


def test_rate_and_mean() -> None:
    assert metrics.rate(1, 4) == 0.25
    assert metrics.rate(2, 3) == 0.6667
    assert metrics.rate(0, 0) is None  # nothing measured is not "perfect"
    assert metrics.mean([0.5, 1.0]) == 0.75
    assert metrics.mean([]) is None


def test_hit_and_recall_at_k() -> None:
    assert metrics.hit_at_k(["a", "b", "c"], {"c"}, 3)
    assert not metrics.hit_at_k(["a", "b", "c"], {"c"}, 2)
    # query 1 hits at rank 2, query 2 misses, query 3 has no relevant id and is skipped
    ranked = [["x", "r1"], ["y", "z"], ["w"]]
    assert metrics.recall_at_k(ranked, [{"r1"}, {"r2"}, set()], k=2) == 0.5
    assert metrics.recall_at_k(ranked, [{"r1"}, {"r2"}, set()], k=1) == 0.0
    with pytest.raises(ValueError, match="2 ranked lists for 1"):
        metrics.recall_at_k([["a"], ["b"]], [{"a"}], k=1)


@given(st.lists(st.text(min_size=1, max_size=3), max_size=8), st.integers(1, 10))
def test_recall_at_k_grows_with_k(ranked: list[str], k: int) -> None:
    relevant = [set(ranked[-1:])]
    low = metrics.recall_at_k([ranked], relevant, k)
    high = metrics.recall_at_k([ranked], relevant, k + 1)
    assert low is None or high >= low


def test_answer_in_context() -> None:
    assert metrics.answer_in_context("Europe/Berlin", "tz:  europe/berlin\nother")
    assert metrics.answer_in_context("7 May  2023", "met on 7 may 2023")
    assert not metrics.answer_in_context("Paris", "Lyon")
    assert not metrics.answer_in_context(None, "anything")
    assert not metrics.answer_in_context("  ", "anything")


def test_budget_utilisation() -> None:
    assert metrics.budget_utilisation(500, 2000) == 0.25
    assert metrics.budget_utilisation(0, 2000) == 0.0
    with pytest.raises(ValueError, match="positive"):
        metrics.budget_utilisation(1, 0)


def test_provenance_complete() -> None:
    known = {"e1": "h1", "e2": "h2"}
    good = {"provenance": json.dumps([{"source_id": "e1", "content_hash": "h1"}])}
    assert metrics.provenance_complete(good, known)
    corpus = [{"source_id": "kb/x", "content_hash": "k", "source_kind": "corpus"}]
    assert metrics.provenance_complete({"provenance": corpus}, known)
    assert not metrics.provenance_complete({"provenance": "[]"}, known)  # no source
    assert not metrics.provenance_complete({"provenance": None}, known)
    no_hash = [{"source_id": "e1"}]
    assert not metrics.provenance_complete({"provenance": no_hash}, known)
    wrong_hash = [{"source_id": "e2", "content_hash": "h1"}]
    assert not metrics.provenance_complete({"provenance": wrong_hash}, known)
    missing = [{"source_id": "e9", "content_hash": "h9"}]
    assert not metrics.provenance_complete({"provenance": missing}, known)


def test_secret_hits() -> None:
    texts = ["key sk-ant-XYZ here", "nothing", None, "again sk-ant-XYZ and AKIA1"]
    assert metrics.secret_hits(texts, ["sk-ant-XYZ", "AKIA1", "ghp_none", ""]) == {  # type: ignore[arg-type]
        "sk-ant-XYZ": 2,
        "AKIA1": 1,
    }
    assert metrics.secret_hits(["[REDACTED:api_key]"], ["sk-ant-XYZ"]) == {}


def test_duplicate_rows() -> None:
    assert metrics.duplicate_rows(["a", "b", "c"]) == 0
    assert metrics.duplicate_rows(["a", "a", "a", "b", "b"]) == 3


def test_stale_record() -> None:
    fresh = {"status": "active", "expires_at": None, "valid_to": None, "recorded_to": None}
    assert not metrics.stale_record(fresh, NOW)
    assert metrics.stale_record({**fresh, "status": "superseded"}, NOW)
    assert metrics.stale_record({**fresh, "expires_at": "2026-07-31T00:00:00Z"}, NOW)
    assert not metrics.stale_record({**fresh, "expires_at": "2026-08-02T00:00:00Z"}, NOW)
    assert metrics.stale_record({**fresh, "valid_to": "2026-08-01T00:00:00Z"}, NOW)
    assert metrics.stale_record({**fresh, "recorded_to": "2026-07-01T00:00:00Z"}, NOW)
    # asking about the past: a superseded row that was valid then is history, not stale
    old = {**fresh, "status": "superseded", "valid_to": "2026-07-15T00:00:00Z"}
    assert not metrics.stale_record(old, NOW, as_of=datetime(2026, 7, 1, tzinfo=UTC))
    assert metrics.stale_record(old, NOW, as_of=datetime(2026, 7, 20, tzinfo=UTC))


def test_wrong_scope_record() -> None:
    assert not metrics.wrong_scope_record({"tenant_id": "t", "subject_id": "u"}, "t", "u")
    assert not metrics.wrong_scope_record({"tenant_id": "t", "subject_id": None}, "t", "u")
    assert metrics.wrong_scope_record({"tenant_id": "x", "subject_id": "u"}, "t", "u")
    assert metrics.wrong_scope_record({"tenant_id": "t", "subject_id": "v"}, "t", "u")
    assert metrics.wrong_scope_record({"tenant_id": "t", "subject_id": "u"}, "t", None)


def test_gates_sum_over_datasets_and_ignore_skipped() -> None:
    def ds(secrets: int, scope: int, residue: int) -> dict:
        return {
            "write_quality": {"sensitive_false_writes": secrets},
            "retrieval": {"wrong_scope_retrievals": scope},
            "update_forgetting": {"deletion_residue": residue},
        }

    ok = _gates({"a": ds(0, 0, 0), "b": {"skipped": "absent"}})
    assert ok == {
        "sensitive_false_writes": 0,
        "wrong_scope_retrievals": 0,
        "deletion_residue": 0,
        "ok": True,
    }
    bad = _gates({"a": ds(0, 0, 0), "b": ds(1, 0, 2)})
    assert (bad["sensitive_false_writes"], bad["deletion_residue"], bad["ok"]) == (1, 2, False)
    assert not _gates({"b": {"skipped": "absent"}})["ok"]  # nothing ran: nothing proven
