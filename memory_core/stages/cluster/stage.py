"""Clustering stage: group a partition's episodes by the problem they are about.

Why this shape
--------------
Mining (``mine/counterexamples.py``) compares the successes of an action pattern with the failures
of the same pattern *within one cluster*, so a cluster must hold one recurring problem and,
ideally, all of it: successes and failures tell different stories in their text, yet they
must land together.

Features: the episode vector (unit norm) concatenated with a hashed bag-of-words of the goal
(``HashEmbedder``, 128 dims) scaled by ``goal_weight``; the concatenation is renormalised and
compared by cosine distance. The error code (``conditions["error_code"]``) is a *key*, not a
soft feature: episodes with different error codes (a missing code is a value of its own)
never share a cluster, so every cluster has one well-defined ``error_code``. A shared,
non-empty error code is itself strong evidence of the same problem, worth
``error_code_weight`` of distance: such an episode joins a cluster within
``threshold + error_code_weight``, an episode without a code within ``threshold``.

Algorithm (incremental leader clustering, deterministic): episodes not yet clustered are
taken in (occurred_at, episode_id) order, in chunks. Per chunk, one matrix product assigns
every episode that is within reach of a cluster existing at the start of the chunk (the
nearest one wins; ties go to the older cluster). The rest run a sequential leader pass
against the clusters seeded earlier in the same chunk, seeding a new cluster when none is
close enough. A leader pass depends on which episodes come first, so the clusters seeded in
this run are then folded into their nearest neighbour (same key) while their centroids lie
within reach (``leader.merge_provisional``); clusters from earlier runs never merge
with each other, so existing members stay where they are. Centroids are running means,
renormalised; a stored unit centroid stands in for ``size`` members. No randomness is used,
so ``config.seed`` has nothing to seed: the result depends only on input and configuration.

Measured on the demo data (``memory_core.demo``, seeds 1-7): with MiniLM vectors every
problem is one cluster per partition; without the error-code credit, threshold 0.35 split
each problem into ~3 clusters. With the lexical hash embedder (tests) the leader pass alone
split problems into 2-4 clusters; the merge step brings that back to one, and mining then
finds all 30 true procedures with both embedders.

``recluster=True`` rebuilds the partition from scratch and then keeps cluster ids stable by
matching new clusters to old ones on shared members (greedy maximum overlap, deterministic
ties). Unmatched clusters get ``stable_id("clu", tenant, namespace, first member)``.
Clusters and members are written in one DuckDB transaction; a run with nothing new writes
nothing.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from memory_core.config import ClusterConfig, StepsConfig
from memory_core.context import Partition, RunContext
from memory_core.models import stable_id
from memory_core.stages.cluster.leader import (
    GOAL_DIM,
    STEPS_DIM,
    LeaderState,
    assign,
    combine,
    goal_block,
    merge_provisional,
    one_blas_thread,
    seeds,
    steps_block,
    unit_rows,
)
from memory_core.stages.cluster.selection import Choice, choose, sample_rows
from memory_core.stages.partitions import active_episodes_where
from memory_core.step_abstract import is_read_only, step_signature
from memory_core.steps import ToolCall, as_step
from memory_core.stores import MetaStore, Stores
from memory_core.stores import clusters as cluster_store
from memory_core.stores.audit import record_audit
from memory_core.stores.filters import in_list
from memory_core.stores.lance import LanceStore

__all__ = [
    "ClusterOutcome",
    "ClusterResult",
    "ClusterState",
    "SharedClusterState",
    "cluster_partition",
    "compute_clusters",
    "list_clusters",
    "read_cluster_state",
    "read_shared_cluster_state",
    "recorded_choices",
    "write_clusters",
]

logger = logging.getLogger(__name__)

_CODE_PATTERN = r'"error_code"\s*:\s*"(?P<code>[^"\\]*)"'
_EPISODE_COLUMNS = ["episode_id", "subject_id", "occurred_at", "goal", "actions", "conditions"]
# what an incremental night reads of every active episode of the partition (``_load_episodes``)
SCAN_COLUMNS = [*_EPISODE_COLUMNS, "embedding_version"]


@dataclass
class ClusterResult:
    """What one call did to one partition; ``as_dict`` is what flows publish."""

    partition: str
    episodes: int = 0
    new_members: int = 0
    new_clusters: int = 0
    total_clusters: int = 0
    reclustered: bool = False
    skipped_no_actions_or_goal: int = 0
    selection: dict[str, Any] | None = None
    choice: Choice | None = None
    # The partition's (clusters, members) after this call, as ``stores.clusters.load_partition``
    # reads them back (ordered by id; centroids kept): what mining reads next, handed over
    # instead of read again (~3% of the 1M 1% night's partition time, BENCHMARKS.md s30).
    clustering: tuple[pa.Table, pa.Table] | None = field(default=None, repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "episodes": self.episodes,
            "new_members": self.new_members,
            "new_clusters": self.new_clusters,
            "total_clusters": self.total_clusters,
            "reclustered": self.reclustered,
            "skipped_no_actions_or_goal": self.skipped_no_actions_or_goal,
            "selection": self.selection,
        }


def list_clusters(meta: MetaStore, tenant_id: str | None = None) -> list[dict[str, Any]]:
    """``[{cluster_id, tenant_id, namespace, member_ids, size, label}]`` for the CLI."""
    return cluster_store.list_clusters(meta, tenant_id)


def _error_code(conditions: str | None) -> str:
    if not conditions:
        return ""
    try:
        value = json.loads(conditions).get("error_code")
    except (ValueError, AttributeError):
        return ""
    return str(value) if value not in (None, "") else ""


def _error_codes(column: pa.ChunkedArray | pa.Array) -> list[str]:
    """``conditions["error_code"]`` per row, vectorised for the common case.

    Ingest writes conditions as canonical JSON, so a plain code is found by one regex pass in
    Arrow; rows that mention the key in another shape (escapes, non-string values) are
    decoded with json, so the answer never depends on the shortcut.
    """
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    found = pc.extract_regex(column, _CODE_PATTERN)
    codes = pc.struct_field(found, "code").to_pylist()  # null where no match
    mentions = pc.match_substring(column, '"error_code"').to_pylist()
    raw = None
    out = []
    for i, code in enumerate(codes):
        if code is None and mentions[i]:
            raw = raw if raw is not None else column.to_pylist()
            code = _error_code(raw[i])
        out.append(code or "")
    return out


def _label(goal: str | None, actions: list[str] | None, code: str) -> str:
    if goal and goal.strip():
        return goal.strip()[:120]
    if code:
        return f"error {code}"
    return actions[0][:120] if actions else "(no goal)"


_VECTORS_BY_ID = 0.2  # fetch vectors by id when at most this share of the partition is new
_MAX_IDS = 5000  # ... and at most this many (a longer IN list costs more than it saves)


def _load_episodes(
    lance: LanceStore, partition: Partition, known: pa.Array | None = None,
    scanned: pa.Table | None = None,
) -> tuple[pa.Table, np.ndarray, int, int]:  # fmt: skip
    """Active, embedded episodes that carry actions or a goal and are not in ``known`` (ids
    already clustered), their vectors (rows in the same order), how many others were left
    out, and how many were kept before ``known``.

    Message-only episodes (a transcript's per-message records: text, no goal, no actions)
    say nothing about how a problem is solved; they go to fact extraction, not to clusters.
    Episodes not embedded yet (null vector: ``stages/embed``) are not read at all: they stay
    unclustered, so the first run after the embed task places them. A partition without
    clustered episodes reads everything in one scan; otherwise the vectors (most of the
    bytes) are read only for the episodes returned: an incremental night reads the small
    columns of the partition and the vectors of its new episodes.

    No filter names ``vector``: Lance evaluates a filter on every row of the table, so
    ``vector IS NOT NULL`` reads every vector of every partition (1M rows: ~1-4 s per scan,
    twice per partition, the cost that grew with the table). Writers leave
    ``embedding_version`` empty where they leave the vector null, so only rows with an empty
    (or missing) version have their vector read for the check; the vector's own null decides.
    Vectors go to numpy before any reordering (an Arrow ``take`` of list rows cost ~0.25 s
    per 10k).

    ``scanned``: the partition's active episodes as a caller read them for mining too (at
    least ``SCAN_COLUMNS``), instead of a scan of its own; not on a first batch (that scan
    reads the vectors).
    """
    where = active_episodes_where(partition)
    first = known is None or len(known) == 0
    columns = [*SCAN_COLUMNS, *(["vector"] if first else [])]
    if scanned is not None and not first:
        small = scanned.select(columns)
    else:
        small = lance.scan("episodes", where=where, columns=columns)
    small = _embedded_only(lance, where, small).drop_columns(["embedding_version"])
    lengths = pc.list_value_length(small.column("actions"))
    has_actions = pc.fill_null(pc.greater(lengths, 0), fill_value=False)
    goal = pc.utf8_trim_whitespace(small.column("goal"))
    has_goal = pc.fill_null(pc.greater(pc.utf8_length(goal), 0), fill_value=False)
    kept = small.filter(pc.or_(has_actions, has_goal))
    skipped = small.num_rows - kept.num_rows
    dim = lance.vector_dim("episodes") or 0
    if first:
        vectors = _matrix(kept.column("vector"), dim)
        return kept.drop_columns(["vector"]), vectors, skipped, kept.num_rows
    assert known is not None
    wanted = kept.filter(pc.invert(pc.is_in(kept.column("episode_id"), value_set=known)))
    if wanted.num_rows == 0:
        return wanted, np.zeros((0, dim), dtype=np.float32), skipped, kept.num_rows
    if wanted.num_rows > min(_VECTORS_BY_ID * kept.num_rows, _MAX_IDS):
        full = lance.scan("episodes", where=where, columns=["episode_id", "vector"])
    else:
        ids = in_list("episode_id", wanted.column("episode_id").to_pylist())
        full = lance.scan("episodes", where=f"{where} AND {ids}", columns=["episode_id", "vector"])
    at = pc.index_in(wanted.column("episode_id"), value_set=full.column("episode_id"))
    at = np.asarray(pc.fill_null(at, -1).to_numpy(zero_copy_only=False), dtype=np.int64)
    valid = np.asarray(full.column("vector").is_valid().to_numpy(zero_copy_only=False))
    found = at >= 0
    found[found] = valid[at[found]]  # missing or lost its vector between the reads: next night
    if not found.all():
        wanted, at = wanted.filter(pa.array(found)), at[found]
    vectors = _matrix(full.column("vector"), dim)[at]
    return wanted, vectors, skipped, kept.num_rows


def _matrix(column: pa.ChunkedArray, dim: int) -> np.ndarray:
    """A fixed-size-list column as an (n, dim) float32 matrix; null rows are zeros (callers
    drop them), non-finite values are zeros."""
    parts = []
    for chunk in column.chunks:
        if len(chunk) == 0:
            continue
        values = chunk.values.slice(chunk.offset * dim, len(chunk) * dim)
        part = np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float32)
        part = part.reshape(len(chunk), dim)
        if chunk.null_count:
            part = part.copy()
            part[np.asarray(chunk.is_null().to_numpy(zero_copy_only=False))] = 0.0
        parts.append(part)
    out = np.concatenate(parts) if parts else np.zeros((0, dim), dtype=np.float32)
    if not np.isfinite(out).all():
        out = np.nan_to_num(out, nan=0.0, posinf=0.0, neginf=0.0)
    return out


def _embedded_only(lance: LanceStore, where: str, small: pa.Table) -> pa.Table:
    """``small`` without the episodes whose vector is null (normally none: vectors are read
    only for rows whose ``embedding_version`` is empty or missing)."""
    if "vector" in small.column_names:  # read already
        vector = small.column("vector")
        return small if vector.null_count == 0 else small.filter(pc.is_valid(vector))
    version = small.column("embedding_version")
    suspect = pc.fill_null(pc.equal(version, ""), fill_value=True)
    if not pc.any(suspect).as_py():
        return small
    rows = lance.scan(
        "episodes",
        where=f"{where} AND (embedding_version IS NULL OR embedding_version = '')",
        columns=["episode_id", "vector"],
    )
    missing = rows.column("episode_id").filter(pc.is_null(rows.column("vector")))
    if len(missing) == 0:
        return small
    return small.filter(pc.invert(pc.is_in(small.column("episode_id"), value_set=missing)))


def _in_order(table: pa.Table, vectors: np.ndarray) -> tuple[pa.Table, np.ndarray]:
    """Processing order: valid time, then id (deterministic whatever the scan order)."""
    order = pc.sort_indices(
        table, sort_keys=[("occurred_at", "ascending"), ("episode_id", "ascending")]
    )
    return table.take(order), vectors[order.to_numpy()]


@dataclass
class _Batch:
    """Episodes to place, in processing order, with their features and keys."""

    ids: list[str]
    subjects: list[str | None]
    goals: list[str | None]
    actions: pa.ChunkedArray
    codes: list[str]
    features: np.ndarray

    def label(self, row: int) -> str:
        """A cluster's label from its seed episode (only seeds need one: made on demand)."""
        return _label(self.goals[row], self.actions[row].as_py(), self.codes[row])


