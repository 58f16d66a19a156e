"""The extract stage through the real SDK and a mocked httpx2 transport: batch create,
retrieve and results; rules on evidence and authority; cache; failures; crash and resume."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from extract_kit import NOW, PASSWORD_URL, SECRET, conversation, extract_answer, ingest, turn

from memory_core.config import Settings
from memory_core.context import RunContext
from memory_core.stages.extract import NO_KEY_MESSAGE, extract_facts
from memory_core.stores import Stores
from memory_core.stores.extract import extracted_facts
from memory_core.stores.llm import BatchStatus, ledger_entries, list_batches
from tests.kit.anthropic import FakeAnthropic, status_response


class Crash(Exception):
    """Stands in for the process dying while it waits on a batch."""


def fake_api() -> FakeAnthropic:
    fake = FakeAnthropic()
    fake.answer = extract_answer
    return fake


def run(stores: Stores, settings: Settings, fake: FakeAnthropic, run_id: str = "r1", **kw: Any):
    kw.setdefault("sleep", lambda s: None)
    ctx = RunContext(now=NOW, run_id=run_id)
    return extract_facts(stores, settings, ctx, client=fake.client(), **kw)


def sent_params(fake: FakeAnthropic) -> list[dict[str, Any]]:
    return [r["params"] for b in fake.bodies.get("batch_create", []) for r in b["requests"]]


def facts_by_key(stores: Stores) -> dict[tuple[str, str, str], Any]:
    return {(f.subject_id, f.predicate, f.object): f for f in extracted_facts(stores.meta)}


def test_batch_extracts_facts_with_rules_applied(stores: Stores, settings: Settings) -> None:
    ingest(stores, settings, conversation())
    fake = fake_api()
    result = run(stores, settings, fake)
    assert fake.counts["batch_create"] == 1 and fake.counts["messages"] == 0
    (body,) = fake.bodies["batch_create"]
    # one partition, four sessions, one request behind one cached rubric
    assert len(body["requests"]) == 1
    params = body["requests"][0]["params"]
    assert params["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert params["output_config"]["format"]["type"] == "json_schema"
    assert "[tool]" not in params["messages"][0]["content"]  # tool output is never sent
    assert result.mode == "batch" and result.applied == 1
    facts = facts_by_key(stores)
    veg = facts[("u1", "diet", "vegetarian")]
    assert veg.authority == "user_statement" and veg.source == "anthropic"
    rows = extracted_facts(stores.meta)
    assert {f.session_key for f in rows if f.object == "vegetarian"} == {"s1", "s2"}
    agent = facts[("u1", "membership", "gold")]
    assert agent.authority == "none" and agent.speaker_role == "agent"
    assert agent.self_evidence == [] and agent.evidence == ["a2"]
    assert facts[("u2", "prefers_seat", "aisle")].self_evidence == ["d1"]
    assert result.blocked_facts == 1
    (batch,) = list_batches(stores.meta)
    assert batch.status is BatchStatus.collected and batch.prompt_version.startswith("extract")
    modes = [e.mode for e in ledger_entries(stores.meta, run_id="r1")]
    assert modes == ["batch", "outcome"] or sorted(modes) == ["batch", "outcome"]


def test_unchanged_rerun_sends_nothing_and_new_session_alone(
    stores: Stores, settings: Settings
) -> None:
    ingest(stores, settings, conversation())
    fake = fake_api()
    run(stores, settings, fake)
    again = run(stores, settings, fake, run_id="r2")
    assert fake.counts["batch_create"] == 1
    assert again.requests_planned == 0 and again.sessions_unchanged == 4
    ingest(stores, settings, [turn("e1", "s4", 60 * 72, "I'd prefer an aisle seat now.")])
    third = run(stores, settings, fake, run_id="r3")
    assert fake.counts["batch_create"] == 2 and third.sessions_pending == 1
    (new,) = fake.bodies["batch_create"][1]["requests"]
    assert "aisle" in new["params"]["messages"][0]["content"]
    assert "vegetarian" not in new["params"]["messages"][0]["content"]


def test_planted_secrets_never_reach_a_request_body(stores: Stores, settings: Settings) -> None:
    ingest(stores, settings, conversation())
    fake = fake_api()
    run(stores, settings, fake)
    bodies = json.dumps(fake.bodies)
    assert fake.bodies["batch_create"]
    assert SECRET not in bodies and "Pw-s3cr3tValue1" not in bodies
    assert PASSWORD_URL not in bodies


def test_evidence_outside_the_request_and_unknown_subjects_are_dropped(
    stores: Stores, settings: Settings
) -> None:
    ingest(stores, settings, conversation())
    fake = fake_api()

    def answer(params: dict[str, Any], attempt: int) -> str:
        good = json.loads(extract_answer(params, attempt))["facts"]
        bad = [
            {**good[0], "evidence": ["t999"]},  # not a turn of this request
            {**good[0], "evidence": ["other-tenant:e1"]},  # an id it was never shown
            {**good[0], "subject_id": "mallory"},  # nobody in the request
        ]
        return json.dumps({"facts": good + bad})

    fake.answer = answer
    result = run(stores, settings, fake)
    assert result.dropped == {"unknown_evidence": 2, "unknown_subject": 1}
    assert all(
        set(f.evidence) <= {"a1", "a2", "a3", "b1", "b2", "c1", "d1"}
        for f in extracted_facts(stores.meta)
    )


def test_speaker_role_comes_from_the_evidence_not_the_answer(
    stores: Stores, settings: Settings
) -> None:
    ingest(stores, settings, conversation())
    fake = fake_api()

    def answer(params: dict[str, Any], attempt: int) -> str:
        facts = json.loads(extract_answer(params, attempt))["facts"]
        # the model claims the agent's statement was the user's own preference
        return json.dumps({"facts": [
            {**f, "speaker_role": "user", "kind": "preference"} for f in facts
        ]})  # fmt: skip

    fake.answer = answer
    result = run(stores, settings, fake)
    gold = facts_by_key(stores)[("u1", "membership", "gold")]
    assert gold.authority == "none" and gold.speaker_role == "agent"
    assert result.corrected["speaker_role"] >= 1


@pytest.mark.parametrize(
    "failure",
    [
        status_response(429, "rate_limit_error"),
        status_response(529, "overloaded_error"),
        httpx2.ReadTimeout("timed out"),
    ],
    ids=["429", "529", "timeout"],
)
def test_transient_failures_defer_and_never_invent(
    stores: Stores, settings: Settings, failure: Any
) -> None:
    ingest(stores, settings, conversation())
    fake = fake_api()
    fake.fail_batch_create = [failure] * 10  # more than the SDK's retries
    result = run(stores, settings, fake)
    assert result.deferred and not result.failed and result.facts_written == 0
    assert extracted_facts(stores.meta) == []
    fake.fail_batch_create = []
    later = run(stores, settings, fake, run_id="r2")
    assert later.facts_written > 0 and later.sessions_pending == 4


def test_errored_and_expired_results_defer(stores: Stores, settings: Settings) -> None:
    ingest(stores, settings, conversation())
    fake = fake_api()
    from memory_core.stages.extract.plan import load_sessions, pack_requests
    from memory_core.stages.extract.prompt import prompt_version

    pv = prompt_version(settings.extract)
    model = settings.score.model
    sessions, _ = load_sessions(stores, settings.extract, model=model, prompt_version=pv, done={})
    (plan,) = pack_requests(sessions, settings.extract, model=model, prompt_version=pv)
    fake.batch_results[plan.custom_id] = {"type": "expired"}
    result = run(stores, settings, fake)
    assert plan.custom_id in result.deferred and result.facts_written == 0
    del fake.batch_results[plan.custom_id]
    assert run(stores, settings, fake, run_id="r2").facts_written > 0


def test_invalid_answer_is_counted_not_used(stores: Stores, settings: Settings) -> None:
    ingest(stores, settings, conversation())
    fake = fake_api()
    fake.answer = lambda params, attempt: json.dumps({"facts": [{"subject_id": "u1"}]})
    result = run(stores, settings, fake)
    assert len(result.invalid) == 1 and result.facts_written == 0
    assert "facts.0" in next(iter(result.invalid.values()))


def test_invalid_answer_is_retried_once_in_a_later_batch_then_given_up(
    stores: Stores, settings: Settings
) -> None:
    ingest(stores, settings, conversation())
    fake = fake_api()
    fake.answer = lambda params, attempt: json.dumps({"facts": [{"subject_id": "u1"}]})
    first = run(stores, settings, fake)
    assert len(first.invalid) == 1 and fake.counts["batch_create"] == 1
    second = run(stores, settings, fake, run_id="r2")  # sent once more, in a new batch
    assert second.retried_invalid == list(first.invalid) and len(second.invalid) == 1
    assert fake.counts["batch_create"] == 2
    third = run(stores, settings, fake, run_id="r3")  # bounded: not sent a third time
    assert list(third.given_up) == list(first.invalid) and third.requests_planned == 0
    assert fake.counts["batch_create"] == 2
    assert extracted_facts(stores.meta) == []  # nothing invented for it
    assert sum(e.mode == "invalid" for e in ledger_entries(stores.meta)) == 2


def test_a_valid_retry_after_an_invalid_answer_is_used(stores: Stores, settings: Settings) -> None:
    ingest(stores, settings, conversation())
    fake = fake_api()
    fake.answer = lambda params, attempt: "not json"
    assert len(run(stores, settings, fake).invalid) == 1
    fake.answer = extract_answer
    again = run(stores, settings, fake, run_id="r2")
    assert len(again.retried_invalid) == 1 and not again.invalid and again.facts_written > 0


def test_crash_after_submit_resumes_the_same_batch(stores: Stores, settings: Settings) -> None:
    ingest(stores, settings, conversation())
    fake = fake_api()
    fake.polls_before_end = 3

    def crash(seconds: float) -> None:
        raise Crash

    with pytest.raises(Crash):
        run(stores, settings, fake, sleep=crash)
    (batch,) = list_batches(stores.meta)
    assert batch.status is BatchStatus.in_progress
    assert extracted_facts(stores.meta) == []
    result = run(stores, settings, fake, run_id="r2")
    assert fake.counts["batch_create"] == 1  # collected, not sent again
    assert result.resumed_batch_ids == [batch.batch_id] and result.facts_written > 0
    assert run(stores, settings, fake, run_id="r3").requests_planned == 0


def test_score_stage_leaves_extract_batches_alone(stores: Stores, settings: Settings) -> None:
    from memory_core.stages.score import score_candidates

    ingest(stores, settings, conversation())
    fake = fake_api()
    fake.polls_before_end = 5

    def crash(seconds: float) -> None:
        raise Crash

    with pytest.raises(Crash):
        run(stores, settings, fake, sleep=crash)
    scored = score_candidates(
        stores, settings.score, RunContext(now=NOW), client=fake.client(), sleep=lambda s: None
    )
    assert scored.resumed_batch_ids == []
    (batch,) = list_batches(stores.meta)
    assert batch.status is BatchStatus.in_progress


def test_without_key_or_replay_the_stage_is_skipped_and_says_so(
    stores: Stores, settings: Settings
) -> None:
    ingest(stores, settings, conversation())
    result = extract_facts(stores, settings, RunContext(now=NOW))
    assert result.mode == "skipped" and result.skipped == NO_KEY_MESSAGE
    assert NO_KEY_MESSAGE in result.warnings and extracted_facts(stores.meta) == []


def test_forgetting_a_subject_reaches_extracted_facts_and_cached_answers(
    stores: Stores, settings: Settings
) -> None:
    from memory_core.stages.forget.user_deletion import Target, forget

    ingest(stores, settings, conversation())
    run(stores, settings, fake_api())
    with stores.meta.connect() as con:
        cached = con.execute(
            "SELECT count(*) FROM score_cache WHERE prompt_version LIKE 'extract%'"
        ).fetchone()
    assert cached == (1,)
    forget(stores, settings, RunContext(now=NOW), Target(subject_id="u1", tenant_id="acme"))
    left = extracted_facts(stores.meta)
    assert left and {f.subject_id for f in left} == {"u2"}
    with stores.meta.connect() as con:
        dump = json.dumps(con.execute("SELECT * FROM score_cache").fetchall(), default=str)
        sessions = con.execute("SELECT session_key FROM extract_sessions").fetchall()
    assert '"u1"' not in dump and "vegetarian" not in dump
    assert ("s1",) not in sessions  # re-extracted from what is left, if anything
