"""Table layout for deletion: rows grouped by (tenant, subject) so one subject's rows sit in
one or two fragments, and deleting them rewrites a small share of the table.

Why: deletion is only real once compaction rewrites every fragment holding a deleted row
(``maintenance.py``). Ingest appends fragments in arrival order, so every fragment holds a
few rows of every subject, and one subject's deletion at 1M rows rewrote all 1M rows and their
full-text index (24.2 s, the bare Lance floor; bench/forget.py). Two things fix the floor:

* ``regroup``: rewrite the table in (tenant_id, subject_id) order into fragments of
  ``fragment_rows`` rows, committed as one Lance ``Rewrite`` of all old fragments (readers
  see the old or the new layout, never half); the indices then cover the new fragments
  through ``optimize_indices`` (which rebuilt them from the new fragments here: indexed rows
  equal the table's rows afterwards), except a full-text index, which is rebuilt as one
  segment per fragment (``segment_fts``) so that a delete re-indexes one fragment's rows.
  Rows are read through ``take`` in key order, so memory holds one output fragment at a
  time, not the table.
* a compaction target of ``fragment_rows`` (stored in the table's config, read by every
  compaction: ``compaction_options``): with Lance's default target (1M rows) every fragment
  below it is a candidate and adjacent ones are merged, so a delete in one fragment pulled
  all its small neighbours into the rewrite and undid the grouping.

``subject_share`` says whether a table needs it: the mean, over subjects, of the share of the
table's rows a deletion of that subject rewrites (the sizes of the fragments holding its rows).
Fresh ingest appends mixed fragments and raises it; maintenance regroups once it exceeds
``forget.layout_max_share``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from lance import LanceOperation
from lance.fragment import write_fragments

__all__ = [
    "FRAGMENT_ROWS_KEY",
    "MERGE_ROWS",
    "LayoutStats",
    "compaction_options",
    "fts_in_one_segment",
    "fts_indices",
    "regroup",
    "segment_fts",
    "subject_share",
]

logger = logging.getLogger(__name__)

FRAGMENT_ROWS_KEY = "memctl.fragment_rows"
# The compaction target of a table not regrouped: fragments below it are merged (a day's
# small appends), fragments at it are left alone. Lance's default (1,048,576) made a 1M-row
# table of 10k-row fragments one candidate group, so every maintenance pass planned a rewrite
# of the whole table to merge a night's appends; at this target it rewrites the appends and
# at most one partly filled fragment.
MERGE_ROWS = 65_536
_KEY_COLUMNS = ["tenant_id", "subject_id"]


@dataclass
class LayoutStats:
    rows: int
    fragments: int
    subjects: int
    share: float  # mean share of rows one subject's deletion rewrites
    max_fragments_per_subject: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "fragments": self.fragments,
            "subjects": self.subjects,
            "share": round(self.share, 4),
            "max_fragments_per_subject": self.max_fragments_per_subject,
        }


def compaction_options(
    ds: lance.LanceDataset, base: dict[str, Any] | None = None, *, merge_rows: int = MERGE_ROWS
) -> dict[str, Any]:
    """``base`` plus the table's own fragment target (set by ``regroup``), else ``merge_rows``:
    small fragments are merged, full ones are never rewritten only to grow them."""
    out = dict(base or {})
    rows = ds.config().get(FRAGMENT_ROWS_KEY)
    out.setdefault("target_rows_per_fragment", int(rows) if rows else merge_rows)
    return out


def _keys(ds: lance.LanceDataset) -> pa.Table:
    """(tenant, subject, fragment id) of every row; rows without a subject are skipped."""
    table = ds.to_table(columns=_KEY_COLUMNS, with_row_address=True)
    fragment = pc.shift_right(table.column("_rowaddr"), 32)
    return pa.table(
        {
            "tenant_id": table.column("tenant_id"),
            "subject_id": table.column("subject_id"),
            "fragment": fragment,
        }
    ).filter(pc.is_valid(table.column("subject_id")))


def subject_share(ds: lance.LanceDataset) -> LayoutStats:
    """How much of the table a typical subject's deletion rewrites, in this layout."""
    rows = ds.count_rows()
    fragments = ds.get_fragments()
    sizes = {f.fragment_id: f.count_rows() for f in fragments}
    if not rows or "subject_id" not in ds.schema.names:
        return LayoutStats(rows, len(fragments), 0, 0.0, 0)
    keys = _keys(ds)
    if not keys.num_rows:
        return LayoutStats(rows, len(fragments), 0, 0.0, 0)
    pairs = keys.group_by(["tenant_id", "subject_id", "fragment"]).aggregate([])
    frag_rows = np.asarray([sizes.get(int(f), 0) for f in pairs.column("fragment").to_pylist()])
    per = (
        pa.table(
            {
                "tenant_id": pairs.column("tenant_id"),
                "subject_id": pairs.column("subject_id"),
                "rows": pa.array(frag_rows, pa.int64()),
            }
        )
        .group_by(["tenant_id", "subject_id"])
        .aggregate([("rows", "sum"), ("rows", "count")])
    )
    share = float(np.mean(per.column("rows_sum").to_numpy()) / rows)
    most = int(pc.max(per.column("rows_count")).as_py())
    return LayoutStats(rows, len(fragments), per.num_rows, share, most)