_SEP = "\x1f"


def _distinct_lists(column: pa.ChunkedArray) -> tuple[list[list[str]], np.ndarray]:
    """The distinct action lists of a column and each row's index into them.

    Runs repeat their action lists, and turning a list column into Python lists was the
    larger part of building the step block: the lists are told apart in Arrow (length and
    the steps joined by a separator), so only one row of each distinct list is converted.
    A step containing the separator, or a null step, falls back to comparing the lists in
    Python, so the grouping never depends on the shortcut.
    """
    column = column.combine_chunks()
    values = column.flatten()
    if values.null_count == 0 and not pc.any(pc.match_substring(values, _SEP)).as_py():
        lengths = pc.cast(pc.fill_null(pc.list_value_length(column), 0), pa.string())
        joined = pc.fill_null(pc.binary_join(column, _SEP), "")
        key = pc.binary_join_element_wise(lengths, joined, _SEP)
        codes = key.dictionary_encode().indices.to_numpy(zero_copy_only=False)
        _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
        lists = column.take(pa.array(first)).to_pylist()
        return [acts or [] for acts in lists], inverse.reshape(-1)
    index: dict[tuple[str, ...], int] = {}
    out: list[list[str]] = []
    rows = []
    for acts in column.to_pylist():
        key_ = tuple(acts or ())
        if key_ not in index:
            index[key_] = len(out)
            out.append(list(key_))
        rows.append(index[key_])
    return out, np.asarray(rows, dtype=np.int64)


