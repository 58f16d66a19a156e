"""The promotion-review flow: publish a batch for people, wait for their decision, commit it.

The flow publishes the batch summary as artifacts (markdown and a table) and waits for a
``ReviewDecision`` (a Prefect ``RunInput``), which the Prefect UI renders as a form:

* run from a deployment, it *suspends* (``suspend_flow_run``): the process exits while people
  take days, and a worker runs the flow again once the input arrives;
* run locally, it *pauses* (``pause_flow_run``) for ``review.pause_timeout_hours``.

The decision goes to ``memory_core.stages.review.decide_batch``, the same code the CLI calls.
``memctl review approve`` decides and commits itself, then resumes a waiting run with the same
decision (``resume_review_run``); the run applies it again, which is a no-op, and finishes.
A decision that leaves items undecided waits again, until the batch is decided or expires.

``build_batches_task`` is the nightly flow's step that builds review batches after scoring.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal
from uuid import UUID

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext
from prefect.exceptions import FlowPauseTimeout
from prefect.flow_runs import pause_flow_run, resume_flow_run, suspend_flow_run
from prefect.input import RunInput
from pydantic import BaseModel, ConfigDict, Field

from memory_core.config import Settings
from memory_core.context import RunContext
from memory_core.errors import ReviewClosed
from memory_core.stages.review import (
    ItemEdit,
    ReviewRequest,
    batch_summary,
    build_review_batches,
    decide_batch,
    summary_markdown,
)
from memory_core.stores import open_stores
from memory_core.stores.review import BatchStatus, get_batch, set_flow_run

__all__ = [
    "ItemChange",
    "ReviewDecision",
    "build_batches_task",
    "promotion_review",
    "resume_review_run",
    "run_promotion_review",
]


class ItemChange(BaseModel):
    """An edit of one item, as the Prefect form shows it (the CLI's ``--edit``)."""

    model_config = ConfigDict(extra="forbid")
    candidate_id: str = Field(description="the item to change")
    object: str | None = Field(default=None, description="corrected object of a claim")
    conditions: dict[str, str] | None = Field(
        default=None, description="narrowed conditions: the old ones plus more"
    )
    preconditions: dict[str, str] | None = Field(
        default=None, description="narrowed preconditions of a procedure"
    )
    name: str | None = Field(default=None, description="procedure name (its version lineage)")
    effect: str | None = Field(default=None, description="what the procedure achieves")
    rollback: str | None = Field(default=None, description="how to undo it")
    valid_from: datetime | None = Field(default=None, description="start of valid time")
    supersede: bool = Field(default=False, description="resolve a held conflict for this item")


class ReviewDecision(RunInput):
    """The review form: who decides, approve or reject, which items, why, and edits."""

    reviewer: str = Field(description="your name or e-mail; recorded with the decision")
    decision: Literal["approve", "reject"] = Field(description="applies to the listed items")
    items: list[str] = Field(
        default_factory=list, description="candidate ids; leave empty for every undecided item"
    )
    reason: str = Field(default="", description="why (required to reject)")
    edits: list[ItemChange] = Field(default_factory=list, description="optional per-item edits")

    def to_request(self) -> ReviewRequest:
        edits = {
            e.candidate_id: ItemEdit(**e.model_dump(exclude={"candidate_id"}, exclude_none=True))
            for e in self.edits
        }
        return ReviewRequest(
            decision=self.decision,
            reviewer=self.reviewer,
            items=self.items,
            reason=self.reason,
            edits=edits,
        )

    @classmethod
    def payload(cls, request: ReviewRequest) -> dict[str, Any]:
        """The run input that replays ``request`` (what ``memctl review approve`` sends)."""
        return {
            "reviewer": request.reviewer,
            "decision": request.decision,
            "items": list(request.items),
            "reason": request.reason,
            "edits": [
                {"candidate_id": cid, **e.model_dump(mode="json", exclude_defaults=True)}
                for cid, e in request.edits.items()
            ],
        }


def _key(batch_id: str) -> str:
    """Artifact keys allow lowercase letters, digits and dashes only."""
    return "review-" + batch_id.lower().replace("_", "-")


def _publish(summary: dict[str, Any], markdown: str) -> None:
    key = _key(summary["batch_id"])
    create_markdown_artifact(key=key, markdown=markdown, description="review batch summary")
    create_table_artifact(
        key=f"{key}-items",
        table=[
            {
                "candidate_id": i["candidate_id"],
                "text": i.get("text"),
                "support": (i.get("support") or {}).get("count"),
                "counterexamples": (i.get("counterexamples") or {}).get("count"),
                "importance": i.get("importance"),
                "risk_flags": ", ".join(i.get("risk_flags") or []),
                "if_approved": (i.get("would") or {}).get("outcome"),
                "decision": i.get("decision"),
            }
            for i in summary["items"]
        ],
        description="review items",
    )


def _wait(
    settings: Settings, markdown: str, round_no: int, *, deployed: bool
) -> ReviewDecision | None:
    form = ReviewDecision.with_initial_data(description=markdown, reviewer="", decision="approve")
    timeout = int(settings.review.pause_timeout_hours * 3600)
    key = f"decision-{round_no}"
    if deployed:
        return suspend_flow_run(wait_for_input=form, timeout=timeout, key=key)
    return pause_flow_run(
        wait_for_input=form,
        timeout=timeout,
        poll_interval=settings.review.poll_interval_s,
        key=key,
    )


@flow(name="promotion-review", persist_result=True, log_prints=False)
def promotion_review(*, settings_data: dict[str, Any], batch_id: str) -> dict[str, Any]:
    """Publish one review batch, wait for decisions, commit them; returns the last decision."""
    settings = Settings.model_validate(settings_data)
    stores = open_stores(settings)
    logger = get_run_logger()
    context = FlowRunContext.get()
    flow_run = context.flow_run if context else None
    deployed = bool(flow_run and flow_run.deployment_id)
    if flow_run is not None:
        set_flow_run(stores.meta, batch_id, str(flow_run.id))
    last: dict[str, Any] = {"batch_id": batch_id, "status": "open"}
    round_no = 0
    while True:
        batch = get_batch(stores.meta, batch_id)
        if batch is None or batch.status != BatchStatus.open:
            last["status"] = batch.status if batch else "missing"
            break
        summary = batch_summary(stores, settings, batch_id, now=datetime.now(UTC))
        markdown = summary_markdown(summary)
        _publish(summary, markdown)
        try:
            answer = _wait(settings, markdown, round_no, deployed=deployed)
        except FlowPauseTimeout:
            logger.warning(
                "batch %s: no decision in time; it stays open until it expires", batch_id
            )
            last["status"] = "timed_out"
            break
        round_no += 1
        if answer is None:
            continue
        ctx = RunContext(now=datetime.now(UTC), actor=answer.reviewer)
        try:
            last = decide_batch(stores, settings, ctx, batch_id, answer.to_request()).as_dict()
        except ReviewClosed as exc:
            logger.warning("batch %s: %s", batch_id, exc)
            last = {"batch_id": batch_id, "status": exc.status, "error": str(exc)}
            break
        logger.info("batch %s: %s by %s", batch_id, answer.decision, answer.reviewer)
    set_flow_run(stores.meta, batch_id, None)
    if get_batch(stores.meta, batch_id) is not None:
        summary = batch_summary(stores, settings, batch_id, now=datetime.now(UTC))
        _publish(summary, summary_markdown(summary))
    return last


def run_promotion_review(settings: Settings, batch_id: str) -> dict[str, Any]:
    """Run the flow here and now (it pauses; decide in the UI or with `memctl review`)."""
    return promotion_review(settings_data=settings.model_dump(mode="json"), batch_id=batch_id)


def resume_review_run(flow_run_id: str, request: ReviewRequest) -> str:
    """Resume a run waiting on a batch with ``request``; says what happened, never raises for a
    run that is gone or no longer waiting (the decision is already committed by then)."""
    from prefect.exceptions import NotPausedError, ObjectNotFound

    try:
        resume_flow_run(UUID(flow_run_id), run_input=ReviewDecision.payload(request))
    except NotPausedError:
        return f"flow run {flow_run_id} is not waiting"
    except ObjectNotFound:
        return f"flow run {flow_run_id} not found on this Prefect server"
    except Exception as exc:  # the decision is committed already: report, do not fail
        return f"flow run {flow_run_id} not resumed: {type(exc).__name__}: {exc}"
    return f"resumed flow run {flow_run_id}"


@task(name="build-review-batches", cache_policy=NO_CACHE, retries=1, retry_delay_seconds=2)
def build_batches_task(
    *, settings_data: dict[str, Any], run_id: str, now_iso: str
) -> dict[str, Any]:
    """After scoring: expire stale batches, auto-approve what config allows, batch the queue."""
    settings = Settings.model_validate(settings_data)
    stores = open_stores(settings)
    ctx = RunContext(now=datetime.fromisoformat(now_iso), run_id=run_id)
    return build_review_batches(stores, settings, ctx).as_dict()
