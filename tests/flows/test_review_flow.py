"""The promotion-review flow, end to end on a real Prefect server (the session harness).

A run publishes the batch, pauses for a ``ReviewDecision`` (the UI form), and is resumed
either by ``memctl review approve`` in another process (which commits, then resumes) or by
the form input itself (the flow commits). Facts appear either way, committed once.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from prefect.client.orchestration import get_client
from prefect.settings import PREFECT_API_URL

from flows.review import ReviewDecision, promotion_review
from memory_core.config import Settings, load_settings
from memory_core.context import Partition, RunContext
from memory_core.embed import HashEmbedder
from memory_core.stages.ingest import ingest_records
from memory_core.stages.mine import mine_partition
from memory_core.stages.review import build_review_batches
from memory_core.stages.score import score_candidates
from memory_core.stores import open_stores
from memory_core.stores.facts import list_rows
from memory_core.stores.review import get_batch
from tests.kit import forkserver

NOW = datetime(2026, 6, 28, 12, tzinfo=UTC)


def _said(eid: str, subject: str, obj: str, day: int) -> str:
    text = f"The owner is {obj}."
    return json.dumps(
        {
            "episode_id": eid, "tenant_id": "acme", "subject_id": subject, "namespace": "it",
            "occurred_at": f"2026-06-{day:02d}T09:00:00Z", "source_role": "user",
            "text": text, "claims": [{"predicate": "owner", "object": obj, "span": text}],
        }
    )  # fmt: skip


@pytest.fixture
def batch(tmp_path: Path) -> tuple[Settings, str]:
    settings = load_settings(home=tmp_path / "home", review={"poll_interval_s": 1})
    stores = open_stores(settings)
    ctx = RunContext(now=NOW)
    lines = [_said("a1", "team-a", "Jin", 20), _said("a2", "team-a", "Jin", 25)]
    ingest_records(stores, settings, ctx, lines, embedder=HashEmbedder(384), source="t.jsonl")
    mine_partition(stores, settings, ctx, Partition("acme", "it"))
    score_candidates(stores, settings.score, ctx, sync=True)
    (batch_id,) = build_review_batches(stores, settings, ctx).created
    return settings, batch_id


def _start(settings: Settings, batch_id: str) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = promotion_review(
                settings_data=settings.model_dump(mode="json"), batch_id=batch_id
            )
        except BaseException as exc:  # surfaced by the test, not lost in the thread
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _wait_paused(settings: Settings, batch_id: str, out: dict[str, Any]) -> str:
    stores = open_stores(settings)
    deadline = time.monotonic() + 120
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            assert "error" not in out, out.get("error")
            run_id = get_batch(stores.meta, batch_id).flow_run_id
            if run_id:
                state = client.read_flow_run(UUID(run_id)).state
                if state is not None and state.is_paused():
                    return run_id
            time.sleep(0.5)
    pytest.fail("the promotion-review run never paused")


def _form(run_id: str) -> tuple[dict[str, Any], str]:
    """The form the UI shows: the saved input schema and its description."""
    with get_client(sync_client=True) as client:
        state = client.read_flow_run(UUID(run_id)).state
        keyset = state.state_details.run_input_keyset
        schema = json.loads(client.read_flow_run_input(UUID(run_id), keyset["schema"]))
        description = json.loads(client.read_flow_run_input(UUID(run_id), keyset["description"]))
    return schema, description


def test_cli_approve_resumes_a_waiting_run_and_facts_appear(batch):
    settings, batch_id = batch
    thread, out = _start(settings, batch_id)
    run_id = _wait_paused(settings, batch_id, out)
    schema, description = _form(run_id)
    assert {"reviewer", "decision", "items", "reason", "edits"} <= set(schema["properties"])
    assert f"# Review batch `{batch_id}`" in description
    assert f"memctl review show {batch_id}" in description  # where to read the items
    for private in ("Jin", "team-a", "The owner is"):  # Prefect keeps the form: no memory text
        assert private not in description and private not in json.dumps(schema)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    env.update(MEMCTL_EMBED__MODEL="hash", PREFECT_API_URL=PREFECT_API_URL.value())
    cli = forkserver.run(
        [
            sys.executable, "-m", "memory_core.cli", "review", "approve", batch_id,
            "--reviewer", "alice", "--now", "2026-06-28T12:00:00Z", "--home",
            str(settings.home), "--format", "json",
        ],
        capture_output=True, text=True, env=env, timeout=180, check=False,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    decided = json.loads(cli.stdout)
    assert decided["flow_run"] == f"resumed flow run {run_id}"
    assert decided["commit"]["facts"] == 1
    thread.join(timeout=120)
    assert not thread.is_alive() and "error" not in out, out.get("error")
    assert out["result"]["already_decided"] and out["result"]["commit"] is None  # committed once
    stores = open_stores(settings)
    (fact,) = list_rows(stores.lance, "facts")
    assert (fact["object"], fact["approver"]) == ("Jin", "alice")
    assert get_batch(stores.meta, batch_id).flow_run_id is None


def test_form_decision_commits_through_the_flow(batch):
    settings, batch_id = batch
    thread, out = _start(settings, batch_id)
    run_id = _wait_paused(settings, batch_id, out)
    from prefect.flow_runs import resume_flow_run

    form = ReviewDecision.payload(ReviewDecision(reviewer="bob", decision="approve").to_request())
    resume_flow_run(UUID(run_id), run_input=form)
    thread.join(timeout=120)
    assert not thread.is_alive() and "error" not in out, out.get("error")
    assert out["result"]["status"] == "approved"
    assert out["result"]["commit"]["facts"] == 1
    stores = open_stores(settings)
    (fact,) = list_rows(stores.lance, "facts")
    assert fact["approver"] == "bob"
    with get_client(sync_client=True) as client:
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

        artifacts = client.read_artifacts(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[UUID(run_id)]))
        )
    keys = {a.key for a in artifacts}
    assert f"review-{batch_id.replace('_', '-')}" in keys


def test_the_form_requires_only_a_reviewer_and_blank_rows_change_nothing():
    schema = ReviewDecision.with_initial_data(description="d").model_json_schema()
    assert schema["required"] == ["reviewer"]  # the UI marks every other field optional
    assert schema["properties"]["reviewer"]["minLength"] == 1
    # what the Prefect UI sends for an edit row added and left blank, and an untouched field
    blank_row = {"candidate_id": "", "supersede": False, "object": None, "conditions": None,
                 "preconditions": None, "name": None, "effect": None, "rollback": None,
                 "valid_from": None}  # fmt: skip
    answer = ReviewDecision(
        reviewer=" carol ", reason="", items=["", " c1 "],
        edits=[blank_row, {"candidate_id": "c1", "object": "", "conditions": {}, "name": "n"}],
    )  # fmt: skip
    request = answer.to_request()
    assert (request.reviewer, request.items) == ("carol", ["c1"])
    assert {cid: e.model_dump(exclude_defaults=True) for cid, e in request.edits.items()} == {
        "c1": {"name": "n"}
    }


def test_an_answer_the_batch_cannot_take_is_refused_and_the_run_waits_again(batch):
    """A rejection without a reason: the run does not fail; the next form says why; a good
    answer then commits, and the run deletes every input it stored in Prefect."""
    settings, batch_id = batch
    thread, out = _start(settings, batch_id)
    run_id = _wait_paused(settings, batch_id, out)
    from prefect.flow_runs import resume_flow_run

    resume_flow_run(UUID(run_id), run_input={"reviewer": "dan", "decision": "reject"})
    deadline = time.monotonic() + 120
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            assert "error" not in out, out.get("error")
            state = client.read_flow_run(UUID(run_id)).state
            if state.is_paused() and state.state_details.pause_key == "decision-1":
                break
            time.sleep(0.5)
        _schema, description = _form(run_id)
        assert "**Your last answer was not applied:** reason: a rejection needs a reason" in (
            description
        )
        resume_flow_run(UUID(run_id), run_input={"reviewer": "erin", "decision": "approve"})
        thread.join(timeout=120)
        assert not thread.is_alive() and "error" not in out, out.get("error")
        assert out["result"]["status"] == "approved"
        assert client.read_flow_run(UUID(run_id)).state.is_completed()
        left = client.filter_flow_run_input(
            UUID(run_id), key_prefix="paused-", limit=100, exclude_keys=set()
        )
    assert left == []  # the answers (which may quote memory text) are gone from Prefect
    assert get_batch(open_stores(settings).meta, batch_id).flow_run_id is None


def test_nightly_step_builds_batches_as_a_task(batch):
    """The task the nightly flow calls after scoring (build, expire, auto-approve)."""
    from prefect import flow

    from flows.review import build_batches_task

    settings, first = batch

    @flow(name="nightly-tail")
    def tail(later: str) -> dict[str, Any]:
        return build_batches_task.submit(
            settings_data=settings.model_dump(mode="json"), run_id="run_test", now_iso=later
        ).result()

    result = tail("2026-07-13T00:00:00+00:00")  # 15 days later: the first batch expired
    assert result["expired_batches"] == [first] and result["returned_to_queue"] == 1
    assert len(result["created_batches"]) == 1


def test_a_batch_is_held_only_by_a_live_run_never_by_a_dead_or_stuck_one():
    """What review-dispatch asks of a batch's recorded run before starting another."""
    from datetime import timedelta
    from uuid import uuid4

    from prefect import flow
    from prefect.states import Cancelled, Failed, Running, Suspended

    from flows.deployments import STUCK_AFTER, _run_holds

    @flow(name="recorded-review-run")
    def recorded() -> None: ...

    now = datetime.now(UTC)
    later = now + STUCK_AFTER + timedelta(minutes=1)
    with get_client(sync_client=True) as client:

        def run(state: Any) -> str:
            return str(client.create_flow_run(recorded, state=state).id)

        running, waiting = run(Running()), run(Suspended(timeout_seconds=3600 * 24 * 14))
        assert _run_holds(client, running, now) == "Running"
        assert _run_holds(client, waiting, later) == "Suspended"  # waits for days, alive
        assert _run_holds(client, run(Failed()), now) is None
        assert _run_holds(client, run(Cancelled()), now) is None
        assert _run_holds(client, str(uuid4()), now) is None  # gone (another server, purged)
        assert _run_holds(client, "not-a-run-id", now) is None
        assert _run_holds(client, running, later) is None  # its process died long ago
        assert client.read_flow_run(UUID(running)).state.is_crashed()