def _step_rows(column: pa.ChunkedArray, steps: StepsConfig, namespace: str) -> np.ndarray:
    """The step block of every row, built once per distinct action list."""
    lists, inverse = _distinct_lists(column)
    if not lists:
        return np.zeros((0, STEPS_DIM), dtype=np.float32)
    return _signature_sets(lists, steps, namespace)[inverse]


def _signature_sets(
    actions: list[list[str] | None], steps: StepsConfig, namespace: str
) -> np.ndarray:
    """Hashed step-signature block per episode; steps that changed the world or handed the
    conversation on (what the agent could not do says what was asked) weigh 1, lookups
    and calls the tool refused (``ToolCall.failed``) 0.5."""
    rows: list[tuple[tuple[str, float], ...]] = []
    cache: dict[tuple[str, ...], tuple[tuple[str, float], ...]] = {}
    read_only: dict[str, bool] = {}
    for acts in actions:
        key = tuple(acts or ())
        if key not in cache:
            sigs: dict[str, float] = {}
            for raw in key:
                step = as_step(raw)
                tool = step.tool if isinstance(step, ToolCall) else step
                if tool not in read_only:
                    read_only[tool] = is_read_only(tool, steps, namespace)
                changed = not read_only[tool] and not (isinstance(step, ToolCall) and step.failed)
                sig = step_signature(step)
                sigs[sig] = max(sigs.get(sig, 0.0), 1.0 if changed else 0.5)
            cache[key] = tuple(sorted(sigs.items()))
        rows.append(cache[key])
    return steps_block(rows)


