"""Embedding off the write path: ingest stores vector-less episodes at once (the full-text leg
finds them, the vector leg skips them without error), the embed stage fills them in bulk
through the cache, and from then on the vector leg finds them too; clustering takes only
embedded episodes. Real Lance and DuckDB on tmp dirs, the hash embedder."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memory_core.config import load_settings
from memory_core.context import RunContext
from memory_core.embed import HashEmbedder
from memory_core.errors import EmbedderMismatch
from memory_core.models import content_hash
from memory_core.read.indexes import ensure_fts
from memory_core.recall import Recaller
from memory_core.stages.cluster import cluster_partition, list_clusters
from memory_core.stages.consolidate import STAGE, consolidate_partition, consolidation_plan
from memory_core.stages.embed import embed_episodes, pending_embedding
from memory_core.stages.forget.maintain import maintain_tables
from memory_core.stages.ingest import ingest_records
from memory_core.stages.partitions import Partition, plan_partitions
from memory_core.stores import open_stores
from memory_core.stores.ledger import get_watermarks
from memory_core.stores.schemas import TABLES
from tests.conftest import episode, lines_of

NOW = datetime(2026, 8, 1, tzinfo=UTC)


def _home(tmp_path, **embed):
    settings = load_settings(home=tmp_path / "home", embed={"model": "hash", **embed})
    return settings, open_stores(settings), HashEmbedder(settings.embed.dim)


def _episodes(n: int = 6) -> list[str]:
    return lines_of(
        *(
            episode(episode_id=f"e{i}", goal=f"printer jam number {i}",
                    text=f"zanzibar{i} cleared the tray", occurred_at=f"2026-07-0{1 + i % 9}T10:00:00Z")
            for i in range(n)
        )
    )  # fmt: skip


def _vectors(stores) -> dict[str, tuple[bool, str]]:
    rows = stores.lance.scan("episodes", columns=["episode_id", "vector", "embedding_version"])
    return {
        r["episode_id"]: (r["vector"] is not None, r["embedding_version"]) for r in rows.to_pylist()
    }


def test_ingest_writes_without_vectors_and_embed_fills_them(tmp_path):
    settings, stores, embedder = _home(tmp_path)
    assert settings.embed.at_ingest is False  # the default: the model is off the write path
    got = ingest_records(stores, settings, RunContext(now=NOW), _episodes(), embedder=embedder)
    assert got.inserted == 6 and got.pending_embedding == 6 and got.embedded == 0
    assert set(_vectors(stores).values()) == {(False, "")}
    assert pending_embedding(stores) == 6

    done = embed_episodes(stores, settings, RunContext(now=NOW), embedder=embedder)
    assert (done.pending_before, done.embedded, done.model_calls) == (6, 6, 6)
    assert set(_vectors(stores).values()) == {(True, embedder.version)}
    assert pending_embedding(stores) == 0
    stored = stores.lance.scan(
        "episodes", columns=["episode_id", "vector"], where="episode_id = 'e2'"
    )
    expected = embedder.embed(["x"])  # shape only; the exact text is ingest's embedding text
    assert len(stored.column("vector")[0].as_py()) == expected.shape[1]
    again = embed_episodes(stores, settings, RunContext(now=NOW), embedder=embedder)
    assert again.pending_before == 0 and again.embedded == 0


def test_embed_uses_the_cache_and_matches_synchronous_ingest(tmp_path):
    """Vectors filled later equal the vectors ingest would have computed itself."""
    settings, stores, embedder = _home(tmp_path)
    sync_settings, sync_stores, _ = _home(tmp_path / "sync", at_ingest=True)
    lines = _episodes()
    sync = ingest_records(sync_stores, sync_settings, RunContext(now=NOW), lines, embedder=embedder)
    assert sync.embedded == 6 and sync.pending_embedding == 0  # the old behaviour, kept
    ingest_records(stores, settings, RunContext(now=NOW), lines, embedder=embedder)
    embed_episodes(stores, settings, RunContext(now=NOW), embedder=embedder)

    def by_id(s):
        rows = s.lance.scan("episodes", columns=["episode_id", "vector"]).to_pylist()
        return {r["episode_id"]: r["vector"] for r in rows}

    assert by_id(stores) == by_id(sync_stores)
    # same texts again under new ids: all from the cache, no model call
    more = [line.replace('"episode_id": "e', '"episode_id": "x') for line in lines]
    ingest_records(stores, settings, RunContext(now=NOW), more, embedder=embedder)
    done = embed_episodes(stores, settings, RunContext(now=NOW), embedder=embedder)
    assert done.embedded == 6 and done.cache_hits == 6 and done.model_calls == 0


def _ids(result) -> list[str]:
    return [r["record_id"] for r in result.records]


def test_read_path_full_text_at_once_vector_leg_after_embed(tmp_path):
    settings, stores, embedder = _home(tmp_path)
    ingest_records(stores, settings, RunContext(now=NOW), _episodes(), embedder=embedder)
    ensure_fts(stores.lance.table("episodes"))  # nightly maintenance builds it once
    # a later ingest: rows the index has not seen yet are still searched (flat)
    ingest_records(stores, settings, RunContext(now=NOW), lines_of(episode(
        episode_id="late", goal="badge reader broken", text="quokka reset the badge reader",
    )), embedder=embedder)  # fmt: skip
    with Recaller.from_settings(settings, embedder=embedder, access_log=False) as reader:
        # the vector leg skips null vectors without error; the text leg finds them at once
        before = reader.recall("zanzibar3", tenant_id="acme", subject_id="u1", now=NOW)
        assert "e3" in _ids(before)
        assert "late" in _ids(reader.recall("quokka", tenant_id="acme", subject_id="u1", now=NOW))
        vec = reader._vector_leg(
            "episodes", reader._snapshot("episodes"), "tenant_id = 'acme'",
            embedder.embed(["printer jam number 3"])[0], 10,
        )  # fmt: skip
        assert vec.num_rows == 0

        embed_episodes(stores, settings, RunContext(now=NOW), embedder=embedder)
        vec = reader._vector_leg(
            "episodes", reader._snapshot("episodes"), "tenant_id = 'acme'",
            embedder.embed(["printer jam number 3"])[0], 10,
        )  # fmt: skip
        assert vec.num_rows == 7
        assert vec.column("episode_id")[0].as_py() == "e3"  # the nearest is the same text
        after = reader.recall("printer jam number 3", tenant_id="acme", subject_id="u1", now=NOW)
        assert _ids(after)[0] == "e3"


def test_fresh_home_without_a_full_text_index_still_finds_what_was_just_written(tmp_path):
    """Before the first nightly there is neither a vector nor a BM25 index: recall reads the
    caller's episodes still waiting for vectors and matches their terms, within the scope."""
    settings, stores, embedder = _home(tmp_path)
    ingest_records(stores, settings, RunContext(now=NOW), lines_of(
        episode(episode_id="mine", subject_id="u1", text="quokka jammed the badge reader"),
        episode(episode_id="theirs", subject_id="u2", text="quokka jammed the badge reader"),
        episode(episode_id="other", subject_id="u1", text="the vpn drops every hour"),
    ), embedder=embedder)  # fmt: skip
    kinds = {ix.index_type for ix in stores.lance.table("episodes").list_indices()}
    assert not kinds & {"FTS", "INVERTED"}
    with Recaller.from_settings(settings, embedder=embedder, access_log=False) as reader:
        found = reader.recall("quokka badge reader", tenant_id="acme", subject_id="u1", now=NOW)
        assert _ids(found)[0] == "mine" and "theirs" not in _ids(found)
        assert "other" not in _ids(found)  # no shared term, no match
        embed_episodes(stores, settings, RunContext(now=NOW), embedder=embedder)
        after = reader.recall("quokka badge reader", tenant_id="acme", subject_id="u1", now=NOW)
        assert _ids(after)[0] == "mine" and "theirs" not in _ids(after)


