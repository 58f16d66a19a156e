"""The promotion-review flow: publish a batch for people, wait for their decision, commit it.

The flow publishes the batch as artifacts and waits for a ``ReviewDecision`` (a Prefect
``RunInput``), which the Prefect UI renders as a form:

* run from a deployment (``review-dispatch`` starts one top-level run per undecided batch), it
  *suspends* (``suspend_flow_run``) until the batch expires: the process exits while people
  take days, and the runner or worker runs the flow again once the input arrives;
* run locally (``memctl review wait``), it *pauses* (``pause_flow_run``) for
  ``review.pause_timeout_hours``.

Privacy: the form's description and the artifacts are ``stages.review.card`` (ids and counts; no
memory text, no subject id); the items are read with ``memctl review show BATCH``. The answers
Prefect stored are deleted when the run ends (``drop_run_inputs``).

The decision goes to ``memory_core.stages.review.decide_batch``, the same code the CLI calls.
``memctl review approve`` decides and commits itself, then resumes a waiting run with the same
decision (``resume_review_run``); the run applies it again, which is a no-op, and finishes.
A decision that leaves items undecided waits again, until the batch is decided or expires; an
answer the batch cannot take (blank field, unknown item, an edit that widens) is refused with
a note on the next form, never a failed run. However the run ends, the batch is released.

``build_batches_task`` is the nightly flow's step that builds review batches after scoring.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal
from uuid import UUID

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.context import FlowRunContext
from prefect.exceptions import FlowPauseTimeout, Pause
from prefect.flow_runs import pause_flow_run, resume_flow_run, suspend_flow_run
from prefect.input import RunInput
from pydantic import BaseModel, ConfigDict, Field, model_validator

from flows.retry import pipeline_task
from memory_core.config import Settings
from memory_core.context import RunContext
from memory_core.errors import InvalidReview, ReviewClosed
from memory_core.stages.review import (
    ItemEdit,
    ReviewRequest,
    batch_summary,
    build_review_batches,
    card_rows,
    decide_batch,
    refusal_note,
    review_card,
)
from memory_core.stores import open_stores
from memory_core.stores.review import BatchStatus, get_batch, set_flow_run

__all__ = [
    "ItemChange",
    "ReviewDecision",
    "build_batches_task",
    "drop_run_inputs",
    "promotion_review",
    "resume_review_run",
    "run_promotion_review",
]


class ItemChange(BaseModel):
    """An edit of one item, as the Prefect form shows it (the CLI's ``--edit``).

    A form leaves fields it did not touch empty ("" or {}); those mean "no change", never a
    value, so an untouched optional field cannot turn into a refused edit."""

    model_config = ConfigDict(extra="forbid")
    candidate_id: str = Field(default="", description="the item to change")
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

    @model_validator(mode="before")
    @classmethod
    def _blank_is_unset(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v not in ("", {}, None)}
        return data

    def changes(self) -> dict[str, Any]:
        """The fields this edit sets (empty: a row the reviewer added and left blank)."""
        return self.model_dump(exclude={"candidate_id"}, exclude_none=True, exclude_defaults=True)


class ReviewDecision(RunInput):
    """The review form: who decides, approve or reject, which items, why, and edits.

    Only ``reviewer`` is required (the form and Prefect's server refuse a blank one); every
    other field may stay empty."""

    reviewer: str = Field(
        min_length=1, max_length=200, pattern=r"\S",
        description="your name or e-mail (required); recorded with the decision",
    )  # fmt: skip
    decision: Literal["approve", "reject"] = Field(
        default="approve", description="applies to the listed items"
    )
    items: list[str] = Field(
        default_factory=list, description="candidate ids; leave empty for every undecided item"
    )
    reason: str = Field(default="", description="why (required to reject)")
    edits: list[ItemChange] = Field(default_factory=list, description="optional per-item edits")

    def to_request(self) -> ReviewRequest:
        """The stage's request; raises ValueError (pydantic's) for an answer it cannot take."""
        edits = {e.candidate_id: ItemEdit(**e.changes()) for e in self.edits if e.changes()}
        return ReviewRequest(
            decision=self.decision,
            reviewer=self.reviewer.strip(),
            items=[i.strip() for i in self.items if i.strip()],
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


def _publish(card: str, rows: list[dict[str, Any]], batch_id: str) -> None:
    """Artifacts carry ids and counts only (``review_card``): Prefect keeps them in its own
    database (or a Cloud workspace), out of reach of ``memctl forget``."""
    key = _key(batch_id)
    create_markdown_artifact(key=key, markdown=card, description="review batch (ids, counts)")
    create_table_artifact(key=f"{key}-items", table=rows, description="review items (ids)")


def _wait(
    settings: Settings, card: str, round_no: int, *, deployed: bool, timeout_s: int
) -> ReviewDecision | None:
    form = ReviewDecision.with_initial_data(description=card)
    key = f"decision-{round_no}"
    if deployed:
        return suspend_flow_run(wait_for_input=form, timeout=timeout_s, key=key)
    return pause_flow_run(
        wait_for_input=form,
        timeout=int(settings.review.pause_timeout_hours * 3600),
        poll_interval=settings.review.poll_interval_s,
        key=key,
    )


_INPUT_PREFIXES = ("paused-decision-", "suspended-decision-")


def drop_run_inputs(flow_run_id: str) -> int:
    """Delete the form's stored schema, description and answers of a run from Prefect.

    A reviewer's answer (reason, edits) can quote memory text, and Prefect keeps it in its
    ``flow_run_input`` table; once the run has applied it (or is gone) nothing needs it."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    dropped = 0
    with get_client(sync_client=True) as client:
        for prefix in _INPUT_PREFIXES:
            try:
                rows = client.filter_flow_run_input(
                    UUID(flow_run_id), key_prefix=prefix, limit=1000, exclude_keys=set()
                )
            except ObjectNotFound:
                return dropped
            for row in rows:
                client.delete_flow_run_input(UUID(flow_run_id), row.key)
                dropped += 1
    return dropped


def _timeout_s(settings: Settings, batch: Any, *, deployed: bool) -> int:
    """A paused run holds a process: ``review.pause_timeout_hours``. A suspended one costs
    nothing while it waits, so it waits at least that long and at most until the batch
    expires (after a timeout Prefect fails the run and review-dispatch starts another)."""
    floor = int(settings.review.pause_timeout_hours * 3600)
    if not deployed:
        return floor
    return max(floor, int((batch.expires_at - datetime.now(UTC)).total_seconds()))


def _apply(
    stores: Any, settings: Settings, batch_id: str, answer: ReviewDecision
) -> dict[str, Any]:
    """Commit one answer; an answer the batch cannot take is refused (logged), never fatal."""
    logger = get_run_logger()
    try:
        request = answer.to_request()
        ctx = RunContext(now=datetime.now(UTC), actor=request.reviewer)
        result = decide_batch(stores, settings, ctx, batch_id, request).as_dict()
    except (ValueError, InvalidReview, ReviewClosed) as exc:
        why = refusal_note(exc)
        logger.warning("batch %s: answer refused, waiting for another: %s", batch_id, why)
        return {"batch_id": batch_id, "status": "open", "refused": why}
    logger.info("batch %s: %s by %s", batch_id, request.decision, request.reviewer)
    return result


@flow(name="promotion-review", persist_result=True, log_prints=False)
def promotion_review(*, settings_data: dict[str, Any], batch_id: str) -> dict[str, Any]:
    """Publish one review batch, wait for decisions, commit them; returns the last decision.

    Run from a deployment it suspends (the process exits; a worker runs it again from the
    top once answered, and each earlier ``suspend_flow_run`` returns its stored answer, which
    applies again as a no-op); run here it pauses. Whatever happens, the batch is released
    (``flow_run_id`` cleared) and the run's stored inputs are deleted when it ends."""
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
    suspended = False
    try:
        while True:
            batch = get_batch(stores.meta, batch_id)
            if batch is None or batch.status != BatchStatus.open:
                last["status"] = batch.status if batch else "missing"
                break
            summary = batch_summary(stores, settings, batch_id, now=datetime.now(UTC))
            card = review_card(summary, refused=last.get("refused"))
            _publish(card, card_rows(summary), batch_id)
            try:
                answer = _wait(
                    settings, card, round_no, deployed=deployed,
                    timeout_s=_timeout_s(settings, batch, deployed=deployed),
                )  # fmt: skip
            except FlowPauseTimeout:
                logger.warning(
                    "batch %s: no decision in time; it stays open until it expires", batch_id
                )
                last["status"] = "timed_out"
                break
            round_no += 1
            if answer is not None:
                last = _apply(stores, settings, batch_id, answer)
    except Pause:  # suspend_flow_run exits the process: the run is not over
        suspended = True
        raise
    finally:
        if not suspended:
            set_flow_run(stores.meta, batch_id, None)
            if flow_run is not None:
                drop_run_inputs(str(flow_run.id))
    if get_batch(stores.meta, batch_id) is not None:
        summary = batch_summary(stores, settings, batch_id, now=datetime.now(UTC))
        _publish(review_card(summary), card_rows(summary), batch_id)
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


@pipeline_task("build-review-batches")
def build_batches_task(
    *, settings_data: dict[str, Any], run_id: str, now_iso: str
) -> dict[str, Any]:
    """After scoring: expire stale batches, auto-approve what config allows, batch the queue."""
    settings = Settings.model_validate(settings_data)
    stores = open_stores(settings)
    ctx = RunContext(now=datetime.fromisoformat(now_iso), run_id=run_id)
    return build_review_batches(stores, settings, ctx).as_dict()