@dataclass
class _Inputs:
    """A partition's episodes to place, with what every feature setting is built from."""

    table: pa.Table
    goals: list[str | None]
    codes: list[str]
    vectors: np.ndarray  # unit rows
    goal_rows: np.ndarray  # hashed goals, unweighted
    step_rows: np.ndarray

    def features(self, goal_weight: float, steps_weight: float, rows: Any = None) -> np.ndarray:
        """Feature rows at one setting: the blocks are built once, only weighted here."""
        take = slice(None) if rows is None else rows
        return combine(self.vectors[take], self.goal_rows[take], self.step_rows[take],
                       goal_weight, steps_weight)  # fmt: skip


def _inputs(table: pa.Table, vectors: np.ndarray, steps: StepsConfig, namespace: str) -> _Inputs:
    goals = table.column("goal").to_pylist()
    return _Inputs(
        table=table,
        goals=goals,
        codes=_error_codes(table.column("conditions")),
        vectors=unit_rows(vectors),
        goal_rows=goal_block(goals),
        step_rows=_step_rows(table.column("actions"), steps, namespace),
    )


def _batch(inputs: _Inputs, choice: Choice) -> _Batch:
    table = inputs.table
    return _Batch(
        ids=table.column("episode_id").to_pylist(),
        subjects=table.column("subject_id").to_pylist(),
        goals=inputs.goals,
        actions=table.column("actions"),
        codes=inputs.codes,
        features=inputs.features(choice.goal_weight, choice.steps_weight),
    )


def _select(inputs: _Inputs, config: ClusterConfig) -> Choice:
    """Pick (goal weight, step weight, threshold) on a sample of the partition (no labels)."""
    rows = sample_rows(inputs.table.num_rows, config.select_sample)
    codes = [inputs.codes[i] for i in rows]
    known: dict[str, int] = {"": 0}
    keys = _key_ids(codes, known)
    has_code = np.array([bool(c) for c in codes], dtype=bool)
    return choose(config, lambda g, s: inputs.features(g, s, rows), keys, has_code)


def _key_ids(codes: list[str], known: dict[str, int]) -> np.ndarray:
    for code in codes:
        if code not in known:
            known[code] = len(known)
    return np.array([known[c] for c in codes], dtype=np.int64)


def _reach(codes: list[str], config: ClusterConfig, threshold: float) -> np.ndarray:
    return np.array(
        [threshold + (config.error_code_weight if c else 0.0) for c in codes],
        dtype=np.float64,
    )


SELECTION_ACTION = "cluster_selection"


def recorded_choices(
    stores: Stores, partition: Partition | None = None
) -> dict[tuple[str, str], Choice | None]:
    """The parameters each partition's stored clusters were built with (its latest record),
    by (tenant, namespace), for every partition that has one or for ``partition`` alone. Why
    all at once: a night of many partitions read the audit log once per partition, each read
    a scan of the whole log (which only grows), ~1.5 ms each at 1M (BENCHMARKS.md s46)."""
    where, params = "action = ?", [SELECTION_ACTION]
    if partition is not None:
        where += " AND tenant_id = ? AND json_extract_string(detail, '$.namespace') = ?"
        params += [partition.tenant_id, partition.namespace]
    with stores.meta.connect() as con:
        rows = con.execute(
            "SELECT tenant_id, json_extract_string(detail, '$.namespace') AS namespace, "
            f"arg_max(detail, logged_at) FROM audit_log WHERE {where} GROUP BY ALL",
            params,
        ).fetchall()
    return {(tenant, namespace): _choice_of(detail) for tenant, namespace, detail in rows}


def _choice_of(detail: str) -> Choice | None:
    try:
        return Choice.from_dict(json.loads(detail)["choice"])
    except (KeyError, TypeError, ValueError):
        return None


