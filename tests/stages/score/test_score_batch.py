"""The score stage on the Message Batches path: normal batch, crash and resume, deadline,
errored and expired results, failures at submission, invalid answers inside a batch."""

from __future__ import annotations

import json
from typing import Any

import pytest

from memory_core.config import ScoreConfig, Settings
from memory_core.context import RunContext
from memory_core.models import Candidate, CandidateStatus
from memory_core.stages.score import score_candidates
from memory_core.stores import Stores
from memory_core.stores.candidates import get_candidates, upsert_candidates
from memory_core.stores.llm import BatchStatus, ledger_entries, list_batches
from tests.kit.anthropic import T0 as NOW
from tests.kit.anthropic import VALID, FakeAnthropic, candidate, error_body, status_response


class Crash(Exception):
    """Stands in for the process dying while it waits on a batch."""


def config(settings: Settings, **overrides: Any) -> ScoreConfig:
    base = {"batch_min_requests": 5, "poll_initial_s": 5.0, "poll_max_s": 20.0}
    return settings.score.model_copy(
        update={"llm_kinds": ["semantic", "procedural"], **base, **overrides}
    )


def seed(stores: Stores, count: int) -> list[Candidate]:
    cands = [candidate(i) for i in range(count)]
    upsert_candidates(stores.meta, cands, run_id="r0", now=NOW)
    return cands


def run(
    stores: Stores, cfg: ScoreConfig, fake: FakeAnthropic, *, run_id: str = "run_1", **kw: Any
) -> Any:
    kw.setdefault("sleep", lambda s: None)
    ctx = RunContext(now=NOW, run_id=run_id)
    return score_candidates(stores, cfg, ctx, client=fake.client(), **kw)


def stored(stores: Stores, cands: list[Candidate]) -> dict[str, Candidate]:
    return {c.candidate_id: c for c in get_candidates(stores.meta, [c.candidate_id for c in cands])}


def test_normal_batch(stores: Stores, settings: Settings) -> None:
    cands = seed(stores, 6)
    fake = FakeAnthropic()
    fake.polls_before_end = 3
    sleeps: list[float] = []
    result = run(stores, config(settings), fake, sleep=sleeps.append)
    assert fake.counts["batch_create"] == 1 and fake.counts["messages"] == 0
    assert sleeps == [5.0, 10.0]  # backoff between the three polls
    (body,) = fake.bodies["batch_create"]
    assert sorted(r["custom_id"] for r in body["requests"]) == sorted(c.candidate_id for c in cands)
    for req in body["requests"]:
        assert req["params"]["model"] == "claude-haiku-5-5"
        assert req["params"]["system"][0]["cache_control"] == {"type": "ephemeral"}
        assert "temperature" not in req["params"]
    assert result.mode == "batch" and result.scored_llm == 6
    assert result.batch_ids == ["msgbatch_0001"]
    for cand in stored(stores, cands).values():
        assert cand.scorer == "anthropic" and cand.status is CandidateStatus.pending_review
        assert cand.stats["score_source"] == "batch"
        assert cand.stats["batch_id"] == "msgbatch_0001"
    (batch,) = list_batches(stores.meta)
    assert batch.status is BatchStatus.collected and batch.run_id == "run_1"
    rows = {e.mode: e for e in ledger_entries(stores.meta, run_id="run_1")}
    assert set(rows) == {"batch_submit", "batch", "outcome"}
    assert rows["batch_submit"].requests == 6 and rows["batch"].requests == 6
    spent = rows["batch"]
    full_price = (
        spent.input_tokens * 1.0
        + spent.output_tokens * 5.0
        + spent.cache_read_tokens * 0.1
        + spent.cache_write_tokens * 1.25
    ) / 1e6
    assert spent.cost_usd == pytest.approx(full_price * 0.5)  # batch discount
    assert spent.detail["counts"]["succeeded"] == 6


def test_crash_after_submit_resumes_the_same_batch(stores: Stores, settings: Settings) -> None:
    cands = seed(stores, 6)
    fake = FakeAnthropic()
    fake.polls_before_end = 3

    def crash(seconds: float) -> None:
        raise Crash

    with pytest.raises(Crash):
        run(stores, config(settings), fake, sleep=crash)
    (batch,) = list_batches(stores.meta)  # recorded before polling
    assert batch.status is BatchStatus.in_progress
    assert [i.candidate_id for i in batch.items] == [c.candidate_id for c in cands]
    assert all(c.status is CandidateStatus.pending_score for c in stored(stores, cands).values())

    result = run(stores, config(settings), fake, run_id="run_2")
    assert fake.counts["batch_create"] == 1  # one batch in total: nothing paid twice
    assert fake.counts["messages"] == 0
    assert result.resumed_batch_ids == [batch.batch_id]
    assert all(c.scorer == "anthropic" for c in stored(stores, cands).values())
    (batch,) = list_batches(stores.meta)
    assert batch.status is BatchStatus.collected
    rows = ledger_entries(stores.meta, run_id="run_2")
    collected = next(e for e in rows if e.mode == "batch")
    assert collected.detail["resumed"] is True and collected.detail["submitted_by_run"] == "run_1"


