"""A delete that removes whole fragments must not leave the rows' values in index files.

Compaction remaps an index row by row for the fragments it rewrites; a fragment deleted whole
is never rewritten, so an index built in one piece over it kept the deleted ids (B-tree pages)
and vectors (IVF_FLAT storage) through cleanup. Found by the LoCoMo eval's own deletion check.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa

from memory_core.stores.layout import segment_fts
from memory_core.stores.maintenance import rebuild_stale_indices

DIM = 8


def _dataset(path: Path) -> tuple[lance.LanceDataset, np.ndarray]:
    """Three fragments of 40 rows: ``keep`` ids in the first and last, ``gone`` in the middle."""
    ids = [f"{'gone' if 40 <= i < 80 else 'keep'}-{i:04d}" for i in range(120)]
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((120, DIM)).astype("float32")
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    table = pa.table({
        "id": ids,
        "text": [f"{x.split('-')[0]}word note {i}" for i, x in enumerate(ids)],
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), DIM),
    })  # fmt: skip
    ds = lance.write_dataset(table, path, max_rows_per_file=40)
    ds.create_scalar_index("id", "BTREE")
    ds.create_scalar_index("text", "INVERTED", with_position=False)
    ds.create_index("vector", "IVF_FLAT", num_partitions=2, metric="cosine")
    return ds, vectors


def _files_holding(path: Path, needle: bytes) -> list[str]:
    return sorted(
        str(p.relative_to(path))
        for p in path.rglob("*")
        if p.is_file() and needle in p.read_bytes()
    )


def _clean(ds: lance.LanceDataset) -> None:
    ds.cleanup_old_versions(older_than=timedelta(0), delete_unverified=True)


def test_indices_over_a_removed_fragment_are_rebuilt_or_dropped(tmp_path):
    path = tmp_path / "t.lance"
    ds, vectors = _dataset(path)
    ds.delete("id LIKE 'gone-%'")  # the middle fragment, whole
    assert len(ds.get_fragments()) == 2
    _clean(ds)
    assert _files_holding(path, b"gone-0041")  # what the fix is for: the B-tree kept it
    assert _files_holding(path, vectors[41].tobytes())  # and IVF_FLAT the vector

    done = rebuild_stale_indices(ds)
    _clean(ds)

    assert sorted(done) == ["id_idx:rebuilt", "text_idx:rebuilt", "vector_idx:dropped"]
    assert _files_holding(path, b"gone-0041") == []
    assert _files_holding(path, vectors[41].tobytes()) == []
    live = {f.fragment_id for f in ds.get_fragments()}
    assert all(set(ix["fragment_ids"]) <= live for ix in ds.list_indices())
    assert ds.to_table(filter="id = 'keep-0090'").num_rows == 1
    assert ds.to_table(full_text_query="keepword").num_rows == 80
    assert ds.to_table(full_text_query="goneword").num_rows == 0
    assert rebuild_stale_indices(ds) == []  # nothing stale: nothing done


def test_a_segmented_full_text_index_loses_the_removed_fragments_segment_alone(tmp_path):
    path = tmp_path / "t.lance"
    ds, _ = _dataset(path)
    ds.drop_index("vector_idx")
    ds.drop_index("id_idx")
    assert segment_fts(ds) == {"text_idx": 3}
    ds = lance.dataset(path)
    ds.delete("id LIKE 'gone-%'")
    assert rebuild_stale_indices(ds) == []  # its segment went with the fragment
    assert ds.to_table(full_text_query="keepword").num_rows == 80
    assert ds.to_table(full_text_query="goneword").num_rows == 0


def test_a_partial_delete_leaves_the_indices_to_compaction(tmp_path):
    path = tmp_path / "t.lance"
    ds, _ = _dataset(path)
    ds.delete("id IN ('gone-0041', 'keep-0001')")  # rows in two fragments, none removed whole
    assert rebuild_stale_indices(ds) == []
    ds.optimize.compact_files(materialize_deletions_threshold=0.0)
    _clean(ds)
    assert _files_holding(path, b"gone-0041") == []


def test_a_segment_spanning_a_removed_fragment_is_segmented_again(tmp_path):
    path = tmp_path / "t.lance"
    ds, _ = _dataset(path)
    ds.drop_index("vector_idx")
    ds.drop_index("id_idx")
    segment_fts(ds)
    ds = lance.dataset(path)
    late = pa.table({"id": [f"late-{i:04d}" for i in range(10)],
                     "text": [f"lateword note {i}" for i in range(10)],
                     "vector": ds.to_table(columns=["vector"], limit=10).column(0)})  # fmt: skip
    ds = lance.write_dataset(late, path, mode="append")
    ds.optimize.optimize_indices()  # the appended rows join the newest segment
    ds.delete("id LIKE 'late-%'")  # their fragment, whole: that segment is stale
    assert rebuild_stale_indices(ds) == ["text_idx:rebuilt"]
    live = {f.fragment_id for f in ds.get_fragments()}
    (index,) = [i for i in ds.describe_indices() if i.name == "text_idx"]
    assert len(index.segments) == len(live) == 3
    assert all(set(ix["fragment_ids"]) <= live for ix in ds.list_indices())
    assert ds.to_table(full_text_query="keepword").num_rows == 80
    assert ds.to_table(full_text_query="lateword").num_rows == 0
