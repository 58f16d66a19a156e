"""Compaction of extracted conversation sessions: one digest per whole session, clustered or
not, with one line and one lineage edge per turn; sessions not yet extracted are not folded."""

from __future__ import annotations

import json
from datetime import timedelta

from memory_core.config import Settings
from memory_core.context import RunContext
from memory_core.stages.compact import compact_episodes
from memory_core.stages.extract import extract_facts
from memory_core.stores import Stores
from memory_core.stores.lineage import sources_of
from tests.kit.anthropic import FakeAnthropic
from tests.stages.extract.extract_kit import NOW, conversation, extract_answer, ingest, turn

LATER = NOW + timedelta(days=90)


def _extract(stores: Stores, settings: Settings) -> None:
    fake = FakeAnthropic()
    fake.answer = extract_answer
    ctx = RunContext(now=NOW, run_id="x1")
    extract_facts(stores, settings, ctx, client=fake.client(), sleep=lambda s: None)


def test_extracted_sessions_fold_whole_and_unextracted_ones_wait(
    stores: Stores, settings: Settings
) -> None:
    episodes = conversation()
    ingest(stores, settings, episodes)
    _extract(stores, settings)
    late = [turn("e1", "s4", 100, "I am vegetarian"), turn("e2", "s4", 101, "thanks")]
    ingest(stores, settings, late)  # after extraction: s4 is not extracted yet
    result = compact_episodes(stores, settings, RunContext(now=LATER))
    digests = stores.lance.scan("digests", columns=None).to_pylist()
    by_session: dict[str, set[str]] = {}
    for e in episodes:
        by_session.setdefault(e["session_id"], set()).add(e["episode_id"])
    assert len(digests) == len(by_session) == result.digests  # one digest per session
    for d in digests:
        prov = json.loads(d["provenance"])
        ids = {p["source_id"] for p in prov}
        assert ids in by_session.values()
        assert len(d["text"].split("\n")) - 1 == len(prov) == d["episode_count"]
        assert d["cluster_id"] is None
        assert {e.source_id for e in sources_of(stores.meta, d["digest_id"])} == ids
    left = set(stores.lance.scan("episodes", columns=["episode_id"]).column(0).to_pylist())
    assert left == {"e1", "e2"}  # not extracted, not clustered: not folded
    again = compact_episodes(stores, settings, RunContext(now=LATER))
    assert again.digests == 0 and again.episodes_folded == 0


def test_long_sessions_are_chunked_at_the_session_limit(stores: Stores, settings: Settings) -> None:
    settings = settings.model_copy(
        update={"forget": settings.forget.model_copy(update={"session_digest_max_sources": 3})}
    )
    episodes = [turn(f"k{i}", "long", i, f"turn number {i}") for i in range(7)]
    ingest(stores, settings, episodes)
    _extract(stores, settings)
    result = compact_episodes(stores, settings, RunContext(now=LATER))
    sizes = sorted(d["episode_count"] for d in stores.lance.scan("digests").to_pylist())
    assert sizes == [1, 3, 3] and result.episodes_folded == 7