def test_deadline_leaves_batch_for_next_run(stores: Stores, settings: Settings) -> None:
    cands = seed(stores, 5)
    fake = FakeAnthropic()
    fake.polls_before_end = 100
    sleeps: list[float] = []
    cfg = config(settings, batch_deadline_s=30.0)
    result = run(stores, cfg, fake, sleep=sleeps.append)
    assert sum(sleeps) == pytest.approx(30.0)  # 5 + 10 + 15 (capped at the deadline)
    assert sorted(result.in_flight) == sorted(c.candidate_id for c in cands)
    assert all(c.importance is None for c in stored(stores, cands).values())
    assert list_batches(stores.meta)[0].status is BatchStatus.in_progress

    fake.batches["msgbatch_0001"].polls_left = 1
    again = run(stores, cfg, fake, run_id="run_2")
    assert fake.counts["batch_create"] == 1
    assert again.scored_llm == 5 and again.in_flight == []


def test_errored_and_expired_results(stores: Stores, settings: Settings) -> None:
    cands = seed(stores, 6)
    ids = [c.candidate_id for c in cands]
    fake = FakeAnthropic()
    fake.batch_results = {
        ids[0]: {"type": "errored", "error": error_body("overloaded_error", "Overloaded")},
        ids[1]: {"type": "errored", "error": error_body("invalid_request_error", "bad")},
        ids[2]: {"type": "expired"},
    }
    result = run(stores, config(settings), fake)
    assert set(result.deferred) == {ids[0], ids[2]}
    assert set(result.fallbacks) == {ids[1]}
    assert result.scored_llm == 3
    now = stored(stores, cands)
    assert now[ids[0]].status is CandidateStatus.pending_score and now[ids[0]].importance is None
    assert now[ids[2]].stats["score_pending_reason"] == "batch request expired"
    assert now[ids[1]].scorer == "heuristic"
    assert "invalid_request_error" in now[ids[1]].stats["fallback_reason"]
    # the next run sends only the two deferred ones (below batch_min_requests: sync)
    fake.batch_results = {}
    again = run(stores, config(settings), fake, run_id="run_2")
    assert fake.counts["batch_create"] == 1 and fake.counts["messages"] == 2
    assert again.scored_llm == 2


def test_401_at_batch_creation_falls_back(stores: Stores, settings: Settings) -> None:
    cands = seed(stores, 5)
    fake = FakeAnthropic()
    fake.fail_batch_create = [status_response(401, "authentication_error")]
    result = run(stores, config(settings), fake)
    assert fake.counts["batch_create"] == 1 and fake.counts["batch_retrieve"] == 0
    assert len(result.fallbacks) == 5
    assert all(c.scorer == "heuristic" for c in stored(stores, cands).values())
    assert list_batches(stores.meta) == []


def test_529_at_batch_creation_defers(stores: Stores, settings: Settings) -> None:
    cands = seed(stores, 5)
    fake = FakeAnthropic()
    fake.fail_batch_create = [status_response(529, "overloaded_error") for _ in range(2)]
    result = run(stores, config(settings, max_retries=1), fake)
    assert fake.counts["batch_create"] == 2
    assert len(result.deferred) == 5
    assert all(c.importance is None for c in stored(stores, cands).values())


def test_invalid_answer_in_batch_is_retried_through_messages(
    stores: Stores, settings: Settings
) -> None:
    cands = seed(stores, 5)
    target = cands[2].text
    fake = FakeAnthropic()

    def answer(params: dict[str, Any], attempt: int) -> str:
        bad = target in params["messages"][0]["content"] and attempt == 0
        return "{not json" if bad else json.dumps(VALID)

    fake.answer = answer
    result = run(stores, config(settings), fake)
    assert fake.counts["batch_create"] == 1 and fake.counts["messages"] == 1
    assert result.scored_llm == 5
    cand = stored(stores, cands)[cands[2].candidate_id]
    assert cand.scorer == "anthropic" and "retried_invalid_answer" in cand.stats


def test_resumed_answer_for_changed_content_is_only_cached(
    stores: Stores, settings: Settings
) -> None:
    cands = seed(stores, 5)
    fake = FakeAnthropic()
    fake.polls_before_end = 3
    with pytest.raises(Crash):
        run(stores, config(settings), fake, sleep=lambda s: (_ for _ in ()).throw(Crash()))
    changed = candidate(0, support_ids=["ep0_0", "ep0_1", "ep0_2", "ep0_3"])
    upsert_candidates(stores.meta, [changed], run_id="r1", now=NOW)
    result = run(stores, config(settings), fake, run_id="run_2")
    assert fake.counts["batch_create"] == 1
    # four answers applied from the resumed batch; the changed one asked again (sync)
    assert fake.counts["messages"] == 1
    assert result.scored_llm == 5
    assert stored(stores, cands)[changed.candidate_id].stats["score_source"] == "sync"


def test_sync_flag_skips_batches(stores: Stores, settings: Settings) -> None:
    seed(stores, 6)
    fake = FakeAnthropic()
    result = run(stores, config(settings), fake, sync=True)
    assert fake.counts["batch_create"] == 0 and fake.counts["messages"] == 6
    assert result.mode == "sync"
