"""The plan's per-partition counts (stages/partitions._new_per_partition) against their
definition: every active episode counted, the latest recorded time, and as new those recorded
after the partition's watermark (all of them without one)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.stages.partitions import _new_per_partition

T0 = datetime(2026, 7, 1, tzinfo=UTC)
KEYS = [("t1", "a"), ("t1", "b"), ("t2", "a")]


def _by_definition(rows: list[tuple[str, str, datetime | None]],
                   marks: dict[tuple[str, str], datetime]) -> dict[tuple[str, str], tuple]:  # fmt: skip
    out: dict[tuple[str, str], tuple] = {}
    for key in sorted({(t, n) for t, n, _ in rows}):
        times = [r for t, n, r in rows if (t, n) == key]
        known = [r for r in times if r is not None]
        mark = marks.get(key)
        new = len(times) if mark is None else sum(1 for r in known if r > mark)
        out[key] = (len(times), max(known) if known else None, new)
    return out


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.integers(0, 20))),
        min_size=1, max_size=40,
    ),
    marks=st.dictionaries(st.sampled_from(KEYS), st.integers(-2, 22), max_size=3),
)  # fmt: skip
def test_counts_follow_the_definition(rows, marks):
    flat = [(t, n, None if h is None else T0 + timedelta(hours=h)) for (t, n), h in rows]
    at = {key: T0 + timedelta(hours=h) for key, h in marks.items()}
    frame = pl.DataFrame(
        {"tenant_id": [r[0] for r in flat], "namespace": [r[1] for r in flat],
         "recorded_at": [r[2] for r in flat]},
        schema={"tenant_id": pl.String, "namespace": pl.String,
                "recorded_at": pl.Datetime("us", "UTC")},
    )  # fmt: skip
    got = {
        (row["tenant_id"], row["namespace"]): (row["n"], row["max_rec"], row["new"])
        for row in _new_per_partition(frame, at).iter_rows(named=True)
    }
    assert got == _by_definition(flat, at)
    assert list(got) == sorted(got)  # in (tenant, namespace) order