def _same(a: Choice | None, b: Choice) -> bool:
    return a is not None and (a.goal_weight, a.steps_weight, a.threshold) == (
        b.goal_weight,
        b.steps_weight,
        b.threshold,
    )


def _record_choice(stores: Stores, ctx: RunContext, partition: Partition, choice: Choice) -> None:
    if ctx.dry_run:
        return
    with stores.meta.transaction() as con:
        record_audit(
            con,
            at=ctx.now,
            action=SELECTION_ACTION,
            run_id=ctx.run_id,
            actor=ctx.actor,
            target=partition.key,
            tenant_id=partition.tenant_id,
            counts={"sample": choice.sample},
            detail={"namespace": partition.namespace, "choice": choice.as_dict()},
        )


def cluster_partition(
    stores: Stores,
    config: ClusterConfig,
    ctx: RunContext,
    partition: Partition,
    *,
    recluster: bool = False,
    steps: StepsConfig | None = None,
    shared: SharedClusterState | None = None,
) -> ClusterResult:
    """Place the partition's unclustered episodes (or all of them, with ``recluster``).

    A partition clustered from scratch (first run, ``recluster``, stale centroids) chooses
    its parameters (``selection``) and records the choice; incremental runs reuse it. The same
    three steps the process pool runs apart (``stages/consolidate_pool.py``): read, compute,
    write. ``shared``: as ``read_cluster_state`` takes it.
    """
    state = read_cluster_state(stores, partition, shared)
    outcome = compute_clusters(stores.lance, config, ctx, partition, state, recluster=recluster,
                               steps=steps)  # fmt: skip
    return write_clusters(stores, ctx, partition, outcome)


@dataclass
class ClusterState:
    """What clustering a partition reads from DuckDB: its stored clusters (centroids kept) and
    members, and the parameters they were built with. Read by the process holding DuckDB and
    handed to the compute (``compute_clusters``), which may run in another process."""

    clusters: pa.Table
    members: pa.Table
    recorded: Choice | None


@dataclass
class ClusterOutcome:
    """What ``compute_clusters`` leaves for the writer: the result, the rows to save (None:
    nothing changed) and the parameter choice to record (None: none to record)."""

    result: ClusterResult
    save: tuple[pa.Table, pa.Table, bool] | None = None  # clusters, members, replace
    record: Choice | None = None


@dataclass(frozen=True)
class SharedClusterState:
    """Every partition's recorded parameters and the stored clusters of the night's
    partitions (``covered``; None: every partition), each read once for a night of many
    partitions (``read_shared_cluster_state``) instead of once per partition; members stay
    per partition (a partition's read of them touches its own rows only). A partition it
    does not cover is read on its own (``read_cluster_state``).

    Why, and why they stay valid through the night: ``stages/shared_state.py``."""

    choices: dict[tuple[str, str], Choice | None]
    clusters: dict[tuple[str, str], pa.Table]
    covered: frozenset[tuple[str, str]] | None = None

    def covers(self, key: tuple[str, str]) -> bool:
        return self.covered is None or key in self.covered


def read_shared_cluster_state(
    stores: Stores, partitions: Iterable[tuple[str, str]] | None = None
) -> SharedClusterState:
    """``partitions``: the night's (tenant, namespace) pairs, whose clusters alone are held
    (centroids are most of the table: a home of many partitions need not hold them all)."""
    covered = frozenset(partitions) if partitions is not None else None
    return SharedClusterState(
        choices=recorded_choices(stores),
        clusters=cluster_store.load_clusters_by_partition(stores.meta, covered),
        covered=covered,
    )


def read_cluster_state(
    stores: Stores, partition: Partition, shared: SharedClusterState | None = None
) -> ClusterState:
    """The partition's stored clustering and recorded parameters (DuckDB reads only);
    ``shared``: its clusters and parameters as read once for the night."""
    key = (partition.tenant_id, partition.namespace)
    if shared is None or not shared.covers(key):
        old_clusters, old_members = cluster_store.load_partition(stores.meta, *key)
    else:
        old_clusters = shared.clusters.get(key, cluster_store.CLUSTER_SCHEMA.empty_table())
        old_members = cluster_store.load_partition_members(stores.meta, *key)
    recorded = None
    if old_clusters.num_rows:
        choices = shared.choices if shared is not None else recorded_choices(stores, partition)
        recorded = choices.get(key)
    return ClusterState(old_clusters, old_members, recorded)


