"""Workflow text: the real SDK through a mocked HTTP transport; invented or out-of-order steps
are dropped and counted; cached, ledgered, and offline nothing changes. Like scoring, fewer
than ``score.batch_min_requests`` requests go through the Messages API, more through Message
Batches (the batch tests lower the threshold to one)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memory_core.config import load_settings
from memory_core.context import RunContext
from memory_core.models import Authority, Candidate, CandidateKind, CandidateStatus, ProcedureSpec
from memory_core.stages.score import workflow_text
from memory_core.stages.score.workflow_text import (
    WorkflowAnswer,
    check_workflow,
    write_workflow_texts,
)
from memory_core.stores import open_stores
from memory_core.stores.candidates import (
    get_candidates,
    merge_candidate_stats,
    upsert_candidates,
)
from memory_core.stores.llm import BatchStatus, ledger_entries, list_batches
from tests.kit.anthropic import FakeAnthropic, status_response, tool_use_body

NOW = datetime(2026, 6, 1, tzinfo=UTC)
LOOKUP = "get_user_details(user_id=$user_id)"
CANCEL = "cancel_reservation(reservation_id=$reservation_id)"
SIG_L, SIG_C = "get_user_details(user_id=$user_id)", CANCEL
RUNS = [[SIG_L, SIG_C], [SIG_L, SIG_C], [SIG_C]]


def test_check_keeps_observed_steps_in_a_shown_order() -> None:
    answer = WorkflowAnswer(
        name="Cancel a reservation",
        when_to_use="a customer asks to cancel",
        steps=[LOOKUP, "refund_payment(payment_id=$payment_id)", CANCEL, LOOKUP],
    )
    checked = check_workflow(answer, [LOOKUP, CANCEL], RUNS)
    assert checked.steps == [LOOKUP, CANCEL]
    assert [d["why"] for d in checked.dropped] == ["invented", "order"]
    # argument values do not matter, keys do: a renamed argument is another step
    same = WorkflowAnswer(name="n", when_to_use="w",
                          steps=["cancel_reservation(reservation_id=ABC123)"])  # fmt: skip
    assert check_workflow(same, [LOOKUP, CANCEL], RUNS).steps == [CANCEL]
    other = WorkflowAnswer(name="n", when_to_use="w", steps=["cancel_reservation(id=$id)"])
    assert not check_workflow(other, [LOOKUP, CANCEL], RUNS).usable


def _candidate(cid: str) -> Candidate:
    return Candidate(
        candidate_id=cid,
        kind=CandidateKind.procedural,
        tenant_id="acme",
        subject_id=None,
        namespace="airline",
        procedure=ProcedureSpec(name="cancel: " + CANCEL, steps=[LOOKUP, CANCEL]),
        support_ids=["e1", "e2", "e3"],
        confidence=0.6,
        status=CandidateStatus.pending_score,
        authority=Authority.none,
        text="rule-made text",
        stats={"observed_steps": [LOOKUP, CANCEL], "support_runs": RUNS},
    )


def tool_answer(steps: list[str]) -> Any:
    """The fake API's answer function: a ``record_workflow`` tool call naming ``steps``."""
    answer = {"name": "Cancel a reservation", "when_to_use": "the customer asks to cancel",
              "steps": steps, "pitfalls": []}  # fmt: skip

    def respond(params: dict[str, Any], attempt: int) -> dict[str, Any]:
        return tool_use_body("record_workflow", answer, msg_id=f"msg_w{attempt}",
                             model=params["model"])  # fmt: skip

    return respond


def fake_api(steps: list[str]) -> FakeAnthropic:
    fake = FakeAnthropic()
    fake.answer = tool_answer(steps)
    return fake


def sent(fake: FakeAnthropic) -> list[dict[str, Any]]:
    """Every request the fake received, synchronous or inside a batch."""
    return fake.bodies.get("messages", []) + [
        r["params"] for b in fake.bodies.get("batch_create", []) for r in b["requests"]
    ]


