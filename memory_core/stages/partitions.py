"""Scope partitions and what is new in each since its watermark.

An episode stored without a vector (``stages/embed`` fills it later) is skipped by clustering,
so a partition's watermark must not pass it: :attr:`PartitionWork.watermark_to` stops just
before the partition's earliest unembedded episode, and the input hash counts the unembedded
ones. Once the embed task has filled them the partition is new again (its hash changed, the
episode lies past the watermark) and the next night clusters them, whether or not the
partition got other episodes. This holds however the episode came to lack a vector (a save
between the nightly's embed task and its planning, an embed run with ``--limit``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import polars as pl
import pyarrow.compute as pc

from memory_core.context import Partition
from memory_core.models import content_hash
from memory_core.stores import Stores
from memory_core.stores.filters import sql_quote
from memory_core.stores.ledger import get_watermarks

__all__ = ["PartitionWork", "active_episodes_where", "plan_partitions"]

STAGE = "consolidate"


def active_episodes_where(partition: Partition) -> str:
    """The Lance filter of a partition's active episodes: what clustering and mining read."""
    return (
        f"tenant_id = {sql_quote(partition.tenant_id)} AND "
        f"namespace = {sql_quote(partition.namespace)} AND status = 'active'"
    )


@dataclass(frozen=True)
class PartitionWork:
    """One partition's episodes, and how many were recorded since its watermark."""

    partition: Partition
    episodes: int
    new_episodes: int
    max_recorded_at: datetime | None
    watermark: datetime | None
    unembedded: int = 0
    earliest_unembedded_at: datetime | None = None

    @property
    def watermark_to(self) -> datetime | None:
        """How far the work may move the watermark: the newest episode, or just before the
        earliest one still waiting for its vector (clustering skipped it)."""
        if self.earliest_unembedded_at is None:
            return self.max_recorded_at
        before = self.earliest_unembedded_at - timedelta(microseconds=1)
        return before if self.max_recorded_at is None else min(self.max_recorded_at, before)

    def input_hash(self, config_key: str) -> str:
        """Changes when the partition's input or the relevant config changes, and when its
        unembedded episodes get their vectors (fully embedded partitions hash as before)."""
        parts: list[object] = [
            [self.partition.tenant_id, self.partition.namespace],
            self.episodes,
            str(self.max_recorded_at),
            config_key,
        ]
        if self.unembedded:
            parts.append(["unembedded", self.unembedded])
        return content_hash(parts)


def _new_per_partition(frame: pl.DataFrame, marks: dict[tuple[str, str], datetime]) -> pl.DataFrame:
    """Per (tenant, namespace), in order: its active episodes ``n``, their latest
    ``max_rec``, and how many are ``new`` (recorded after its watermark; all of them without
    one).

    Only the rows past the earliest watermark meet the watermarks (a join): joining every
    active episode's two key strings to them was most of the plan (~0.2 of ~0.35 s at 1M
    episodes, BENCHMARKS.md s45), and a night's new rows are few."""
    keys = ["tenant_id", "namespace"]
    totals = frame.group_by(keys).agg(
        pl.len().alias("n"), pl.col("recorded_at").max().alias("max_rec")
    )
    marks_frame = pl.DataFrame(
        {
            "tenant_id": [k[0] for k in marks],
            "namespace": [k[1] for k in marks],
            "mark": list(marks.values()),
        },
        schema={"tenant_id": pl.String, "namespace": pl.String, "mark": pl.Datetime("us", "UTC")},
    )
    later = frame
    if marks:
        later = frame.filter(pl.col("recorded_at") > min(marks.values()))
    past_mark = (
        later.join(marks_frame, on=keys, how="inner")
        .filter(pl.col("recorded_at") > pl.col("mark"))
        .group_by(keys)
        .agg(pl.len().alias("past_mark"))
    )
    return (
        totals.join(marks_frame, on=keys, how="left")
        .join(past_mark, on=keys, how="left")
        .select(
            *keys,
            "n",
            "max_rec",
            pl.when(pl.col("mark").is_null())
            .then(pl.col("n"))
            .otherwise(pl.col("past_mark").fill_null(0))
            .cast(pl.UInt32)
            .alias("new"),
        )
        .sort(keys)
    )


def plan_partitions(stores: Stores) -> list[PartitionWork]:
    """Every (tenant, namespace) with active episodes, in a stable order."""
    if "episodes" not in stores.lance.table_names():
        return []
    table = stores.lance.scan(
        "episodes", columns=["tenant_id", "namespace", "recorded_at"], where="status = 'active'"
    )
    if table.num_rows == 0:
        return []
    marks = {k: v.astimezone(UTC) for k, v in get_watermarks(stores.meta, stage=STAGE).items()}
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    frame = frame.with_columns(pl.col("recorded_at").dt.convert_time_zone("UTC"))
    grouped = _new_per_partition(frame, marks)
    pending = _unembedded(stores)
    work = []
    for row in grouped.iter_rows(named=True):
        key = (row["tenant_id"], row["namespace"])
        unembedded, earliest = pending.get(key, (0, None))
        work.append(
            PartitionWork(
                partition=Partition(*key),
                episodes=row["n"],
                new_episodes=row["new"],
                max_recorded_at=row["max_rec"],
                watermark=marks.get(key),
                unembedded=unembedded,
                earliest_unembedded_at=earliest,
            )
        )
    return work


def _unembedded(stores: Stores) -> dict[tuple[str, str], tuple[int, datetime | None]]:
    """Per partition: how many active episodes have no vector yet, and the earliest one's
    transaction time. Read after the embed task, so normally empty.

    Every writer leaves ``embedding_version`` empty where it leaves the vector null (ingest,
    compaction; ``fill_vectors`` sets both), so the filter reads that small column and fetches
    vectors only for its matches: a ``vector IS NULL`` filter reads every vector (1M rows:
    ~1-2 s against ~0.08 s, load ~9). The vector's own null decides."""
    table = stores.lance.scan(
        "episodes",
        columns=["tenant_id", "namespace", "recorded_at", "vector"],
        where="status = 'active' AND embedding_version = ''",
    )
    if table.num_rows:
        table = table.filter(pc.is_null(table.column("vector"))).drop_columns(["vector"])
    if table.num_rows == 0:
        return {}
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    grouped = frame.group_by("tenant_id", "namespace").agg(
        pl.len().alias("n"),
        pl.col("recorded_at").dt.convert_time_zone("UTC").min().alias("first"),
    )
    return {
        (row["tenant_id"], row["namespace"]): (row["n"], row["first"])
        for row in grouped.iter_rows(named=True)
    }