def _order(ds: lance.LanceDataset) -> np.ndarray:
    """Row offsets in (tenant, subject) order; stable, so arrival order within a subject.
    Rows without a subject (tenant-scope records) come first in their tenant."""
    table = ds.to_table(columns=_KEY_COLUMNS)
    keyed = pa.table(
        {
            "t": table.column("tenant_id").fill_null(""),
            "s": table.column("subject_id").fill_null(""),
        }
    )
    return pc.sort_indices(keyed, sort_keys=[("t", "ascending"), ("s", "ascending")]).to_numpy()


def fts_indices(ds: lance.LanceDataset) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, column, tokenizer parameters) of every full-text index of ``ds``."""
    out = []
    for index in ds.describe_indices():
        if str(index.index_type).lower() != "inverted" or len(index.field_names) != 1:
            continue
        stats = ds.stats.index_stats(index.name)
        params = dict((stats.get("indices") or [{}])[0].get("params") or {})
        params.pop("lance_tokenizer", None)  # derived from the column's type, not an option
        out.append((index.name, index.field_names[0], params))
    return out


def fts_in_one_segment(ds: lance.LanceDataset) -> bool:
    """A full-text index held in one segment over several fragments (a table grouped before
    ``segment_fts`` existed: maintenance segments it once)."""
    return len(ds.get_fragments()) > 2 and any(
        str(i.index_type).lower() == "inverted" and len(i.segments) == 1
        for i in ds.describe_indices()
    )


def segment_fts(ds: lance.LanceDataset) -> dict[str, int]:
    """Rebuild every full-text index of ``ds`` as one segment per fragment, committed as one
    logical index (same name, same tokenizer); {index name: segments}.

    Why: materialising a delete remaps every index segment that covers a rewritten fragment.
    One segment over the whole table made a one-fragment delete rewrite the postings of every
    row (bench/forget.py: the full-text index cost most of the grouped floor); with a segment
    per fragment it rewrites one fragment's postings. Rows appended later are folded by
    ``optimize_indices`` into the newest segment until the next regroup segments it again.
    A search reads every segment (BM25 statistics per segment)."""
    out: dict[str, int] = {}
    fragments = [f.fragment_id for f in ds.get_fragments()]
    if len(fragments) < 2:
        return out
    for name, column, params in fts_indices(ds):
        segments = [
            ds.create_index_uncommitted(
                column, "INVERTED", name=name, fragment_ids=[fid], replace=True, **params
            )
            for fid in fragments
        ]
        ds = ds.commit_existing_index_segments(name, column, segments)
        out[name] = len(segments)
    return out


def regroup(
    ds: lance.LanceDataset,
    fragment_rows: int,
    *,
    batch_rows: int = 16_384,
    storage_options: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Rewrite ``ds`` grouped by (tenant, subject) in fragments of ``fragment_rows``: one
    ``Rewrite`` commit of every fragment, indices refreshed; its compaction target set."""
    t0 = time.perf_counter()
    old = ds.get_fragments()
    rows = ds.count_rows()
    order = _order(ds)
    schema = ds.schema

    def batches() -> Iterator[pa.RecordBatch]:
        for start in range(0, len(order), batch_rows):
            take = np.sort(order[start : start + batch_rows])  # take reads in offset order
            part = ds.take(take)
            back = np.argsort(np.argsort(order[start : start + batch_rows]))
            yield from part.take(pa.array(back)).to_batches()

    reader = pa.RecordBatchReader.from_batches(schema, batches())
    new = write_fragments(reader, ds.uri, schema=schema, max_rows_per_file=fragment_rows,
                          storage_options=storage_options or None)  # fmt: skip
    op = LanceOperation.Rewrite(
        groups=[LanceOperation.RewriteGroup([f.metadata for f in old], new)],
        rewritten_indices=[],
    )
    done = lance.LanceDataset.commit(
        ds.uri, op, read_version=ds.version, storage_options=storage_options or None
    )
    done.update_config({FRAGMENT_ROWS_KEY: str(fragment_rows)})
    done = lance.dataset(ds.uri, storage_options=storage_options or None)
    segmented = segment_fts(done)
    done = lance.dataset(ds.uri, storage_options=storage_options or None)
    if done.describe_indices():
        done.optimize.optimize_indices()
    out = {
        "rows": rows,
        "fragments_before": len(old),
        "fragments_after": len(new),
        "fts_segments": segmented,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    logger.info("regrouped %s by tenant and subject: %s", ds.uri, out)
    return out