def write(st, score, run_id: str, fake: FakeAnthropic | None, **kw: Any):
    ctx = RunContext(now=NOW, run_id=run_id)
    client = fake.client() if fake is not None else None
    return write_workflow_texts(st, score, ctx, client=client, sleep=lambda s: None, **kw)


@pytest.fixture
def stores(tmp_path: Path):
    """Settings whose score section batches from one request on (the batch path's tests)."""
    settings = load_settings(
        home=tmp_path / "home", embed={"model": "hash"}, score={"batch_min_requests": 1}
    )
    stores = open_stores(settings)
    stores.meta.migrate()
    return settings, stores


def test_workflow_text_in_a_batch_drops_an_invented_step(stores) -> None:
    settings, st = stores
    upsert_candidates(st.meta, [_candidate("cand_a")], run_id="r0", now=NOW)
    api = fake_api([LOOKUP, "issue_voucher(amount=$amount)", CANCEL])
    result = write(st, settings.score, "run_1", api)
    assert (result.written, result.dropped_steps, len(sent(api))) == (1, 1, 1)
    assert api.counts["batch_create"] == 1 and api.counts["messages"] == 0  # Message Batches
    body = sent(api)[0]
    assert body["tool_choice"] == {"type": "tool", "name": "record_workflow"}
    assert json.loads(body["messages"][0]["content"])["observed_steps"] == [LOOKUP, CANCEL]
    [cand] = get_candidates(st.meta, ["cand_a"])
    workflow = cand.stats["workflow"]
    assert workflow["steps"] == [LOOKUP, CANCEL] and workflow["dropped_steps"] == 1
    assert workflow["dropped"] == [{"step": "issue_voucher(amount=$amount)", "why": "invented"}]
    assert workflow["written_by"] == "claude"
    assert cand.text == "rule-made text"  # the reviewer still sees the rule-made line too
    [entry] = [e for e in ledger_entries(st.meta) if e.detail.get("stage") == "workflow_text"]
    assert entry.mode == "batch" and entry.requests == 1 and entry.input_tokens == 300
    again = write(st, settings.score, "run_2", api)
    assert (again.cached, again.written, len(sent(api))) == (1, 0, 1)  # cached: not re-sent


def test_a_re_mine_that_rewrites_stats_is_answered_from_the_cache(stores) -> None:
    """The double send the crash harness found: the answer lived in the candidate's stats,
    which a re-mine replaces. Now the request's content hash keys the score cache."""
    settings, st = stores
    upsert_candidates(st.meta, [_candidate("cand_a")], run_id="r0", now=NOW)
    api = fake_api([LOOKUP, CANCEL])
    write(st, settings.score, "run_1", api)
    # the candidate's stats lose the answer (as a re-mine's rewrite did); the question is the same
    merge_candidate_stats(st.meta, {"cand_a": {"workflow": None}}, now=NOW)
    again = write(st, settings.score, "run_2", api)
    assert (again.cached, again.written, len(sent(api))) == (1, 0, 1)
    [cand] = get_candidates(st.meta, ["cand_a"])
    assert cand.stats["workflow"]["steps"] == [LOOKUP, CANCEL]
    offline = write(st, settings.score, "run_3", None)  # the cache serves without a key too
    assert (offline.cached, offline.offline) == (1, 0)


def test_a_batch_left_open_by_a_crash_is_collected_not_sent_again(stores) -> None:
    settings, st = stores
    upsert_candidates(st.meta, [_candidate("cand_a")], run_id="r0", now=NOW)
    api = fake_api([LOOKUP, CANCEL])
    api.polls_before_end = 3

    def crash(seconds: float) -> None:
        raise KeyboardInterrupt  # the process dies while it waits on the batch

    with pytest.raises(KeyboardInterrupt):
        write_workflow_texts(st, settings.score, RunContext(now=NOW, run_id="run_1"),
                             client=api.client(), sleep=crash)  # fmt: skip
    [open_batch] = list_batches(st.meta)  # recorded before polling
    api.batches[open_batch.batch_id].polls_left = 1
    resumed = write(st, settings.score, "run_2", api)
    assert (resumed.written, len(sent(api)), api.counts["batch_create"]) == (1, 1, 1)
    assert list_batches(st.meta)[0].status is BatchStatus.collected