def test_embed_after_nightly_maintenance_refreshed_the_indices(tmp_path):
    """The second night: maintenance has run ``optimize_indices``; filling vectors must still
    work (a three-column Lance merge panicked there) and keep every other column."""
    settings, stores, embedder = _home(tmp_path)
    ingest_records(stores, settings, RunContext(now=NOW), _episodes(), embedder=embedder)
    embed_episodes(stores, settings, RunContext(now=NOW), embedder=embedder)
    maintain_tables(stores, settings, list(TABLES))
    ingest_records(stores, settings, RunContext(now=NOW), lines_of(episode(
        episode_id="late", goal="badge reader broken", text="quokka reset the badge reader",
    )), embedder=embedder)  # fmt: skip
    before = stores.lance.scan("episodes", where="episode_id = 'late'").to_pylist()[0]
    result = embed_episodes(stores, settings, RunContext(now=NOW), embedder=embedder)
    assert result.embedded == 1 and pending_embedding(stores) == 0
    after = stores.lance.scan("episodes", where="episode_id = 'late'").to_pylist()[0]
    assert after["vector"] is not None and after["embedding_version"] == embedder.version
    assert {k: v for k, v in after.items() if k not in ("vector", "embedding_version")} == {
        k: v for k, v in before.items() if k not in ("vector", "embedding_version")
    }
    assert stores.lance.count("episodes") == 7


def test_clustering_takes_only_embedded_episodes(tmp_path):
    settings, stores, embedder = _home(tmp_path)
    ingest_records(stores, settings, RunContext(now=NOW), _episodes(), embedder=embedder)
    part = Partition("acme", "it")
    first = cluster_partition(stores, settings.cluster, RunContext(now=NOW), part)
    assert first.episodes == 0 and first.new_members == 0  # nothing embedded: nothing placed
    embed_episodes(stores, settings, RunContext(now=NOW), embedder=embedder)
    second = cluster_partition(stores, settings.cluster, RunContext(now=NOW), part)
    assert second.new_members == 6


