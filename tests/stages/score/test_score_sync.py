"""The score stage on the Messages API path: normal run, cache, budget, errors, no key."""

from __future__ import annotations

import json
import logging
import re
import tempfile
from pathlib import Path
from typing import Any

import httpx2
import pytest
from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from memory_core.config import ScoreConfig, Settings, load_settings
from memory_core.context import RunContext
from memory_core.models import Candidate, CandidateStatus
from memory_core.stages.score import NO_KEY_MESSAGE, score_candidates
from memory_core.stages.score.prompt import RUBRIC
from memory_core.stores import Stores, open_stores
from memory_core.stores.candidates import (
    get_candidates,
    set_candidate_status,
    upsert_candidates,
)
from memory_core.stores.llm import ledger_entries
from tests.kit.anthropic import T0 as NOW
from tests.kit.anthropic import VALID, FakeAnthropic, candidate, message_body, status_response


def config(settings: Settings, **overrides: Any) -> ScoreConfig:
    return settings.score.model_copy(update={"llm_kinds": ["semantic", "procedural"], **overrides})


def seed(stores: Stores, count: int, **overrides: Any) -> list[Candidate]:
    cands = [candidate(i, **overrides) for i in range(count)]
    upsert_candidates(stores.meta, cands, run_id="r0", now=NOW)
    return cands


def run(stores: Stores, cfg: ScoreConfig, fake: FakeAnthropic | None, **kw: Any) -> Any:
    client = fake.client() if fake is not None else None
    ctx = RunContext(now=NOW, run_id=kw.pop("run_id", "run_1"))
    return score_candidates(stores, cfg, ctx, client=client, sleep=lambda s: None, **kw)


def by_id(stores: Stores, cands: list[Candidate]) -> dict[str, Candidate]:
    return {c.candidate_id: c for c in get_candidates(stores.meta, [c.candidate_id for c in cands])}


def test_sync_scores_each_candidate_with_one_request(stores: Stores, settings: Settings) -> None:
    cands = seed(stores, 3)
    fake = FakeAnthropic()
    result = run(stores, config(settings), fake)
    assert fake.counts["messages"] == 3
    assert result.mode == "sync"
    assert result.scored_llm == 3
    for body in fake.bodies["messages"]:
        assert body["model"] == "claude-haiku-5-5"
        assert "temperature" not in body
        assert body["system"] == [
            {"type": "text", "text": RUBRIC, "cache_control": {"type": "ephemeral"}}
        ]
        assert body["output_config"]["format"]["type"] == "json_schema"
        user = body["messages"][0]["content"]
        assert "<candidate>" in user
        assert "acme" not in user and '"u1"' not in user  # no tenant or subject ids sent
    for cand in by_id(stores, cands).values():
        assert cand.status is CandidateStatus.pending_review
        assert cand.scorer == "anthropic"
        assert cand.importance == 4.0
        assert cand.stats["rationale"] == VALID["rationale"]
        assert cand.stats["kind_check"] == "semantic"
        assert cand.stats["model"] == "claude-haiku-5-5"
        assert cand.stats["prompt_version"] == result.prompt_version
        assert cand.stats["prompt_version"].startswith("1+")
        assert cand.stats["risk_flags"] == []