def test_an_invalid_answer_is_ledgered_and_not_asked_for_again(stores) -> None:
    settings, st = stores
    upsert_candidates(st.meta, [_candidate("cand_a")], run_id="r0", now=NOW)
    api = FakeAnthropic()  # answers with plain text: no tool_use block
    first = write(st, settings.score, "run_1", api)
    assert (first.invalid, first.written, len(sent(api))) == (1, 0, 1)
    assert [e.mode for e in ledger_entries(st.meta) if e.mode == "invalid"] == ["invalid"]
    second = write(st, settings.score, "run_2", api)
    assert (second.given_up, len(sent(api))) == (1, 1)
    [cand] = get_candidates(st.meta, ["cand_a"])
    assert "workflow" not in cand.stats


def test_offline_and_over_budget_keep_the_rule_made_text(stores) -> None:
    settings, st = stores
    upsert_candidates(st.meta, [_candidate("cand_b")], run_id="r0", now=NOW)
    offline = write(st, settings.score, "run_1", None)
    assert (offline.offline, offline.written) == (1, 0)
    tight = settings.score.model_copy(update={"max_input_tokens_per_run": 10})
    api = fake_api([CANCEL])
    refused = write(st, tight, "run_1", api)
    assert (refused.refused_budget, len(sent(api))) == (1, 0)
    [cand] = get_candidates(st.meta, ["cand_b"])
    assert "workflow" not in cand.stats


def _sync_settings(settings: Any, **update: Any) -> Any:
    return settings.score.model_copy(update={"batch_min_requests": 20, **update})


def test_a_handful_of_requests_goes_through_the_messages_api(stores) -> None:
    """Below batch_min_requests no batch is made: each answer is checked, cached with its
    spend at once, and a rerun asks nothing."""
    settings, st = stores
    score = _sync_settings(settings)
    upsert_candidates(st.meta, [_candidate("cand_a"), _candidate("cand_b")], run_id="r0", now=NOW)
    api = fake_api([LOOKUP, "issue_voucher(amount=$amount)", CANCEL])
    result = write(st, score, "run_1", api)
    assert result.mode == "sync" and (result.written, result.dropped_steps) == (2, 2)
    assert api.counts["messages"] == 2 and api.counts["batch_create"] == 0
    assert api.bodies["messages"][0]["tool_choice"] == {"type": "tool", "name": "record_workflow"}
    [cand] = get_candidates(st.meta, ["cand_a"])
    assert cand.stats["workflow"]["steps"] == [LOOKUP, CANCEL]
    assert cand.stats["workflow"]["written_by"] == "claude"
    rows = [e for e in ledger_entries(st.meta) if e.detail.get("stage") == "workflow_text"]
    assert [(e.mode, e.requests, e.input_tokens) for e in rows] == [("sync", 1, 300)] * 2
    assert sum(e.cost_usd for e in rows) == pytest.approx(result_cost(score, rows))
    again = write(st, score, "run_2", api)
    assert (again.cached, again.written, api.counts["messages"]) == (2, 0, 2)
    many = [_candidate(f"cand_{i:02d}") for i in range(20)]
    upsert_candidates(st.meta, many, run_id="r0", now=NOW)
    batched = write(st, score, "run_3", api)  # 20 new requests: the batch path
    assert batched.mode == "batch" and api.counts["batch_create"] == 1
    assert api.counts["messages"] == 2 and batched.written == 20


def result_cost(score: Any, rows: list[Any]) -> float:
    """What the ledger rows should cost at the configured (non-batch) prices."""
    from memory_core.stages.score.results import Usage

    usage = Usage(requests=len(rows), input_tokens=sum(e.input_tokens for e in rows),
                  output_tokens=sum(e.output_tokens for e in rows),
                  cache_read_tokens=sum(e.cache_read_tokens for e in rows),
                  cache_write_tokens=sum(e.cache_write_tokens for e in rows))  # fmt: skip
    return usage.cost_usd(score, batch=False)