def test_fill_keeps_changes_made_meanwhile_and_never_resurrects(tmp_path):
    """Rows deleted or expired between the embed scan and its commit stay so."""
    settings, stores, embedder = _home(tmp_path)
    ingest_records(stores, settings, RunContext(now=NOW), _episodes(), embedder=embedder)
    import pyarrow as pa

    rows = stores.lance.scan("episodes", columns=["episode_id"])
    n = rows.num_rows
    vectors = embedder.embed(["v"] * n)
    stores.lance.delete("episodes", "episode_id = 'e1'")
    stores.lance.update("episodes", "episode_id = 'e2'", {"status": "expired"})
    stores.lance.fill_vectors("episodes", pa.table({
        "episode_id": rows.column("episode_id"),
        "embedding_version": pa.repeat(embedder.version, n),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), embedder.dim),
    }))  # fmt: skip
    after = stores.lance.scan("episodes", columns=["episode_id", "status", "vector"]).to_pylist()
    assert sorted(r["episode_id"] for r in after) == ["e0", "e2", "e3", "e4", "e5"]
    assert {r["episode_id"]: r["status"] for r in after}["e2"] == "expired"
    assert all(r["vector"] is not None for r in after)


def test_embed_refuses_another_models_home(tmp_path):
    settings, stores, embedder = _home(tmp_path)
    ingest_records(stores, settings, RunContext(now=NOW), _episodes(2), embedder=embedder)
    embed_episodes(stores, settings, RunContext(now=NOW), embedder=embedder, limit=1)
    assert pending_embedding(stores) == 1

    class Other(HashEmbedder):
        @property
        def version(self) -> str:
            return "other-model"

    with pytest.raises(EmbedderMismatch):
        embed_episodes(stores, settings, RunContext(now=NOW), embedder=Other(384))
    assert pending_embedding(stores) == 1  # nothing written


def _consolidate(stores, settings, now: datetime) -> list[dict]:
    """One night's consolidation through the library (plan, then cluster+mine per partition)."""
    ctx = RunContext(now=now, run_id=f"run_{now:%H%M}")
    plan = consolidation_plan(stores, settings, recluster=False)
    return [consolidate_partition(stores, settings, ctx, p.unit, recluster=False) for p in plan]


def _members(stores) -> set[str]:
    return {m for c in list_clusters(stores.meta, "acme") for m in c["member_ids"]}


def test_watermark_stops_before_an_episode_saved_between_embed_and_clustering(tmp_path):
    """A save after the night's embed task, before its planning, lands without a vector:
    clustering skips it, and the watermark must not pass it. The next night embeds it and
    clusters it although the partition got no other episode; the night after skips."""
    settings, stores, embedder = _home(tmp_path)
    t0, t1 = NOW, NOW + timedelta(hours=1)
    ingest_records(stores, settings, RunContext(now=t0), _episodes(), embedder=embedder)
    embed_episodes(stores, settings, RunContext(now=t0), embedder=embedder)  # the night's embed
    late = lines_of(episode(episode_id="late", goal="printer jam number 2", text="zanzibar2 again"))
    ingest_records(stores, settings, RunContext(now=t1), late, embedder=embedder)  # the MCP save
    assert pending_embedding(stores) == 1

    (night1,) = _consolidate(stores, settings, t1)  # planning and clustering after the save
    assert night1["skipped"] is False and night1["cluster"]["new_members"] == 6
    assert "late" not in _members(stores)
    (mark,) = get_watermarks(stores.meta, stage=STAGE).values()
    assert t0 <= mark.astimezone(UTC) < t1  # not past the unembedded episode
    (work,) = plan_partitions(stores)
    assert work.new_episodes == 1 and work.unembedded == 1

    t2 = NOW + timedelta(days=1)
    embed_episodes(stores, settings, RunContext(now=t2), embedder=embedder)  # next night
    (night2,) = _consolidate(stores, settings, t2)
    assert night2["skipped"] is False and night2["cluster"]["new_members"] == 1
    assert "late" in _members(stores)
    (mark,) = get_watermarks(stores.meta, stage=STAGE).values()
    assert mark.astimezone(UTC) == t1

    (night3,) = _consolidate(stores, settings, t2 + timedelta(days=1))  # still incremental
    assert night3 == {"partition": Partition("acme", "it").key, "skipped": True}
    assert [w.new_episodes for w in plan_partitions(stores)] == [0]


def test_fully_embedded_partitions_keep_their_input_hash(tmp_path):
    """The unembedded count joins a partition's input hash only while it is non-zero, so a
    home without pending vectors plans exactly as before (no re-consolidation on upgrade)."""
    settings, stores, embedder = _home(tmp_path)
    ingest_records(stores, settings, RunContext(now=NOW), _episodes(), embedder=embedder)
    (pending,) = plan_partitions(stores)
    embed_episodes(stores, settings, RunContext(now=NOW), embedder=embedder)
    (work,) = plan_partitions(stores)
    assert (pending.unembedded, work.unembedded) == (6, 0)
    assert pending.watermark_to == NOW - timedelta(microseconds=1)
    assert work.watermark_to == work.max_recorded_at == NOW
    expected = content_hash([["acme", "it"], 6, str(NOW), "k"])
    assert work.input_hash("k") == expected != pending.input_hash("k")
