"""Review batches: grouping and bounds, expiry, auto-approval, held conflicts, readers."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from promote_kit import at, consolidate, review_all, statuses, user_says

from memory_core.context import RunContext
from memory_core.errors import InvalidReview, NotFound, ReviewClosed
from memory_core.models import CandidateStatus
from memory_core.stages.review import (
    batch_summary,
    build_review_batches,
    decide_batch,
    summary_markdown,
)
from memory_core.stages.review.decisions import AUTO_REVIEWER, ItemEdit, ReviewRequest
from memory_core.stores.candidates import list_candidates
from memory_core.stores.facts import list_rows
from memory_core.stores.review import get_items, list_batches

JUNE_28 = at("2026-06-28T12:00:00Z")


def _prefs(n: int, *, tenant: str = "acme") -> list[dict]:
    """n subjects, each stating an editor twice (n preference candidates)."""
    eps = []
    for i in range(n):
        for j, day in enumerate((20, 25)):
            eps.append(
                user_says(
                    f"{tenant}-p{i}-{j}", f"u{i}", "editor", f"ed{i}",
                    when=f"2026-06-{day}T09:00:00Z", tenant=tenant,
                )
            )  # fmt: skip
    return eps


def _build(mem, now=JUNE_28):
    return build_review_batches(mem.stores, mem.settings, RunContext(now=now))


def test_batches_are_grouped_by_scope_and_kind_and_bounded(tmp_path, kit):
    mem = kit.open_mem(tmp_path / "h", review={"max_batch_items": 2})
    mem.ingest([*_prefs(3), *_prefs(1, tenant="globex")], now=JUNE_28)
    consolidate(mem, JUNE_28, cluster=False)
    consolidate(mem, JUNE_28, tenant="globex")
    result = _build(mem)
    assert result.items == 4
    assert result.partitions == {'["acme","it"]': 3, '["globex","it"]': 1}
    batches = list_batches(mem.stores.meta)
    assert sorted((b.tenant_id, b.item_count) for b in batches) == [
        ("acme", 1), ("acme", 2), ("globex", 1),
    ]  # fmt: skip
    assert {b.status for b in batches} == {"open"}
    # a second build does not batch what is already in review
    assert _build(mem).items == 0


def test_undecided_batch_expires_and_its_candidates_return_to_the_queue(mem):
    mem.ingest(_prefs(2), now=JUNE_28)
    consolidate(mem, JUNE_28, cluster=False)
    (first,) = _build(mem).created
    assert _build(mem, JUNE_28 + timedelta(days=13)).expired == []
    later = _build(mem, JUNE_28 + timedelta(days=14, seconds=1))
    assert later.expired == [first] and later.returned_to_queue == 2
    assert len(later.created) == 1 and later.created != [first]
    assert {i.decision for i in get_items(mem.stores.meta, first)} == {"expire"}
    assert set(statuses(mem).values()) == {CandidateStatus.pending_review}
    request = ReviewRequest(decision="approve", reviewer="alice")
    with pytest.raises(ReviewClosed, match="is expired; its candidates went back"):
        decide_batch(mem.stores, mem.settings, RunContext(now=JUNE_28), first, request)
    with mem.stores.meta.connect() as con:
        (n,) = con.execute(
            "SELECT count(*) FROM audit_log WHERE action = 'review_batch_expired'"
        ).fetchone()
    assert n == 1


def test_auto_approval_commits_user_preferences_only_above_threshold(tmp_path, kit):
    mem = kit.open_mem(
        tmp_path / "h",
        review={"auto_approve_user_semantic": True, "auto_approve_min_confidence": 0.9},
    )
    eps = _prefs(1)
    # u5 went back and forth: emacs holds 2 of the last 3 statements (0.67) -> a person decides
    eps += [
        user_says("x1", "u5", "editor", "vim", when="2026-06-20T09:00:00Z"),
        user_says("x2", "u5", "editor", "emacs", when="2026-06-21T09:00:00Z"),
        user_says("x3", "u5", "editor", "vim", when="2026-06-22T09:00:00Z"),
        user_says("x4", "u5", "editor", "emacs", when="2026-06-23T09:00:00Z"),
    ]
    mem.ingest(eps, now=JUNE_28)
    consolidate(mem, JUNE_28, cluster=False)
    result = _build(mem)
    assert [a["facts"] for a in result.auto_approved] == [1]
    (fact,) = list_rows(mem.stores.lance, "facts")
    assert fact["approver"] == AUTO_REVIEWER and fact["subject_id"] == "u0"
    (batch,) = list_batches(mem.stores.meta, status="open")
    assert batch.item_count == 1  # u5's emacs (0.67) waits for a person
    (auto,) = list_batches(mem.stores.meta, status="approved")
    assert auto.reviewer == AUTO_REVIEWER


def test_preference_object_may_be_corrected_only_to_what_the_user_said(mem):
    mem.ingest(
        [
            user_says("j1", "team-a", "owner", "Mnia", when="2026-06-20T09:00:00Z",
                      said="The owner is Mina."),
            user_says("j2", "team-a", "owner", "Mnia", when="2026-06-25T09:00:00Z",
                      said="Mina owns it."),
            user_says("k1", "team-b", "owner", "Kai", when="2026-06-20T09:00:00Z"),
            user_says("k2", "team-b", "owner", "Kai", when="2026-06-25T09:00:00Z"),
        ],
        now=JUNE_28,
    )  # fmt: skip
    consolidate(mem, JUNE_28, cluster=False)
    (batch_id,) = _build(mem).created
    cands = {c.subject_id: c.candidate_id for c in list_candidates(mem.stores.meta)}
    edits = {cands["team-a"]: ItemEdit(object="Mina"), cands["team-b"]: ItemEdit(object="Bob")}
    result = decide_batch(
        mem.stores, mem.settings, RunContext(now=JUNE_28), batch_id,
        ReviewRequest(decision="approve", reviewer="alice", edits=edits),
    )  # fmt: skip
    assert [r["object"] for r in list_rows(mem.stores.lance, "facts")] == ["Mina"]
    assert "the user never stated this object" in result.commit.refused[cands["team-b"]]


def test_conflict_is_held_for_the_reviewer_then_resolved(mem):
    mem.ingest(
        [
            user_says("j1", "team-a", "owner", "Jin", when="2026-06-20T09:00:00Z"),
            user_says("j2", "team-a", "owner", "Jin", when="2026-06-25T09:00:00Z"),
        ],
        now=JUNE_28,
    )
    consolidate(mem, JUNE_28, cluster=False)
    review_all(mem, JUNE_28)
    july = at("2026-07-16T12:00:00Z")
    mem.ingest(
        [user_says("k1", "team-a", "owner", "Kim", when="2026-07-16T09:00:00Z",
                   said="Actually the owner is Kim.")],
        now=july,
    )  # fmt: skip
    consolidate(mem, july, cluster=False)
    (batch_id,) = _build(mem, july).created
    (kim,) = [i.candidate_id for i in get_items(mem.stores.meta, batch_id)]
    # the reviewer claims Kim since June 1: earlier than Jin's June 20 -> held, nothing written
    early = ItemEdit(valid_from=at("2026-06-01T00:00:00Z"))
    result = decide_batch(
        mem.stores, mem.settings, RunContext(now=july), batch_id,
        ReviewRequest(decision="approve", reviewer="bob", edits={kim: early}),
    )  # fmt: skip
    assert "not later in valid time" in result.commit.conflicts[kim]
    assert [r["object"] for r in list_rows(mem.stores.lance, "facts")] == ["Jin"]
    assert statuses(mem)[kim] is CandidateStatus.pending_review
    # it comes back in the next batch, flagged, showing what it conflicts with
    (again,) = _build(mem, july).created
    summary = batch_summary(mem.stores, mem.settings, again, now=july)
    assert "conflict" in summary["items"][0]["risk_flags"]
    assert "held_conflict" in summary["items"][0] and "conflict" in summary_markdown(summary)
    resolve = ItemEdit(valid_from=at("2026-06-01T00:00:00Z"), supersede=True)
    decide_batch(
        mem.stores, mem.settings, RunContext(now=july), again,
        ReviewRequest(decision="approve", reviewer="carol", edits={kim: resolve}),
    )  # fmt: skip
    rows = {r["object"]: r for r in list_rows(mem.stores.lance, "facts")}
    assert rows["Kim"]["status"] == "active" and rows["Jin"]["status"] == "superseded"
    # Jin's interval is now empty: as of any valid time it was Kim (from June 1)
    assert rows["Jin"]["valid_to"] == rows["Jin"]["valid_from"]


def test_bad_requests_name_the_batch_item_and_field(mem):
    mem.ingest(_prefs(1), now=JUNE_28)
    consolidate(mem, JUNE_28, cluster=False)
    (batch_id,) = _build(mem).created
    ctx = RunContext(now=JUNE_28)
    with pytest.raises(NotFound, match="no review batch 'nope'; list batches with"):
        decide_batch(
            mem.stores, mem.settings, ctx, "nope", ReviewRequest(decision="approve", reviewer="a")
        )
    with pytest.raises(InvalidReview, match="reason: a rejection needs a reason"):
        decide_batch(
            mem.stores, mem.settings, ctx, batch_id, ReviewRequest(decision="reject", reviewer="a")
        )
    with pytest.raises(InvalidReview, match="item c9: items: not an item of this batch"):
        decide_batch(
            mem.stores, mem.settings, ctx, batch_id,
            ReviewRequest(decision="approve", reviewer="a", items=["c9"]),
        )  # fmt: skip
    decide_batch(
        mem.stores, mem.settings, ctx, batch_id,
        ReviewRequest(decision="reject", reviewer="a", reason="no"),
    )  # fmt: skip
    with pytest.raises(
        ReviewClosed, match="already decided \\(reject\\) by a; decisions are final"
    ):
        decide_batch(
            mem.stores, mem.settings, ctx, batch_id, ReviewRequest(decision="approve", reviewer="b")
        )


def test_readers_never_see_two_active_objects_for_one_key(mem):
    """Every Lance version of facts written by a chain of supersessions, and a live reader."""
    objects = ["Jin", "Mina", "Kai"]
    mem.ingest(
        [
            user_says("s0", "team-a", "owner", "Jin", when="2026-06-01T09:00:00Z"),
            user_says("s0b", "team-a", "owner", "Jin", when="2026-06-02T09:00:00Z"),
        ],
        now=JUNE_28,
    )
    consolidate(mem, JUNE_28, cluster=False)
    review_all(mem, JUNE_28)
    seen: list[int] = []
    stop = threading.Event()
    table = mem.stores.lance.table("facts")

    def read() -> None:
        where = "recorded_to IS NULL AND status = 'active' AND predicate = 'owner'"
        while not stop.is_set():
            seen.append(table.count_rows(where))
            time.sleep(0.005)  # leave the writer some CPU on a small machine

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for step, obj in enumerate(objects[1:], start=1):
            now = JUNE_28 + timedelta(days=step)
            mem.ingest(
                [user_says(f"s{step}", "team-a", "owner", obj, when=now.isoformat(),
                           said=f"Actually the owner is {obj} from now on.")],
                now=now,
            )  # fmt: skip
            consolidate(mem, now, cluster=False)
            review_all(mem, now)
    finally:
        stop.set()
        reader.join()
    assert seen and max(seen) == 1
    for version in range(1, table.version + 1):
        snapshot = mem.stores.lance.db.open_table("facts")
        snapshot.checkout(version)
        live = snapshot.count_rows("recorded_to IS NULL AND status = 'active'")
        assert live <= 1, version
    (current,) = list_rows(mem.stores.lance, "facts", status="active")
    assert current["object"] == "Kai"
    assert len(list_rows(mem.stores.lance, "facts")) == 3  # every owner kept, superseded


def test_a_candidate_changed_since_batching_is_not_decided(mem):
    from memory_core.stores.candidates import set_candidate_status

    mem.ingest(_prefs(2), now=JUNE_28)
    consolidate(mem, JUNE_28, cluster=False)
    (batch_id,) = _build(mem).created
    changed, kept = sorted(i.candidate_id for i in get_items(mem.stores.meta, batch_id))
    # mining saw new evidence: the candidate waits for a new score
    set_candidate_status(
        mem.stores.meta, {changed: (CandidateStatus.pending_score, "new evidence")}, now=JUNE_28
    )
    result = decide_batch(
        mem.stores, mem.settings, RunContext(now=JUNE_28), batch_id,
        ReviewRequest(decision="approve", reviewer="alice"),
    )  # fmt: skip
    assert result.stale == [changed] and list(result.commit.promoted) == [kept]
    assert statuses(mem)[changed] is CandidateStatus.pending_score
