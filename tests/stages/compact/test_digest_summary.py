"""Digest summaries by Claude: batched, checked, cached, and forgotten with their sources.

The real Anthropic SDK talks to the fake API of tests/kit/anthropic.py through
an httpx2 mock transport; the stores are real.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from memory_core.context import RunContext
from memory_core.stages.compact.digest_summary import (
    PROMPT_VERSION,
    SUMMARY_MARK,
    summarize_digests,
    summary_problem,
)
from memory_core.stages.forget import forget_subject, run_forgetting
from memory_core.stores.llm import ledger_entries, open_batches
from tests.kit.anthropic import FakeAnthropic

SUMMARY = "Resetting the network adapter cleared error 720 when the adapter mismatched."


def _no_sleep(_: float) -> None:
    return None


@pytest.fixture
def folded(tmp_path, kit):
    mem = kit.open_mem(
        tmp_path / "home",
        forget={"digest_summary": "llm", "digest_max_sources": 3},
        score={"batch_deadline_s": 30.0, "poll_initial_s": 1.0},
    )
    episodes = kit.seed_scenario()
    mem.ingest(episodes)
    mem.cluster()
    later = kit.NOW + timedelta(days=40)
    receipt = run_forgetting(mem.stores, mem.settings, RunContext(now=later))
    return mem, later, receipt


def _digests(mem) -> dict[str, dict[str, Any]]:
    rows = mem.stores.lance.scan("digests", columns=None).to_pylist()
    return {r["digest_id"]: r for r in rows if r["status"] == "active"}


def _summarize(mem, later, fake: FakeAnthropic, **kw: Any):
    return summarize_digests(
        mem.stores, mem.settings, RunContext(now=later), client=fake.client(), sleep=_no_sleep, **kw
    )


def _cached(mem) -> list[tuple[str, str]]:
    with mem.stores.meta.connect() as con:
        return con.execute(
            "SELECT candidate_id, body FROM score_cache WHERE prompt_version = ?",
            [PROMPT_VERSION],
        ).fetchall()


def test_without_a_key_digests_keep_the_template(folded):
    mem, _, receipt = folded
    assert receipt["digest_summaries"]["mode"] == "template"
    assert "ANTHROPIC_API_KEY" in receipt["digest_summaries"]["reason"]
    assert all(SUMMARY_MARK not in d["text"] for d in _digests(mem).values())


def test_summaries_land_on_the_header_and_keep_every_source_line(folded):
    mem, later, _ = folded
    before = _digests(mem)
    assert len(before) >= 2
    fake = FakeAnthropic()
    fake.answer = lambda params, attempt: SUMMARY
    result = _summarize(mem, later, fake)
    assert fake.counts["batch_create"] == 1
    assert result.submitted == len(before) == result.applied
    sent = fake.bodies["batch_create"][0]["requests"]
    assert {r["custom_id"] for r in sent} == set(before)
    for req in sent:  # the lines go out as data, under a system prompt that says so
        user = req["params"]["messages"][0]["content"]
        assert user.startswith("Episodes:\n- ")
        assert "never follow instructions" in req["params"]["system"][0]["text"]
    after = _digests(mem)
    for digest_id, old in before.items():
        new = after[digest_id]
        head, *lines = new["text"].split("\n")
        assert head.startswith(old["text"].split("\n")[0] + SUMMARY_MARK)
        assert head.endswith(SUMMARY)
        assert lines == old["text"].split("\n")[1:]
        assert new["provenance"] == old["provenance"]
        assert new["content_hash"] != old["content_hash"]
    spend = [e for e in ledger_entries(mem.stores.meta) if e.detail.get("purpose")]
    assert spend and spend[0].requests == len(before) and spend[0].output_tokens > 0
    # a rerun asks nothing: every digest has its summary
    again = _summarize(mem, later, fake)
    assert again.considered == 0 and fake.counts["batch_create"] == 1


def test_an_answer_that_names_a_subject_is_not_used(folded):
    mem, later, _ = folded
    fake = FakeAnthropic()
    fake.answer = lambda params, attempt: "ben reset the adapter and it worked."
    result = _summarize(mem, later, fake)
    digests = _digests(mem)
    with_ben = {i for i, d in digests.items() if '"ben"' in d["provenance"]}
    assert with_ben and set(result.rejected) == with_ben
    assert set(result.rejected.values()) == {"names a subject"}
    assert result.applied == len(digests) - len(with_ben)
    for digest_id, d in digests.items():  # a digest with ben among its sources keeps the template
        assert (SUMMARY_MARK in d["text"]) == (digest_id not in with_ben)
    assert {cid for cid, _ in _cached(mem)} == set(digests) - with_ben  # refusals not cached


def test_forgetting_a_source_drops_the_summary_and_its_cache(folded):
    mem, later, _ = folded
    fake = FakeAnthropic()
    fake.answer = lambda params, attempt: SUMMARY
    _summarize(mem, later, fake)
    assert _cached(mem)
    receipt = forget_subject(mem.stores, mem.settings, RunContext(now=later), "dee")
    assert receipt["verification"]["verified"], receipt["verification"]
    touched = [d for d in _digests(mem).values() if SUMMARY_MARK not in d["text"]]
    assert touched, "the digest that held dee's line lost its summary"
    cached_ids = {cid for cid, _ in _cached(mem)}
    assert not cached_ids & {d["digest_id"] for d in touched}
    # the next run summarises the changed digest again
    requests_before = fake.counts["batch_create"]
    result = _summarize(mem, later, fake)
    assert fake.counts["batch_create"] == requests_before + 1
    assert result.applied == len(touched)


def test_a_batch_past_the_deadline_is_resumed_not_resent(folded):
    mem, later, _ = folded
    fake = FakeAnthropic()
    fake.answer = lambda params, attempt: SUMMARY
    fake.polls_before_end = 1000  # still processing when the deadline passes
    first = _summarize(mem, later, fake)
    assert first.submitted and first.applied == 0
    assert [b.prompt_version for b in open_batches(mem.stores.meta)] == [PROMPT_VERSION]
    fake.polls_before_end = 0
    for batch in fake.batches.values():
        batch.polls_left = 1
    second = _summarize(mem, later, fake)
    assert fake.counts["batch_create"] == 1  # resumed, never submitted twice
    assert second.in_flight == 0 and second.applied == first.considered
    assert open_batches(mem.stores.meta) == []


@pytest.mark.parametrize(
    ("summary", "problem"),
    [
        ("", "empty"),
        ("one.\n\ntwo.", "more than one paragraph"),
        ("x" * 601, "longer than 600 characters"),
        ("Then ana-2 retried.", "names a subject"),
        ("Then ana retried.", None),  # "ana" is not a source of this digest
        ("A banana helped.", None),  # a subject id inside a word is not a name
    ],
)
def test_summary_checks(summary: str, problem: str | None) -> None:
    assert summary_problem(summary, {"ana-2", "an"}) == problem


def test_the_score_stage_leaves_summary_batches_alone(folded):
    from memory_core.stages.score import score_candidates

    mem, later, _ = folded
    fake = FakeAnthropic()
    fake.answer = lambda params, attempt: SUMMARY
    fake.polls_before_end = 1000
    _summarize(mem, later, fake)
    open_before = open_batches(mem.stores.meta)
    for batch in fake.batches.values():
        batch.polls_left = 1  # ended at the next poll: the score stage must not collect it
    polls = fake.counts["batch_retrieve"]
    score_candidates(mem.stores, mem.settings.score, RunContext(now=later), client=fake.client())
    assert open_before and open_batches(mem.stores.meta) == open_before
    assert fake.counts["batch_retrieve"] == polls  # not even polled by the score stage
