"""What a reviewer can say about a batch: approve or reject items, with edits that narrow.

Edits may narrow conditions (keep every condition, add more), correct a claim's object, rename a
procedure (to make it a new version of an existing one), record its effect and rollback, set
the valid-from time, and resolve a held conflict in favour of the item (``supersede``). They
can never widen what a memory claims: a wider rule would rest on evidence nobody saw.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from memory_core.errors import InvalidReview, ReviewClosed
from memory_core.models import Candidate, CandidateKind, ClaimSpec, ProcedureSpec, UtcDatetime
from memory_core.stages.promote.result import CommitResult
from memory_core.stores.review import BatchRow, BatchStatus, Decision, ItemRow

__all__ = [
    "AUTO_REVIEWER",
    "DecisionResult",
    "EditError",
    "ItemEdit",
    "ReviewRequest",
    "apply_edit",
    "is_twin",
    "validate_request",
]

AUTO_REVIEWER = "memctl:auto-approval"
"""The reviewer name of auto-approval; the gate refuses it for anything but preferences."""

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class ItemEdit(BaseModel):
    """A reviewer's changes to one item before it is committed; every field optional."""

    model_config = _FROZEN
    object: str | None = Field(
        default=None, min_length=1, max_length=2000, description="corrected object of a claim"
    )
    conditions: dict[str, str] | None = Field(
        default=None, description="narrowed conditions: all the old ones, plus more"
    )
    preconditions: dict[str, str] | None = Field(
        default=None, description="narrowed preconditions of a procedure"
    )
    name: str | None = Field(
        default=None, min_length=1, max_length=200, description="procedure name (its lineage)"
    )
    effect: str | None = Field(default=None, max_length=2000, description="what it achieves")
    rollback: str | None = Field(default=None, max_length=2000, description="how to undo it")
    valid_from: UtcDatetime | None = Field(default=None, description="start of valid time")
    supersede: bool = Field(
        default=False, description="resolve a held conflict: this item replaces the current one"
    )


class ReviewRequest(BaseModel):
    """One decision on a batch: the CLI and the Prefect form both end here."""

    model_config = _FROZEN
    decision: Literal["approve", "reject"]
    reviewer: str = Field(min_length=1, max_length=200, description="who decides (recorded)")
    items: list[str] = Field(
        default_factory=list, description="candidate ids; empty = every undecided item"
    )
    reason: str = Field(default="", max_length=2000, description="required to reject")
    edits: dict[str, ItemEdit] = Field(default_factory=dict, description="per candidate id")


class EditError(ValueError):
    """An edit that cannot apply to its item; ``field`` names the offending key."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


def is_twin(candidate: Candidate) -> bool:
    """A semantic insight mined alongside a procedure; it follows that procedure's decision."""
    return candidate.kind is CandidateKind.semantic and bool(candidate.stats.get("twin_of"))


def _narrowed(field: str, old: dict[str, str], new: dict[str, str]) -> dict[str, str]:
    for key, value in old.items():
        if new.get(key) != value:
            msg = f"an edit may only narrow: keep {key}={value} and add conditions, not change it"
            raise EditError(field, msg)
    return dict(sorted(new.items()))


def apply_edit(candidate: Candidate, edit: ItemEdit | None) -> Candidate:
    """The candidate as the reviewer approved it; raises EditError for an edit that cannot apply."""
    if edit is None:
        return candidate
    update: dict[str, Any] = {}
    stats = dict(candidate.stats)
    procedural = ("preconditions", "name", "effect", "rollback")
    wrong = procedural if candidate.kind is CandidateKind.semantic else ("object",)
    for name in wrong:
        if getattr(edit, name) is not None:
            raise EditError(name, f"does not apply to a {candidate.kind.value} candidate")
    if candidate.kind is CandidateKind.semantic and is_twin(candidate) and edit.object is not None:
        field, msg = "object", "an insight follows its procedure: edit the procedure instead"
        raise EditError(field, msg)
    if edit.conditions is not None:
        update["conditions"] = _narrowed("conditions", candidate.conditions, edit.conditions)
    if candidate.claim is not None and edit.object is not None:
        update["claim"] = ClaimSpec(predicate=candidate.claim.predicate, object=edit.object.strip())
    if candidate.procedure is not None and (edit.preconditions is not None or edit.name):
        pre = candidate.procedure.preconditions
        if edit.preconditions is not None:
            pre = _narrowed("preconditions", pre, edit.preconditions)
            added = {k: v for k, v in pre.items() if k not in candidate.conditions}
            update["conditions"] = {**candidate.conditions, **added}
        update["procedure"] = ProcedureSpec(
            name=(edit.name or candidate.procedure.name).strip(),
            steps=list(candidate.procedure.steps),
            preconditions=pre,
        )
    for name in ("effect", "rollback"):
        if getattr(edit, name) is not None:
            stats[name] = getattr(edit, name)
    if edit.valid_from is not None:
        stats["valid_from"] = edit.valid_from.isoformat()
    if edit.supersede:
        stats["force_supersede"] = True
    update["stats"] = stats
    return candidate.model_copy(update=update)


@dataclass
class DecisionResult:
    batch_id: str
    decision: str
    reviewer: str
    status: str
    decided: list[str] = field(default_factory=list)
    already_decided: list[str] = field(default_factory=list)
    followers: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    commit: CommitResult | None = None
    flow_run_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "batch_id": self.batch_id,
            "decision": self.decision,
            "reviewer": self.reviewer,
            "status": self.status,
            "decided": list(self.decided),
            "already_decided": list(self.already_decided),
            "twins_following": list(self.followers),
            "stale": list(self.stale),
            "commit": self.commit.as_dict() if self.commit else None,
            "flow_run_id": self.flow_run_id,
        }


def validate_request(
    batch: BatchRow, items: dict[str, ItemRow], request: ReviewRequest
) -> tuple[list[str], list[str]]:
    """(undecided targets, targets already decided the same way); raises on a bad request.

    Shared by candidate batches (``stage.decide_batch``) and record batches
    (``staleness.settle``): the same rules for what a reviewer may ask.
    """
    for cid in request.items:
        if cid not in items:
            msg = f"not an item of this batch (see `memctl review show {batch.batch_id}`)"
            raise InvalidReview(batch.batch_id, msg, candidate_id=cid, field="items")
    if request.decision == "reject" and not request.reason.strip():
        raise InvalidReview(batch.batch_id, "a rejection needs a reason (--reason)", field="reason")
    if batch.status == BatchStatus.expired:
        hint = (
            "its candidates went back to the queue; the next nightly run puts them in a new batch"
        )
        raise ReviewClosed(batch.batch_id, "expired", hint)
    decision = Decision.approve.value if request.decision == "approve" else Decision.reject.value
    targets = request.items or sorted(items)
    undecided = [t for t in targets if items[t].decision is None]
    same = [t for t in targets if items[t].decision == decision]
    other = [t for t in targets if items[t].decision not in (None, decision)]
    if other and (request.items or not undecided):
        first = items[other[0]]
        hint = (
            f"item {first.candidate_id} was already decided ({first.decision}) by "
            f"{first.reviewer}; decisions are final"
        )
        raise ReviewClosed(batch.batch_id, batch.status, hint)
    for cid in request.edits:
        if cid not in undecided or request.decision != "approve":
            msg = "edits apply only to items being approved now"
            raise InvalidReview(batch.batch_id, msg, candidate_id=cid, field="edits")
    return undecided, same
