"""Compaction: clustered episodes past retention become digests that keep lineage."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from memory_core.context import RunContext
from memory_core.stages.compact import compact_episodes
from memory_core.stages.forget import forget_subject, revoke_source, run_forgetting
from memory_core.stores.lineage import sources_of


@pytest.fixture
def compacted(mem, kit):
    episodes = kit.seed_scenario()
    mem.ingest(episodes)
    mem.cluster()
    later = kit.NOW + timedelta(days=40)
    receipt = run_forgetting(mem.stores, mem.settings, RunContext(now=later))
    return mem, episodes, receipt, later


def _digests(mem):
    return mem.stores.lance.scan("digests", columns=None).to_pylist()


def test_episodes_fold_into_digests_with_every_source(compacted):
    mem, episodes, receipt, _ = compacted
    assert receipt["compaction"]["episodes_folded"] == len(episodes)
    assert mem.stores.lance.count("episodes") == 0
    digests = _digests(mem)
    assert 1 <= len(digests) < len(episodes)
    by_id = {e["episode_id"]: e for e in episodes}
    folded = set()
    for d in digests:
        prov = json.loads(d["provenance"])
        lines = d["text"].split("\n")[1:]
        assert len(lines) == len(prov) == d["episode_count"]
        for p, line in zip(prov, lines, strict=True):
            source = by_id[p["source_id"]]
            assert p["content_hash"] and p["subject_id"] == source["subject_id"]
            assert source["text"] in line and f" {source['subject_id']}: " in line
        assert d["success_count"] == sum(
            by_id[p["source_id"]]["outcome"] == "success" for p in prov
        )
        assert d["failure_count"] == sum(
            by_id[p["source_id"]]["outcome"] == "failure" for p in prov
        )
        assert d["subject_id"] is None  # several subjects: tenant scope
        assert {e.source_id for e in sources_of(mem.stores.meta, d["digest_id"])} == {
            p["source_id"] for p in prov
        }
        folded |= {p["source_id"] for p in prov}
    assert folded == set(by_id)
    with mem.stores.meta.connect() as con:
        assert con.execute("SELECT count(*) FROM cluster_members").fetchone()[0] == 0


def test_rerun_is_a_no_op(compacted):
    mem, _, _, later = compacted
    before = sorted((d["digest_id"], d["content_hash"]) for d in _digests(mem))
    again = compact_episodes(mem.stores, mem.settings, RunContext(now=later))
    assert again.digests == 0 and again.episodes_folded == 0
    assert sorted((d["digest_id"], d["content_hash"]) for d in _digests(mem)) == before


def test_forgetting_a_subject_takes_its_lines_out_of_digests(compacted, kit):
    mem, episodes, _, later = compacted
    receipt = forget_subject(mem.stores, mem.settings, RunContext(now=later), "ben")
    assert receipt["verification"]["verified"], receipt["verification"]
    assert receipt["derived"].get("digest_sources_removed", 0) >= 1
    remaining = {e["episode_id"] for e in episodes if e["subject_id"] != "ben"}
    seen = set()
    for d in _digests(mem):
        assert " ben: " not in d["text"] and '"ben"' not in d["provenance"]
        seen |= {p["source_id"] for p in json.loads(d["provenance"])}
        assert d["episode_count"] == len(d["text"].split("\n")) - 1
    assert seen == remaining


def test_revoking_a_folded_episode_removes_its_line(compacted, kit):
    mem, _, _, later = compacted
    result = revoke_source(mem.stores, mem.settings, RunContext(now=later), "bad0", reason="wrong")
    assert [c["kind"] for c in result.receipt["changed"]] == ["digest"]
    assert all("bad0" not in d["provenance"] for d in _digests(mem))


def test_maintenance_gives_digests_a_full_text_index_that_finds_a_source(compacted):
    mem, episodes, receipt, _ = compacted
    digests_maintained = [m for m in receipt["maintenance"] if m["table"] == "digests"]
    assert digests_maintained and digests_maintained[0]["fts_index"] == "built"
    table = mem.stores.lance.table("digests")
    assert any(ix.index_type in ("FTS", "INVERTED") for ix in table.list_indices())
    word = episodes[0]["text"].split()[0]
    hits = table.search(word, query_type="fts").limit(5).to_list()
    assert hits and any(word in h["text"] for h in hits)


def test_tables_left_out_of_fts_tables_get_no_full_text_index(tmp_path, kit):
    mem = kit.open_mem(tmp_path / "h", forget={"fts_tables": ["digests"]})
    mem.ingest(kit.seed_scenario())
    mem.cluster()
    receipt = run_forgetting(mem.stores, mem.settings, RunContext(now=kit.NOW + timedelta(days=40)))
    by_table = {m["table"]: m["fts_index"] for m in receipt["maintenance"]}
    assert by_table == {"episodes": "unchanged", "digests": "built"}
    indexed = {ix.index_type for ix in mem.stores.lance.table("episodes").list_indices()}
    assert not indexed & {"FTS", "INVERTED"}
