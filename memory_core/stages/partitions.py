"""Scope partitions and what is new in each since its watermark."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import polars as pl

from memory_core.context import Partition
from memory_core.models import content_hash
from memory_core.stores import Stores
from memory_core.stores.ledger import get_watermarks

__all__ = ["PartitionWork", "plan_partitions"]

STAGE = "consolidate"


@dataclass(frozen=True)
class PartitionWork:
    """One partition's episodes, and how many were recorded since its watermark."""

    partition: Partition
    episodes: int
    new_episodes: int
    max_recorded_at: datetime | None
    watermark: datetime | None

    def input_hash(self, config_key: str) -> str:
        """Changes when the partition's input or the relevant config changes."""
        return content_hash(
            [
                [self.partition.tenant_id, self.partition.namespace],
                self.episodes,
                str(self.max_recorded_at),
                config_key,
            ]
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
    marks_frame = pl.DataFrame(
        {
            "tenant_id": [k[0] for k in marks],
            "namespace": [k[1] for k in marks],
            "mark": list(marks.values()),
        },
        schema={"tenant_id": pl.String, "namespace": pl.String, "mark": pl.Datetime("us", "UTC")},
    )
    grouped = (
        frame.join(marks_frame, on=["tenant_id", "namespace"], how="left")
        .group_by("tenant_id", "namespace")
        .agg(
            pl.len().alias("n"),
            pl.col("recorded_at").max().alias("max_rec"),
            (pl.col("mark").is_null() | (pl.col("recorded_at") > pl.col("mark")))
            .sum()
            .alias("new"),
        )
        .sort("tenant_id", "namespace")
    )
    work = [
        PartitionWork(
            partition=Partition(row["tenant_id"], row["namespace"]),
            episodes=row["n"],
            new_episodes=row["new"],
            max_recorded_at=row["max_rec"],
            watermark=marks.get((row["tenant_id"], row["namespace"])),
        )
        for row in grouped.iter_rows(named=True)
    ]
    return work
