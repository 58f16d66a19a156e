"""A later statement, extracted from a conversation, contests or supersedes a promoted fact by
the rules that already exist (claims path and staleness/contested)."""

from __future__ import annotations

from typing import Any

from extract_kit import extract_answer, turn
from promote_kit import at, consolidate, review_all

from memory_core.context import RunContext
from memory_core.stages.extract import extract_facts
from memory_core.stages.staleness import run_staleness
from memory_core.stores.facts import list_rows
from tests.kit.anthropic import FakeAnthropic

NOW = at("2026-08-01T12:00:00Z")
LATER = at("2026-08-05T12:00:00Z")
LAST = at("2026-08-09T12:00:00Z")


def _chat(eid: str, session: str, day: int, text: str) -> dict[str, Any]:
    return turn(eid, session, 0, text, namespace="it",
                occurred_at=f"2026-07-{day:02d}T09:00:00Z")  # fmt: skip


def _night(mem: Any, now: Any) -> None:
    # one fake per home across nights: a new one would reuse batch ids already collected
    fake = mem.__dict__.setdefault("_fake_anthropic", FakeAnthropic())
    fake.answer = extract_answer
    extract_facts(mem.stores, mem.settings, RunContext(now=now), client=fake.client(),
                  embedder=mem.embedder, sleep=lambda s: None)  # fmt: skip
    consolidate(mem, now, cluster=False)


def _current(mem: Any) -> dict[str, dict[str, Any]]:
    rows = list_rows(mem.stores.lance, "facts")
    return {r["object"]: r for r in rows if r["status"] != "superseded"}


def test_weaker_extracted_contradiction_contests_explicit_one_supersedes(mem: Any) -> None:
    mem.ingest([_chat("w1", "s1", 1, "I'd like a window seat."),
                _chat("w2", "s2", 2, "Window seat again, please.")])  # fmt: skip
    _night(mem, NOW)
    review_all(mem, NOW)
    window = _current(mem)["window"]
    assert window["status"] == "active" and window["predicate"] == "prefers_seat"

    mem.ingest([_chat("x1", "s3", 20, "Hm, maybe an aisle seat this time.")], now=LATER)
    _night(mem, LATER)
    done = run_staleness(mem.stores, mem.settings, RunContext(now=LATER))
    assert done["contested"]["contested"] == {window["fact_id"]: ["x1"]}
    assert _current(mem)["window"]["status"] == "contested"

    mem.ingest([_chat("x2", "s4", 25, "Actually, from now on I want an aisle seat.")], now=LAST)
    _night(mem, LAST)
    review_all(mem, LAST, kind="semantic")
    rows = _current(mem)
    assert rows["aisle"]["status"] == "active" and "window" not in rows
    history = [r for r in list_rows(mem.stores.lance, "facts") if r["object"] == "window"]
    assert {r["status"] for r in history} == {"superseded"}
