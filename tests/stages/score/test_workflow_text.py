"""Workflow text: the real SDK through a mocked HTTP transport; invented or out-of-order steps
are dropped and counted; cached, ledgered, and offline nothing changes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memory_core.config import load_settings
from memory_core.context import RunContext
from memory_core.models import Authority, Candidate, CandidateKind, CandidateStatus, ProcedureSpec
from memory_core.stages.score.workflow_text import (
    WorkflowAnswer,
    check_workflow,
    write_workflow_texts,
)
from memory_core.stores import open_stores
from memory_core.stores.candidates import get_candidates, upsert_candidates
from memory_core.stores.llm import ledger_entries
from tests.kit.anthropic import ToolUseAnthropic

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


def workflow_api(steps: list[str]) -> ToolUseAnthropic:
    """The Messages API answering with a ``record_workflow`` tool call of these steps."""
    answer = {"name": "Cancel a reservation", "when_to_use": "the customer asks to cancel",
              "steps": steps, "pitfalls": []}  # fmt: skip
    return ToolUseAnthropic("record_workflow", answer)


@pytest.fixture
def stores(tmp_path: Path):
    settings = load_settings(home=tmp_path / "home", embed={"model": "hash"})
    stores = open_stores(settings)
    stores.meta.migrate()
    return settings, stores


def test_workflow_text_through_the_sdk_drops_an_invented_step(stores) -> None:
    settings, st = stores
    upsert_candidates(st.meta, [_candidate("cand_a")], run_id="r0", now=NOW)
    api = workflow_api([LOOKUP, "issue_voucher(amount=$amount)", CANCEL])
    ctx = RunContext(now=NOW, run_id="run_1")
    result = write_workflow_texts(st, settings.score, ctx, client=api.client())
    assert (result.written, result.dropped_steps, len(api.bodies)) == (1, 1, 1)
    body = api.bodies[0]
    assert body["tool_choice"] == {"type": "tool", "name": "record_workflow"}
    assert json.loads(body["messages"][0]["content"])["observed_steps"] == [LOOKUP, CANCEL]
    [cand] = get_candidates(st.meta, ["cand_a"])
    workflow = cand.stats["workflow"]
    assert workflow["steps"] == [LOOKUP, CANCEL] and workflow["dropped_steps"] == 1
    assert workflow["dropped"] == [{"step": "issue_voucher(amount=$amount)", "why": "invented"}]
    assert workflow["written_by"] == "claude"
    assert cand.text == "rule-made text"  # the reviewer still sees the rule-made line too
    [entry] = [e for e in ledger_entries(st.meta) if e.detail.get("stage") == "workflow_text"]
    assert entry.requests == 1 and entry.input_tokens == 300
    again = write_workflow_texts(st, settings.score, RunContext(now=NOW, run_id="run_2"),
                                 client=api.client())  # fmt: skip
    assert (again.cached, again.written, len(api.bodies)) == (1, 0, 1)  # cached: not re-sent


def test_offline_and_over_budget_keep_the_rule_made_text(stores) -> None:
    settings, st = stores
    upsert_candidates(st.meta, [_candidate("cand_b")], run_id="r0", now=NOW)
    ctx = RunContext(now=NOW, run_id="run_1")
    offline = write_workflow_texts(st, settings.score, ctx, client=None)
    assert (offline.offline, offline.written) == (1, 0)
    tight = settings.score.model_copy(update={"max_input_tokens_per_run": 10})
    api = workflow_api([CANCEL])
    refused = write_workflow_texts(st, tight, ctx, client=api.client())
    assert (refused.refused_budget, len(api.bodies)) == (1, 0)
    [cand] = get_candidates(st.meta, ["cand_b"])
    assert "workflow" not in cand.stats