def write_clusters(stores: Stores, ctx: RunContext, partition: Partition,
                   outcome: ClusterOutcome, *,
                   new_rows: list[tuple[pa.Table, pa.Table]] | None = None,
                   ) -> ClusterResult:  # fmt: skip
    """Save what ``compute_clusters`` decided (DuckDB writes only); the result.

    ``new_rows``: an incremental save's (clusters, members) go there instead, for the caller
    to save with other partitions' in the same transaction (``cluster_store.save_new_clusters``,
    the process pool's commit groups); a recluster's are saved here."""
    if outcome.save is not None:
        clusters, members, replace = outcome.save
        if new_rows is not None and not replace:
            new_rows.append((clusters, members))
        else:
            cluster_store.save_partition_clusters(
                stores.meta, partition.tenant_id, partition.namespace, clusters, members,
                replace=replace,
            )  # fmt: skip
    if outcome.record is not None:
        _record_choice(stores, ctx, partition, outcome.record)
    result = outcome.result
    logger.info(
        "cluster %s run=%s episodes=%d new_members=%d new_clusters=%d total=%d recluster=%s",
        partition.key,
        ctx.run_id,
        result.episodes,
        result.new_members,
        result.new_clusters,
        result.total_clusters,
        result.reclustered,
    )
    return result


def compute_clusters(
    lance: LanceStore,
    config: ClusterConfig,
    ctx: RunContext,
    partition: Partition,
    state: ClusterState,
    *,
    recluster: bool = False,
    steps: StepsConfig | None = None,
    scanned: pa.Table | None = None,
) -> ClusterOutcome:
    """Place the partition's episodes given its stored ``state``: Lance reads and numeric
    work, no DuckDB, so it runs in any process (``stages/consolidate_pool.py``).
    ``scanned``: its active episodes as the caller read them (``_load_episodes``)."""
    with one_blas_thread():  # small products; and the same BLAS results on every run
        return _compute(lance, config, ctx, partition, state, recluster=recluster, steps=steps,
                        scanned=scanned)  # fmt: skip


def _compute(
    lance: LanceStore,
    config: ClusterConfig,
    ctx: RunContext,
    partition: Partition,
    state: ClusterState,
    *,
    recluster: bool,
    steps: StepsConfig | None,
    scanned: pa.Table | None = None,
) -> ClusterOutcome:
    steps = steps if steps is not None else StepsConfig()
    old_clusters, old_members, recorded = state.clusters, state.members, state.recorded
    dim = (lance.vector_dim("episodes") or 0) + GOAL_DIM + STEPS_DIM
    stale = old_clusters.num_rows > 0 and _centroid_dim(old_clusters) not in (None, dim)
    if stale:
        logger.warning(
            "cluster %s: stored centroids have another dimension; rebuilding", partition.key
        )
    known = None if recluster or stale else old_members.column("episode_id").combine_chunks()
    table, vectors, skipped, kept = _load_episodes(lance, partition, known, scanned)
    fresh = recluster or stale or old_clusters.num_rows == 0
    if recluster or stale:
        inputs = _inputs(*_in_order(table, vectors), steps, partition.namespace)
        choice = _select(inputs, config)
        outcome = _recluster(config, ctx, partition, inputs, choice, old_clusters, old_members)
    else:
        outcome = _incremental(
            config, ctx, partition, (table, vectors), (old_clusters, old_members), steps,
            recorded, kept,
        )  # fmt: skip
        choice = outcome.result.choice
    result = outcome.result
    result.skipped_no_actions_or_goal = skipped
    if choice is not None and fresh and (result.new_members or not _same(recorded, choice)):
        result.selection = choice.as_dict()
        outcome.record = choice
    return outcome


def _centroid_dim(clusters: pa.Table) -> int | None:
    lengths = pc.list_value_length(clusters.column("centroid")).drop_null()
    return int(lengths[0].as_py()) if len(lengths) else None


def _load_state(clusters: pa.Table, dim: int, codes_known: dict[str, int]) -> LeaderState:
    """Existing clusters as leader state; a stored unit centroid stands for ``size`` members."""
    state = LeaderState(dim)
    if clusters.num_rows == 0:
        return state
    flat = clusters.column("centroid").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    centroids = np.asarray(flat, dtype=np.float32).reshape(clusters.num_rows, dim)
    keys = _key_ids([c or "" for c in clusters.column("error_code").to_pylist()], codes_known)
    sizes = np.maximum(np.nan_to_num(clusters.column("size").to_numpy(zero_copy_only=False)), 1)
    state.load(centroids, sizes.astype(np.int64), keys)
    return state


def _fresh_id(partition: Partition, seed_episode: str, taken: set[str]) -> str:
    """``stable_id("clu", tenant, namespace, seed)``; salted only if that id is already used."""
    cid = stable_id("clu", partition.tenant_id, partition.namespace, seed_episode)
    salt = 0
    while cid in taken:
        salt += 1
        cid = stable_id("clu", partition.tenant_id, partition.namespace, seed_episode, salt)
    taken.add(cid)
    return cid


