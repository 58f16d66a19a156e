"""What a review batch shows Prefect (the form's description, the artifacts): ids and counts only.

Prefect keeps these in its own database, out of reach of ``memctl forget``; so no memory text
and no subject id may be in them, whatever the batch holds (a property over every free-text
field of a summary), and a refused answer is explained by field and id, never by its values.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field, ValidationError

from memory_core.errors import InvalidReview, ReviewClosed
from memory_core.stages.review import card_rows, refusal_note, review_card

NEEDLE = "zq-secret-7"  # stands for any memory text or subject id


def _item(n: int, free: str, flags: list[str], decision: str | None) -> dict[str, Any]:
    episode = {
        "episode_id": f"e{n}", "subject_id": free, "source_role": "user",
        "occurred_at": "2026-06-01T00:00:00+00:00", "goal": free, "outcome": free, "said": free,
    }  # fmt: skip
    evidence = {"count": 2, "subjects": 1, "episodes": [episode]}
    return {
        "candidate_id": f"cand_{n:024d}", "kind": "semantic", "subject_id": free, "text": free,
        "claim": {"predicate": free, "object": free}, "conditions": {free: free},
        "confidence": 0.8, "importance": 3, "scorer": "heuristic", "rationale": free,
        "risk_flags": flags, "support": evidence, "counterexamples": evidence,
        "would": {"outcome": "supersede", "reason": free, "supersedes": {"object": free}},
        "held_conflict": free, "twins": [{"candidate_id": "cand_t", "claim": {"object": free}}],
        "decision": decision, "reviewer": free, "decision_reason": free, "edits": {"o": free},
        "status": "pending_review", "status_reason": free,
    }  # fmt: skip


def _summary(items: list[dict[str, Any]], *, records: bool = False) -> dict[str, Any]:
    out = {
        "batch_id": "batch_abc", "tenant_id": "acme", "namespace": "it", "kind": "semantic",
        "status": "open", "item_count": len(items),
        "undecided": sum(1 for i in items if not i.get("decision")),
        "created_at": "2026-06-01T00:00:00+00:00", "expires_at": "2026-06-15T00:00:00+00:00",
        "reviewer": NEEDLE, "reason": NEEDLE, "flow_run_id": None, "items": items,
    }  # fmt: skip
    if records:
        out.update(records=True, approve="keep", reject="retire", kind="revalidate")
    return out


free_text = st.text(min_size=0, max_size=30).map(lambda s: f"{s}{NEEDLE}{s}")


@settings(max_examples=60, deadline=None)
@given(
    free=free_text,
    flags=st.lists(st.sampled_from(["conflict", "sensitive", "instruction_like"]), max_size=3),
    decisions=st.lists(st.sampled_from([None, "approve", "reject"]), min_size=1, max_size=4),
    records=st.booleans(),
)
def test_the_card_and_rows_never_carry_memory_text_or_subject_ids(
    free: str, flags: list[str], decisions: list[str | None], records: bool
) -> None:
    items = [_item(n, free, flags, d) for n, d in enumerate(decisions)]
    if records:
        items = [
            {"candidate_id": i["candidate_id"], "record_id": i["candidate_id"], "table": "facts",
             "status": "stale", "subject_id": free, "text": free, "evidence": {"said": free},
             "decision": i["decision"], "reviewer": free, "decision_reason": free}
            for i in items
        ]  # fmt: skip
    summary = _summary(items, records=records)
    card = review_card(summary, refused="reason: a rejection needs a reason")
    rows = json.dumps(card_rows(summary))
    assert NEEDLE not in card and NEEDLE not in rows
    assert "memctl review show batch_abc" in card  # where the items are read
    for item in items:  # every item is named by its id
        assert item["candidate_id"] in card and item["candidate_id"] in rows
    assert f"{len(items)} in all" in card


def test_the_card_counts_decisions_flags_and_outcomes() -> None:
    items = [
        _item(1, "x", ["conflict"], None),
        _item(2, "y", ["conflict", "sensitive"], "approve"),
        _item(3, "z", [], "reject"),
    ]
    card = review_card(_summary(items))
    assert "- decisions: approve 1, reject 1, undecided 1" in card
    assert "- risk flags: conflict 2, sensitive 1" in card
    assert "- if approved now: supersede 3" in card
    assert "not applied" not in card
    assert "**Your last answer was not applied:** items: bad." in review_card(
        _summary(items), refused="items: bad"
    )


class _Edit(BaseModel):
    object: str = Field(min_length=1)


def test_a_refusal_names_the_field_and_item_never_the_values() -> None:
    try:
        _Edit(object="")
    except ValidationError as exc:
        assert refusal_note(exc) == "invalid object"
    widened = InvalidReview(
        "batch_abc", f"keep os={NEEDLE}", candidate_id="cand_1", field="edits.conditions"
    )
    note = refusal_note(widened)
    assert NEEDLE not in note and "edits.conditions of item cand_1" in note
    unknown = InvalidReview(
        "batch_abc", "not an item of this batch", candidate_id="c9", field="items"
    )
    assert refusal_note(unknown) == "items of item c9: not an item of this batch"
    closed = ReviewClosed("batch_abc", "approved", f"item c1 was decided by {NEEDLE}")
    assert refusal_note(closed) == "the batch is approved; decisions are final"