def test_sync_invalid_answer_is_ledgered_and_not_asked_for_again(stores) -> None:
    settings, st = stores
    score = _sync_settings(settings)
    upsert_candidates(st.meta, [_candidate("cand_a")], run_id="r0", now=NOW)
    api = FakeAnthropic()  # answers with plain text: no tool_use block
    first = write(st, score, "run_1", api)
    assert (first.mode, first.invalid, first.written, api.counts["messages"]) == ("sync", 1, 0, 1)
    modes = sorted(e.mode for e in ledger_entries(st.meta))
    assert modes == ["invalid", "sync"]  # the paid request, and the mark that bounds retries
    second = write(st, score, "run_2", api)
    assert (second.given_up, api.counts["messages"]) == (1, 1)
    [cand] = get_candidates(st.meta, ["cand_a"])
    assert "workflow" not in cand.stats


def test_sync_temporary_failure_defers_the_rest_and_a_later_run_writes(stores) -> None:
    settings, st = stores
    score = _sync_settings(settings, max_retries=0)
    upsert_candidates(st.meta, [_candidate("cand_a"), _candidate("cand_b")], run_id="r0", now=NOW)
    api = fake_api([LOOKUP, CANCEL])
    api.fail_messages = [status_response(529, "overloaded_error", "busy")]
    first = write(st, score, "run_1", api)
    assert (first.deferred, first.written, api.counts["messages"]) == (2, 0, 1)
    assert all("workflow" not in c.stats for c in get_candidates(st.meta, ["cand_a", "cand_b"]))
    later = write(st, score, "run_2", api)
    assert (later.written, api.counts["messages"]) == (2, 3)
    # a request the API refuses (400) fails itself only
    upsert_candidates(st.meta, [_candidate("cand_c"), _candidate("cand_d")], run_id="r0", now=NOW)
    api.fail_messages = [status_response(400, "invalid_request_error", "bad")]
    third = write(st, score, "run_3", api)
    assert (third.failed, third.written, third.cached) == (1, 1, 2)


def test_a_run_without_a_key_that_can_only_count_gives_the_full_runs_result(stores) -> None:
    """Without a client, a store with no cached workflow answer, no invalid one and no applied
    text is only counted (``_offline_only``): the result must be what reading and planning
    every candidate gives; a cached answer or applied text sends the run the full way."""
    settings, st = stores
    no_steps = _candidate("cand_c").model_copy(update={"stats": {"support_runs": RUNS}})
    rejected = _candidate("cand_d").model_copy(update={"status": CandidateStatus.auto_rejected})
    other = _candidate("cand_e").model_copy(update={"tenant_id": "other"})
    upsert_candidates(st.meta, [_candidate("cand_a"), _candidate("cand_b"), no_steps, rejected,
                                other], run_id="r0", now=NOW)  # fmt: skip
    ctx = RunContext(now=NOW, run_id="run_1")

    def full(tenant_id: str | None = None) -> dict[str, Any]:
        run = workflow_text._Run(st, settings.score, ctx, None, lambda s: None)
        plans = workflow_text._plans(workflow_text._eligible(st, tenant_id), settings.score.model)
        return run.execute(plans).as_dict()

    for tenant in (None, "acme"):
        assert workflow_text._offline_only(st, settings.score.model, tenant) == (
            3 if tenant is None else 2
        )
        assert write(st, settings.score, "run_1", None, tenant_id=tenant).as_dict() == full(tenant)
    write(st, settings.score, "run_2", fake_api([LOOKUP, CANCEL]))  # answers cached, applied
    assert workflow_text._offline_only(st, settings.score.model, None) is None
    merge_candidate_stats(st.meta, {"cand_a": {"workflow": None}}, now=NOW)
    offline = write(st, settings.score, "run_3", None)
    assert offline.as_dict() == full() and offline.cached == 3  # applied, or from the cache
    with st.meta.connect() as con:  # the answers purged (as a deletion does), the texts stay
        con.execute("DELETE FROM score_cache")
    assert workflow_text._offline_only(st, settings.score.model, None) is None
    assert write(st, settings.score, "run_4", None).as_dict() == full()