def _cluster_table(
    partition: Partition,
    state: LeaderState,
    rows: list[int],
    attrs: list[tuple[str, str, str | None, datetime, datetime]],
) -> pa.Table:
    """Cluster rows (state rows ``rows``; attrs = id, label, code, created_at, updated_at)."""
    n, dim = len(rows), state.dim
    values = pa.array(state.centroids[rows].reshape(-1), pa.float32())
    offsets = pa.array(np.arange(0, (n + 1) * dim, dim, dtype=np.int32))
    ts = cluster_store.CLUSTER_SCHEMA.field("created_at").type
    return pa.table(
        {
            "cluster_id": [a[0] for a in attrs],
            "tenant_id": [partition.tenant_id] * n,
            "namespace": [partition.namespace] * n,
            "centroid": pa.ListArray.from_arrays(offsets, values),
            "size": pa.array(state.sizes[rows].astype(np.int32)),
            "label": [a[1] for a in attrs],
            "error_code": [a[2] or None for a in attrs],
            "created_at": pa.array([a[3] for a in attrs], ts),
            "updated_at": pa.array([a[4] for a in attrs], ts),
        },
        schema=cluster_store.CLUSTER_SCHEMA,
    )


def _member_table(
    partition: Partition,
    batch: _Batch,
    cluster_ids: list[str],
    dists: np.ndarray,
    assigned_at: list[datetime] | datetime,
) -> pa.Table:
    """``assigned_at``: one time per member, or one for all (a column of one repeated
    datetime: converting 10k Python datetimes cost ~12 ms a first night's partition)."""
    n = len(batch.ids)
    ts = cluster_store.MEMBER_SCHEMA.field("assigned_at").type
    return pa.table(
        {
            "episode_id": batch.ids,
            "cluster_id": cluster_ids,
            "tenant_id": [partition.tenant_id] * n,
            "namespace": [partition.namespace] * n,
            "subject_id": batch.subjects,
            "distance": pa.array(np.round(dists, 6), pa.float64()),
            "assigned_at": (
                pa.repeat(pa.scalar(assigned_at, ts), n)
                if isinstance(assigned_at, datetime)
                else pa.array(assigned_at, ts)
            ),
        },
        schema=cluster_store.MEMBER_SCHEMA,
    )


