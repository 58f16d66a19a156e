"""Mining units of a partition and the fingerprints that let a night skip unchanged ones.

A *unit* is what mining judges as a whole: the clusters sharing a non-empty error code, else
one cluster alone. The error code is a hard key of the problem (clustering never puts two codes
in one cluster), so clusters that share one are the same problem split by how users worded it.
Evidence about a step pattern under one error code is judged as a whole: the same steps failing
on the same code are a counterexample whatever words came with them, and a condition that
separates successes from failures in one wording's small cluster only by coincidence
(``os=ubuntu``) does not survive the others. Clusters without a code stay their own unit: there
the cluster is all that says two episodes share a problem.

A unit's candidates depend only on its input: the (cluster, episode, content hash) of its
episodes with actions, the policy and step configuration, and the namespace. So a unit whose
fingerprint of those is the one stored when it was last mined (``stores/mine_units.py``) would
produce exactly what it produced then: the night carries that forward (its candidate ids stay
current, nothing is re-read or re-written) and mines only the units that changed. A new
episode, a forgotten or folded one (no longer active), a recluster (other cluster ids) or a
policy change all change the fingerprint. The fingerprints are computed in polars over the
partition's ids, so a night with 1% new episodes materialises only the episodes of the units
those touched.

A touched unit is mined from all its current episodes, grouped (``stage._groups``,
``counterexamples.mine_groups``): no mining statistics are stored and folded, because what its
candidates hold (support and counterexample ids, one evidence pin per cited episode, the first
supporting runs, the problem phrase from the goals) is the grouped id lists themselves, which
the partition scan gives in one polars group-by. So there is no partial state to fall back
from: a forgotten, folded or revoked episode, a recluster, a policy or step-config change or a
``_VERSION`` bump changes the fingerprint, and the unit is mined from what is active now.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from memory_core.models import content_hash

__all__ = ["UnitPlan", "plan_units", "unit_key"]

# bump when what a unit's candidates depend on changes; 2: a procedure quotes only values
# two sources gave (step_abstract.MIN_CONSTANT_SOURCES), so every stored unit is mined
# again once and no procedure keeps one user's values from before
_VERSION = 2


def unit_key(cluster_id: str, error_code: str | None) -> str:
    """The unit a cluster belongs to: its error code's, else its own."""
    return f"code:{error_code}" if error_code else f"cluster:{cluster_id}"


@dataclass(frozen=True)
class UnitPlan:
    """Per unit its fingerprint, and which episode ids each unit holds."""

    fingerprints: dict[str, str]
    episodes: pl.DataFrame  # episode_id, cluster_id, unit (episodes with actions in a cluster)
    clusters: int  # clusters holding an episode with actions

    def episode_ids(self, units: set[str]) -> pa.Array:
        """Ids of the episodes of ``units``."""
        picked = self.episodes.filter(pl.col("unit").is_in(sorted(units)))
        return picked.get_column("episode_id").to_arrow()


def plan_units(
    table: pa.Table, has_actions: pa.ChunkedArray | pa.Array, info: pa.Table,
    members: pa.Table, config: object,
) -> UnitPlan:  # fmt: skip
    """Fingerprint every unit of a partition.

    ``table``: the partition's active episodes (``episode_id``, ``content_hash``);
    ``has_actions``: which of them carry actions; ``info``/``members``: its clusters and
    members; ``config``: what else the candidates depend on (policy, steps, namespace)."""
    with_actions = pc.fill_null(has_actions, fill_value=False)
    eps = pl.from_arrow(table.select(["episode_id", "content_hash"]).filter(with_actions))
    mem = pl.from_arrow(members.select(["episode_id", "cluster_id"]))
    codes = pl.from_arrow(info.select(["cluster_id", "error_code"]))
    assert isinstance(eps, pl.DataFrame) and isinstance(mem, pl.DataFrame)
    assert isinstance(codes, pl.DataFrame)
    code = pl.col("error_code").fill_null("")
    # in id order before the joins, which keep it: each unit's lines are then in id order
    # within its group (a group-by keeps the rows' order), with no sort by (unit, id) after,
    # the same fingerprints for ~0.3 CPU s less a 1M home's 1% night (BENCHMARKS.md s46)
    joined = (
        eps.sort("episode_id")
        .join(mem, on="episode_id", how="inner", maintain_order="left")
        .join(codes, on="cluster_id", how="left", maintain_order="left")
        .with_columns(
            pl.when(code != "")
            .then(pl.lit("code:") + code)
            .otherwise(pl.lit("cluster:") + pl.col("cluster_id"))
            .alias("unit"),
            (
                pl.col("cluster_id")
                + "\x1f"
                + pl.col("episode_id")
                + "\x1f"
                + pl.col("content_hash").fill_null("")
            ).alias("line"),
        )
    )
    salt = content_hash([_VERSION, config])
    lines = joined.group_by("unit", maintain_order=True).agg(pl.col("line").str.join("\n"))
    fingerprints = {
        unit: hashlib.sha256(f"{salt}\n{text}".encode()).hexdigest()[:32]
        for unit, text in lines.iter_rows()
    }
    return UnitPlan(
        fingerprints=fingerprints,
        episodes=joined.select("episode_id", "cluster_id", "unit"),
        clusters=joined.get_column("cluster_id").n_unique(),
    )