def test_ledger_records_tokens_cache_and_cost(stores: Stores, settings: Settings) -> None:
    seed(stores, 3)
    fake = FakeAnthropic()
    cfg = config(settings)
    result = run(stores, cfg, fake)
    rows = {e.mode: e for e in ledger_entries(stores.meta, run_id="run_1")}
    assert set(rows) == {"sync", "outcome"}
    sync = rows["sync"]
    sent = [json.loads(json.dumps(b)) for b in fake.bodies["messages"]]
    rubric = len(RUBRIC) // 4
    assert sync.requests == 3
    assert sync.input_tokens == sum(len(json.dumps(b["messages"])) // 4 for b in sent)
    assert sync.cache_write_tokens == rubric
    assert sync.cache_read_tokens == 2 * rubric
    expected = (
        sync.input_tokens * 1.0
        + sync.output_tokens * 5.0
        + sync.cache_read_tokens * 0.1
        + sync.cache_write_tokens * 1.25
    ) / 1e6
    assert sync.cost_usd == pytest.approx(expected)
    assert result.cost_usd == pytest.approx(expected)
    assert rows["outcome"].fallbacks == 0


def test_cache_makes_a_rerun_send_nothing(stores: Stores, settings: Settings) -> None:
    cands = seed(stores, 3)
    fake = FakeAnthropic()
    first = run(stores, config(settings), fake)
    assert fake.counts["messages"] == 3
    # unchanged rerun: nothing is pending any more
    again = run(stores, config(settings), fake, run_id="run_2")
    assert again.considered == 0
    # the same content back to pending_score (mining re-proposed it): served from the cache
    set_candidate_status(
        stores.meta, {c.candidate_id: (CandidateStatus.pending_score, "") for c in cands}, now=NOW
    )
    third = run(stores, config(settings), fake, run_id="run_3")
    assert fake.counts["messages"] == 3  # no new request
    assert third.cache_hits == 3 and third.requests == 0 and third.mode == "cache"
    after = by_id(stores, cands)
    assert all(
        c.scorer == "anthropic" and c.stats["score_source"] == "cache" for c in after.values()
    )
    assert first.prompt_version == third.prompt_version


def test_cache_is_keyed_by_model(stores: Stores, settings: Settings) -> None:
    cands = seed(stores, 2)
    fake = FakeAnthropic()
    run(stores, config(settings), fake)
    set_candidate_status(
        stores.meta, {c.candidate_id: (CandidateStatus.pending_score, "") for c in cands}, now=NOW
    )
    run(stores, config(settings, model="claude-other-1"), fake, run_id="run_2")
    assert fake.counts["messages"] == 4


def test_no_key_uses_heuristic_and_says_so_once(
    stores: Stores, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    cands = seed(stores, 4)
    with caplog.at_level(logging.WARNING):
        result = run(stores, config(settings), None)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings.count(NO_KEY_MESSAGE) == 1
    assert NO_KEY_MESSAGE == (
        "no ANTHROPIC_API_KEY: scoring with the heuristic scorer (labelled heuristic)"
    )
    assert result.mode == "heuristic" and result.heuristic == 4 and result.requests == 0
    for cand in by_id(stores, cands).values():
        assert cand.scorer == "heuristic"
        assert cand.status is CandidateStatus.pending_review
        assert 1 <= (cand.importance or 0) <= 5
        assert cand.stats["model"] is None
        assert cand.stats["heuristic_reason"] == "no ANTHROPIC_API_KEY"


def test_invalid_answer_is_retried_once_then_accepted(stores: Stores, settings: Settings) -> None:
    cands = seed(stores, 1)
    fake = FakeAnthropic()
    fake.answer = lambda p, attempt: (
        json.dumps({**VALID, "score": 7}) if attempt == 0 else json.dumps(VALID)
    )
    result = run(stores, config(settings), fake)
    assert fake.counts["messages"] == 2
    retry = fake.bodies["messages"][1]["messages"]
    assert [m["role"] for m in retry] == ["user", "assistant", "user"]
    assert "did not validate" in retry[2]["content"]
    cand = by_id(stores, cands)[cands[0].candidate_id]
    assert cand.scorer == "anthropic" and cand.importance == 4.0
    assert cand.stats["retried_invalid_answer"].startswith("score:")
    assert result.fallbacks == {}


@pytest.mark.parametrize(
    "bad",
    [
        "not json at all",
        json.dumps({**VALID, "score": 0}),
        json.dumps({**VALID, "score": 4.5}),
        json.dumps({**VALID, "kind_check": "fact"}),
        json.dumps({**VALID, "extra": 1}),
        json.dumps({k: v for k, v in VALID.items() if k != "rationale"}),
    ],
)
def test_invalid_answer_twice_falls_back_flagged(
    stores: Stores, settings: Settings, bad: str
) -> None:
    cands = seed(stores, 1)
    fake = FakeAnthropic()
    fake.answer = lambda p, attempt: bad
    result = run(stores, config(settings), fake)
    assert fake.counts["messages"] == 2  # the answer and its one retry
    cand = by_id(stores, cands)[cands[0].candidate_id]
    assert cand.scorer == "heuristic"
    assert cand.stats["model"] is None
    assert "llm_invalid_answer" in cand.stats["score_flags"]
    assert cand.stats["fallback_reason"].startswith("invalid answer twice")
    outcome = next(e for e in ledger_entries(stores.meta) if e.mode == "outcome")
    assert outcome.fallbacks == 1
    assert outcome.detail["fallbacks"][cand.candidate_id] == result.fallbacks[cand.candidate_id]


def test_401_falls_back_for_all_and_stops_calling(stores: Stores, settings: Settings) -> None:
    cands = seed(stores, 3)
    fake = FakeAnthropic()
    fake.fail_messages = [status_response(401, "authentication_error", "invalid x-api-key")]
    result = run(stores, config(settings), fake)
    assert fake.counts["messages"] == 1
    assert set(result.fallbacks) == {c.candidate_id for c in cands}
    for cand in by_id(stores, cands).values():
        assert cand.scorer == "heuristic"  # never labelled anthropic
        assert cand.status is CandidateStatus.pending_review
        assert "authentication failed (401)" in cand.stats["fallback_reason"]
    outcome = next(e for e in ledger_entries(stores.meta) if e.mode == "outcome")
    assert outcome.fallbacks == 3
    assert all("401" in r for r in outcome.detail["fallbacks"].values())


@pytest.mark.parametrize(
    ("status", "kind", "reason"),
    [
        (429, "rate_limit_error", "rate limited (429)"),
        (529, "overloaded_error", "overloaded (529)"),
    ],
)
def test_429_and_529_defer_after_sdk_retries(
    stores: Stores, settings: Settings, status: int, kind: str, reason: str
) -> None:
    cands = seed(stores, 3)
    fake = FakeAnthropic()
    fake.fail_messages = [status_response(status, kind) for _ in range(3)]
    result = run(stores, config(settings, max_retries=2), fake)
    assert fake.counts["messages"] == 3  # one request, retried twice by the SDK, then stop
    assert set(result.deferred) == {c.candidate_id for c in cands}
    for cand in by_id(stores, cands).values():
        assert cand.status is CandidateStatus.pending_score
        assert cand.importance is None and cand.scorer is None  # no made-up score
        assert cand.stats["score_deferrals"] == 1
        assert reason in cand.stats["score_pending_reason"]
    # the next run, with the API back, scores them
    again = run(stores, config(settings), fake, run_id="run_2")
    assert again.scored_llm == 3
    assert all(c.stats["score_deferrals"] == 0 for c in by_id(stores, cands).values())


def test_timeout_defers(stores: Stores, settings: Settings) -> None:
    cands = seed(stores, 2)
    fake = FakeAnthropic()
    fake.fail_messages = [httpx2.ReadTimeout("read timed out")]
    result = run(stores, config(settings, max_retries=0, timeout_s=5), fake)
    assert fake.counts["messages"] == 1
    assert all("timed out (5s)" in r for r in result.deferred.values())
    assert all(c.importance is None for c in by_id(stores, cands).values())


def test_deferred_too_often_falls_back(stores: Stores, settings: Settings) -> None:
    cands = seed(stores, 1)
    fake = FakeAnthropic()
    for n in range(1, 4):
        fake.fail_messages = [status_response(529, "overloaded_error")]
        run(stores, config(settings, max_retries=0), fake, run_id=f"run_{n}")
    cand = by_id(stores, cands)[cands[0].candidate_id]
    assert cand.scorer == "heuristic" and cand.status is CandidateStatus.pending_review
    assert cand.stats["fallback_reason"].startswith("deferred 3 runs in a row")


def test_refused_request_falls_back_only_itself(stores: Stores, settings: Settings) -> None:
    cands = seed(stores, 3)
    fake = FakeAnthropic()
    fake.fail_messages = [status_response(400, "invalid_request_error", "prompt is too long")]
    result = run(stores, config(settings), fake)
    assert fake.counts["messages"] == 3
    assert list(result.fallbacks) == [cands[0].candidate_id]
    assert "request refused (400)" in result.fallbacks[cands[0].candidate_id]
    assert result.scored_llm == 2


def test_budget_cut_off_leaves_the_rest_pending(stores: Stores, settings: Settings) -> None:
    cands = seed(stores, 5)
    fake = FakeAnthropic()
    # room for two requests by estimate (rubric included): measure one first
    from memory_core.stages.score.budget import estimate_usage
    from memory_core.stages.score.evidence import Evidence
    from memory_core.stages.score.prompt import request_params

    cfg = config(settings)
    one = estimate_usage(request_params(cands[0], Evidence.from_candidate(cands[0]), cfg))
    cfg = config(settings, max_input_tokens_per_run=2 * one.total_input + 10)
    result = run(stores, cfg, fake)
    assert fake.counts["messages"] >= 2
    sent = fake.counts["messages"]
    assert len(result.over_budget) == 5 - sent
    stored = by_id(stores, cands)
    for cid in result.over_budget:
        assert stored[cid].status is CandidateStatus.pending_score
        assert stored[cid].importance is None and stored[cid].scorer is None
        assert stored[cid].stats["score_pending_reason"].startswith("over budget: input-token")
    sync = next(e for e in ledger_entries(stores.meta) if e.mode == "sync")
    assert sync.input_tokens + sync.cache_read_tokens + sync.cache_write_tokens <= (
        cfg.max_input_tokens_per_run
    )


def test_zero_cost_budget_sends_nothing(stores: Stores, settings: Settings) -> None:
    seed(stores, 3)
    fake = FakeAnthropic()
    result = run(stores, config(settings, max_cost_usd_per_run=0.0), fake)
    assert fake.counts["messages"] == 0
    assert len(result.over_budget) == 3
    assert all("cost budget" in r for r in result.over_budget.values())


def test_dry_run_sends_and_writes_nothing(stores: Stores, settings: Settings) -> None:
    cands = seed(stores, 3)
    fake = FakeAnthropic()
    ctx = RunContext(now=NOW, run_id="dry", dry_run=True)
    result = score_candidates(stores, config(settings), ctx, client=fake.client())
    assert sum(fake.counts.values()) == 0
    assert result.would_send == 3
    assert all(c.status is CandidateStatus.pending_score for c in by_id(stores, cands).values())
    assert ledger_entries(stores.meta) == []


def test_candidates_cut_by_the_budget_go_first_next_run(stores: Stores, settings: Settings) -> None:
    cands = seed(stores, 3)
    fake = FakeAnthropic()
    cfg = config(settings, max_output_tokens_per_run=410)  # room for one max_tokens=400 request
    first = run(stores, cfg, fake)
    assert fake.counts["messages"] == 1 and len(first.over_budget) == 2
    strong = candidate(9, support_ids=[f"s{k}" for k in range(12)])  # heuristically stronger
    upsert_candidates(stores.meta, [strong], run_id="r1", now=NOW)
    second = run(stores, cfg, fake, run_id="run_2")
    assert second.scored_llm == 1
    assert strong.candidate_id in second.over_budget  # the ones left waiting went first
    now = by_id(stores, [*cands, strong])
    newly = [cid for cid in first.over_budget if now[cid].scorer == "anthropic"]
    assert len(newly) == 1


def test_batch_refused_at_creation_falls_back(stores: Stores, settings: Settings) -> None:
    cands = seed(stores, 3)
    fake = FakeAnthropic()
    fake.fail_batch_create = [status_response(400, "invalid_request_error", "too large")]
    result = run(stores, config(settings, batch_min_requests=2), fake)
    assert fake.counts["batch_create"] == 1
    assert set(result.fallbacks) == {c.candidate_id for c in cands}
    assert all("request refused (400)" in r for r in result.fallbacks.values())


STEPS = ["valid", "valid", "invalid", "401", "429", "529", "400", "timeout"]


@hyp_settings(max_examples=15, deadline=None)
@given(st.lists(st.sampled_from(STEPS), max_size=14), st.integers(1, 6))
def test_no_score_is_ever_made_up(steps: list[str], count: int) -> None:
    """Whatever the API does, an ``anthropic`` score is one the API gave for that candidate,
    a pending candidate has no score, and every candidate lands in exactly one bucket."""
    script = iter(steps)
    given_scores: dict[str, int] = {}

    def message(body: dict[str, Any]) -> httpx2.Response:
        step = next(script, "valid")
        number = int(re.search(r"editor number (\d+)", body["messages"][0]["content"])[1])
        if step == "timeout":
            raise httpx2.ReadTimeout("timed out")
        if step.isdigit():
            kinds = {"401": "authentication_error", "429": "rate_limit_error"}
            kind = kinds.get(step, "overloaded_error" if step == "529" else "invalid_request_error")
            return status_response(int(step), kind)
        if step == "invalid":
            return httpx2.Response(200, json=message_body("no json here"))
        score = 1 + number % 5
        given_scores[f"cand_{number:04d}"] = score
        return httpx2.Response(200, json=message_body(json.dumps({**VALID, "score": score})))

    with tempfile.TemporaryDirectory() as tmp:
        home_settings = load_settings(home=Path(tmp))
        stores = open_stores(home_settings)
        cands = seed(stores, count)
        fake = FakeAnthropic()
        fake._message = message  # type: ignore[method-assign]
        result = run(stores, config(home_settings, max_retries=0), fake)
        buckets = result.scored_llm + result.heuristic + len(result.deferred)
        assert buckets + len(result.over_budget) == count
        for cand in by_id(stores, cands).values():
            if cand.scorer == "anthropic":
                assert cand.importance == given_scores[cand.candidate_id]
            elif cand.scorer == "heuristic":
                assert cand.stats["fallback_reason"]
                assert cand.stats["model"] is None
            else:
                assert cand.status is CandidateStatus.pending_score
                assert cand.importance is None


def test_insight_twin_is_not_sent_and_takes_its_twins_score(
    stores: Stores, settings: Settings
) -> None:
    proc, _other = seed(stores, 2)
    twin = candidate(7, stats={"twin_of": proc.candidate_id})
    upsert_candidates(stores.meta, [twin], run_id="r0", now=NOW)
    fake = FakeAnthropic()
    result = run(stores, config(settings), fake)
    assert fake.counts["messages"] == 2  # the twin paid nothing
    assert result.twins_followed == 1
    got = by_id(stores, [proc, twin])
    assert got[twin.candidate_id].status is CandidateStatus.pending_review
    assert got[twin.candidate_id].importance == got[proc.candidate_id].importance
    assert got[twin.candidate_id].scorer == "anthropic"
    assert got[twin.candidate_id].stats["scored_with"] == proc.candidate_id


def test_kinds_outside_llm_kinds_are_scored_by_rule_and_say_so(
    stores: Stores, settings: Settings
) -> None:
    cands = seed(stores, 2)  # semantic preference candidates
    fake = FakeAnthropic()
    cfg = settings.score.model_copy(update={"llm_kinds": ["procedural"]})
    result = run(stores, cfg, fake)
    assert fake.counts["messages"] == 0
    for cand in by_id(stores, cands).values():
        assert cand.scorer == "heuristic"
        assert cand.status is CandidateStatus.pending_review
        assert cand.stats["heuristic_reason"] == "scored by rule: kind not in score.llm_kinds"
    assert result.heuristic == 2
