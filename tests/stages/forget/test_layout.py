"""Deletion layout: maintenance regroups a table by tenant and subject, so one subject's
deletion rewrites a fragment or two instead of every fragment; rows, indices and deletion
completeness are unchanged."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lancedb.index import FTS

from memory_core.context import RunContext
from memory_core.read.indexes import ensure_fts
from memory_core.stages.forget import forget_subject
from memory_core.stages.forget.maintain import maintain_tables
from memory_core.stores.layout import FRAGMENT_ROWS_KEY, regroup, subject_share
from memory_core.stores.schemas import TABLES

NOW = datetime(2026, 8, 1, tzinfo=UTC)
SUBJECTS = [f"s{i}" for i in range(8)]


def _episodes(batch: int, n: int = 24) -> list[dict]:
    return [
        {
            "episode_id": f"b{batch}-{i}", "tenant_id": "acme" if i % 3 else "globex",
            "subject_id": SUBJECTS[i % len(SUBJECTS)], "namespace": "it",
            "occurred_at": (NOW - timedelta(days=2, minutes=i)).isoformat(),
            "source_role": "user", "goal": f"task {i % 5}", "actions": ["step one"],
            "outcome": "success", "text": f"batch {batch} note {i} zebra{i % len(SUBJECTS)}",
        }
        for i in range(n)
    ]  # fmt: skip


def _mem(tmp_path: Path):
    from tests.stages.conftest import open_mem

    mem = open_mem(
        tmp_path / "home",
        forget={"layout_fragment_rows": 20, "layout_max_share": 0.3, "access_log_min_age_s": 0},
    )
    for batch in range(5):  # five appends: every fragment holds every subject
        mem.ingest(_episodes(batch), now=NOW - timedelta(days=1))
    return mem


def _rows(ds) -> list[str]:
    cols = [c for c in ds.schema.names if c != "vector"]
    return sorted(
        json.dumps(r, default=str, sort_keys=True) for r in ds.to_table(columns=cols).to_pylist()
    )


def test_maintenance_regroups_and_a_deletion_rewrites_a_few_fragments(tmp_path):
    mem = _mem(tmp_path)
    table = mem.stores.lance.table("episodes")
    ensure_fts(table)
    before_rows = _rows(table.to_lance())
    spread = subject_share(table.to_lance())
    assert spread.share > 0.9  # each subject's rows sit in every fragment

    (report,) = maintain_tables(mem.stores, mem.settings, ["episodes"], vector_index=False)
    layout = report["layout"]
    assert layout["regrouped"]["fragments_after"] == 6  # 120 rows in fragments of 20
    assert layout["share_after"] < 0.25 < layout["share_before"]
    ds = mem.stores.lance.table("episodes").to_lance()
    assert ds.config()[FRAGMENT_ROWS_KEY] == "20"
    assert _rows(ds) == before_rows  # the same rows, only their order changed
    for index in ds.describe_indices():  # indices cover the new fragments
        assert ds.stats.index_stats(index.name)["num_indexed_rows"] == ds.count_rows()
    (fts,) = _fts_segments(ds)  # the full-text index: one segment per fragment
    assert len(fts) == 6 and layout["regrouped"]["fts_segments"] == {"text_idx": 6}
    again = maintain_tables(mem.stores, mem.settings, ["episodes"], vector_index=False)
    assert "regrouped" not in again[0]["layout"]  # grouped already: left alone

    receipt = forget_subject(mem.stores, mem.settings, RunContext(now=NOW), "s3", tenant_id="acme")
    assert receipt["verification"]["verified"] is True
    assert 1 <= receipt["fragments_rewritten"]["episodes"] <= 2  # not all six
    ds = mem.stores.lance.table("episodes").to_lance()
    (after,) = _fts_segments(ds)
    assert len(set(fts) & set(after)) >= 4  # only the rewritten fragments' postings remapped
    assert ds.stats.index_stats("text_idx")["num_indexed_rows"] == ds.count_rows()
    found = mem.stores.lance.table("episodes").search("zebra3", query_type="fts").limit(50)
    assert sorted({r["tenant_id"] for r in found.to_list()}) == ["globex"]  # acme's s3 gone
    for name in TABLES:  # no version of any table keeps the subject
        uri = mem.stores.lance.table(name).to_lance().uri
        for v in lance.dataset(uri).versions():
            rows = lance.dataset(uri, version=v["version"]).to_table(
                columns=["tenant_id", "subject_id"]
            )
            assert not any(
                r == {"tenant_id": "acme", "subject_id": "s3"} for r in rows.to_pylist()
            ), (name, v["version"])
    left = mem.stores.lance.scan("episodes", columns=["subject_id"], where="subject_id = 's3'")
    assert left.num_rows == 5  # globex's s3 stays


def _fts_segments(ds) -> list[list[str]]:
    """Segment uuids of each full-text index."""
    return [
        [seg.uuid for seg in index.segments]
        for index in ds.describe_indices()
        if str(index.index_type).lower() == "inverted"
    ]


def test_maintenance_segments_the_full_text_index_of_a_table_grouped_before(tmp_path):
    mem = _mem(tmp_path)
    table = mem.stores.lance.table("episodes")
    ensure_fts(table)
    maintain_tables(mem.stores, mem.settings, ["episodes"], vector_index=False)
    table.checkout_latest()
    table.create_index("text", config=FTS(), replace=True)  # one segment, as regroup once left
    assert [len(s) for s in _fts_segments(table.to_lance())] == [1]
    (report,) = maintain_tables(mem.stores, mem.settings, ["episodes"], vector_index=False)
    assert report["layout"]["fts_segments"] == {"text_idx": 6}
    ds = mem.stores.lance.table("episodes").to_lance()
    assert ds.stats.index_stats("text_idx")["num_indexed_rows"] == ds.count_rows()


def _table(path: Path, keys: list[tuple[str, str | None]], per_fragment: int) -> lance.LanceDataset:
    n = len(keys)
    table = pa.table({
        "id": [f"r{i}" for i in range(n)],
        "tenant_id": [t for t, _ in keys],
        "subject_id": pa.array([s for _, s in keys], pa.string()),
        "vector": pa.FixedSizeListArray.from_arrays(
            pa.array(np.arange(n * 2, dtype=np.float32)), 2),
    })  # fmt: skip
    ds = lance.write_dataset(table.slice(0, per_fragment), path)
    for start in range(per_fragment, n, per_fragment):
        ds = lance.write_dataset(table.slice(start, per_fragment), path, mode="append")
    return ds


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    keys=st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.one_of(st.none(), st.sampled_from(SUBJECTS))),
        min_size=1, max_size=60,
    ),
    per_fragment=st.integers(1, 13),
    fragment_rows=st.integers(1, 16),
)  # fmt: skip
def test_regroup_keeps_every_row_and_bounds_each_subjects_fragments(
    tmp_path_factory, keys, per_fragment, fragment_rows
):
    path = tmp_path_factory.mktemp("layout") / "t.lance"
    ds = _table(path, keys, per_fragment)
    before = sorted(map(str, ds.to_table().to_pylist()))
    regroup(ds, fragment_rows)
    after_ds = lance.dataset(path)
    assert sorted(map(str, after_ds.to_table().to_pylist())) == before
    assert all(f.count_rows() <= fragment_rows for f in after_ds.get_fragments())
    rows = after_ds.to_table(columns=["tenant_id", "subject_id"], with_row_address=True)
    seen: dict[tuple, set[int]] = {}
    for r in rows.to_pylist():
        seen.setdefault((r["tenant_id"], r["subject_id"]), set()).add(r["_rowaddr"] >> 32)
    for key, fragments in seen.items():
        count = sum(1 for k in keys if k == key)
        # contiguous: at most the fragments its rows need, plus one it starts inside
        assert len(fragments) <= -(-count // fragment_rows) + 1, key


def test_maintenance_merges_small_fragments_only(tmp_path: Path) -> None:
    """A table not regrouped: compaction merges the fragments below its merge target (a
    night's small appends) into one and leaves full fragments as written (Lance's default
    target made every fragment of a 1M-row table a candidate); the rows are unchanged."""
    from memory_core.stores.layout import compaction_options

    uri = str(tmp_path / "t.lance")
    full = [pa.table({"k": pa.array(range(i * 100, i * 100 + 100))}) for i in range(3)]
    ds = lance.write_dataset(full[0], uri)
    for part in full[1:]:
        ds = lance.write_dataset(part, uri, mode="append")
    for i in range(6):  # small appends
        ds = lance.write_dataset(pa.table({"k": pa.array([1000 + i * 2, 1001 + i * 2])}), uri,
                                 mode="append")  # fmt: skip
    kept = {f.fragment_id for f in ds.get_fragments() if f.count_rows() == 100}
    assert compaction_options(ds)["target_rows_per_fragment"] >= 65_536  # nothing set: default
    ds.optimize.compact_files(**compaction_options(ds, merge_rows=100))
    ds = lance.dataset(uri)
    sizes = {f.fragment_id: f.count_rows() for f in ds.get_fragments()}
    assert kept <= set(sizes)  # the full fragments were not rewritten
    assert sorted(sizes.values()) == [12, 100, 100, 100]
    assert sorted(ds.to_table().column("k").to_pylist()) == sorted(
        [*range(300), *range(1000, 1012)]
    )
    ds.update_config({FRAGMENT_ROWS_KEY: "40"})  # a regrouped table keeps its own target
    assert compaction_options(ds, merge_rows=100)["target_rows_per_fragment"] == 40