def _place(
    batch: _Batch,
    config: ClusterConfig,
    state: LeaderState,
    codes_known: dict[str, int],
    threshold: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Leader pass, then fold this run's clusters into near neighbours; (rows, distances)."""
    first = state.count
    keys = _key_ids(batch.codes, codes_known)
    labels, _ = assign(batch.features, keys, _reach(batch.codes, config, threshold), state)
    reach = {
        key: threshold + (config.error_code_weight if code else 0.0)
        for code, key in codes_known.items()
    }
    labels = merge_provisional(state, first, reach)[labels]
    dists = 1.0 - np.einsum("ij,ij->i", batch.features, state.centroids[labels])
    return labels, np.clip(dists, 0.0, 2.0)


def _incremental(
    config: ClusterConfig,
    ctx: RunContext,
    partition: Partition,
    loaded: tuple[pa.Table, np.ndarray],
    old: tuple[pa.Table, pa.Table],
    steps: StepsConfig,
    recorded: Choice | None,
    episodes: int,
) -> ClusterOutcome:
    """New episodes (``loaded``: the partition's unclustered ones and their vectors;
    ``episodes``: all it holds)
    join the nearest cluster within reach or seed new ones; members stay put.

    With no clusters yet the partition chooses its parameters on this first batch; otherwise
    the recorded choice (or, for homes clustered before choices were recorded, the config).
    """
    old_clusters, old_members = old  # (clusters, members) as stored before this call
    result = ClusterResult(partition.key, episodes=episodes)
    result.total_clusters = old_clusters.num_rows
    if loaded[0].num_rows == 0:
        result.clustering = (old_clusters, old_members)
        return ClusterOutcome(result)
    inputs = _inputs(*_in_order(*loaded), steps, partition.namespace)
    if old_clusters.num_rows == 0:
        choice = _select(inputs, config)
        result.choice = choice
    else:
        choice = recorded or Choice.default(config)
    batch = _batch(inputs, choice)
    codes_known: dict[str, int] = {"": 0}
    state = _load_state(old_clusters, batch.features.shape[1], codes_known)
    k_old = state.count
    labels, dists = _place(batch, config, state, codes_known, choice.threshold)
    old = old_clusters.select(["cluster_id", "label", "error_code", "created_at"]).to_pylist()
    row_ids = {row: r["cluster_id"] for row, r in enumerate(old)}
    taken = set(row_ids.values())
    rows: list[int] = []
    attrs: list[tuple[str, str, str | None, datetime, datetime]] = []
    for row in sorted({int(r) for r in labels if r < k_old}):
        prior = old[row]
        rows.append(row)
        attrs.append(
            (prior["cluster_id"], prior["label"], prior["error_code"],
             prior["created_at"] or ctx.now, ctx.now)
        )  # fmt: skip
    for row, seed in seeds(labels, k_old, state.count).items():
        cid = _fresh_id(partition, batch.ids[seed], taken)
        row_ids[row] = cid
        rows.append(row)
        attrs.append((cid, batch.label(seed), batch.codes[seed], ctx.now, ctx.now))
    members = _member_table(partition, batch, [row_ids[int(r)] for r in labels], dists, ctx.now)
    clusters = _cluster_table(partition, state, rows, attrs)
    result.clustering = (_upserted(old_clusters, clusters, "cluster_id"),
                         _upserted(old_members, members, "episode_id"))  # fmt: skip
    result.new_members = len(batch.ids)
    result.new_clusters = len(row_ids) - k_old
    result.total_clusters = len(row_ids)
    return ClusterOutcome(result, save=(clusters, members, False))


def _upserted(old: pa.Table, new: pa.Table, key: str) -> pa.Table:
    """``old`` with ``new``'s rows in place of those with the same ``key``, ordered by it: what
    ``save_partition_clusters`` leaves stored, in ``load_partition``'s order and schema."""
    kept = old.filter(pc.invert(pc.is_in(old.column(key), value_set=new.column(key))))
    both = pa.concat_tables([kept, new.select(old.schema.names).cast(old.schema)])
    return both.take(pc.sort_indices(both, sort_keys=[(key, "ascending")]))


def _match(
    labels: np.ndarray, ids: list[str], old_of: dict[str, str], firsts: dict[int, int]
) -> dict[int, str]:
    """Greedy maximum-overlap matching of new cluster rows to old cluster ids.

    Pairs are taken by overlap, largest first (ties: earlier seed, then old id), so the
    result is deterministic; each old id is reused at most once.
    """
    overlap: Counter[tuple[int, str]] = Counter()
    for index, eid in enumerate(ids):
        old = old_of.get(eid)
        if old is not None:
            overlap[(int(labels[index]), old)] += 1
    pairs = sorted(overlap.items(), key=lambda kv: (-kv[1], firsts[kv[0][0]], kv[0][1]))
    matched: dict[int, str] = {}
    used: set[str] = set()
    for (row, old), _count in pairs:
        if row not in matched and old not in used:
            matched[row] = old
            used.add(old)
    return matched


def _groups(mapping: dict[str, str]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for eid, cid in mapping.items():
        out.setdefault(cid, set()).add(eid)
    return out


def _recluster(
    config: ClusterConfig,
    ctx: RunContext,
    partition: Partition,
    inputs: _Inputs,
    choice: Choice,
    old_clusters: pa.Table,
    old_members: pa.Table,
) -> ClusterOutcome:
    """Rebuild the partition; reuse old ids by member overlap; write only if it changed."""
    result = ClusterResult(partition.key, episodes=inputs.table.num_rows, reclustered=True)
    batch = _batch(inputs, choice)
    state = LeaderState(batch.features.shape[1])
    labels, dists = _place(batch, config, state, {"": 0}, choice.threshold)
    firsts = seeds(labels, 0, state.count)  # live rows (merged ones have no members left)
    old_rows = {r["cluster_id"]: r for r in old_clusters.drop_columns(["centroid"]).to_pylist()}
    old_member_rows = {r["episode_id"]: r for r in old_members.to_pylist()}
    old_of = {eid: r["cluster_id"] for eid, r in old_member_rows.items()}
    matched = _match(labels, batch.ids, old_of, firsts)
    taken = set(matched.values())
    row_ids = {
        row: matched.get(row) or _fresh_id(partition, batch.ids[seed], taken)
        for row, seed in sorted(firsts.items(), key=lambda kv: kv[1])
    }
    new_of = {eid: row_ids[int(r)] for eid, r in zip(batch.ids, labels, strict=True)}
    result.total_clusters = len(row_ids)
    if new_of == old_of and set(row_ids.values()) == set(old_rows):
        result.clustering = (old_clusters, old_members)
        return ClusterOutcome(result)  # the same clustering: write nothing, keep timestamps
    old_sets, new_sets = _groups(old_of), _groups(new_of)
    rows = sorted(row_ids)
    attrs = []
    for row in rows:
        cid, seed = row_ids[row], firsts[row]
        prior = old_rows.get(cid)
        created = prior["created_at"] if prior else ctx.now
        same = prior is not None and old_sets.get(cid) == new_sets[cid]
        updated = prior["updated_at"] if same and prior else ctx.now
        attrs.append((cid, batch.label(seed), batch.codes[seed], created, updated))
    assigned: list[datetime] = []
    for index, eid in enumerate(batch.ids):
        prior_member = old_member_rows.get(eid)
        if prior_member is not None and prior_member["cluster_id"] == new_of[eid]:
            dists[index] = prior_member["distance"] or 0.0
            assigned.append(prior_member["assigned_at"] or ctx.now)
        else:
            assigned.append(ctx.now)
    clusters = _cluster_table(partition, state, rows, attrs)
    members = _member_table(partition, batch, [new_of[e] for e in batch.ids], dists, assigned)
    empty_clusters, empty_members = old_clusters.slice(0, 0), old_members.slice(0, 0)
    result.clustering = (_upserted(empty_clusters, clusters, "cluster_id"),
                         _upserted(empty_members, members, "episode_id"))  # fmt: skip
    result.new_members = sum(old_of.get(e) != c for e, c in new_of.items())
    result.new_clusters = sum(cid not in old_rows for cid in row_ids.values())
    return ClusterOutcome(result, save=(clusters, members, True))
