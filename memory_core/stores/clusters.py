"""Clusters and their members in DuckDB: the SQL behind the cluster and mining stages.

A partition's clusters and members are written in ONE transaction, so a crash leaves either
the old or the new clustering, never a cluster without its members. Bulk rows go through
registered Arrow tables: a nightly run writes tens of thousands of members, and one
``INSERT ... SELECT`` is orders of magnitude faster than ``executemany``.

The mining stage's bookkeeping of blocked preference writes lives here too, because it is
the other piece of per-partition consolidation state the stages need to read back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from memory_core.crash import crash_point
from memory_core.stores.filters import in_list
from memory_core.stores.meta import MetaStore, registered

__all__ = [
    "BLOCKED_PREFERENCE_ACTION",
    "CLUSTER_SCHEMA",
    "MEMBER_SCHEMA",
    "blocked_claim_episodes",
    "list_clusters",
    "load_clusters_by_partition",
    "load_partition",
    "load_partition_clusters",
    "load_partition_members",
    "save_new_clusters",
    "save_partition_clusters",
]

BLOCKED_PREFERENCE_ACTION = "blocked_preference_write"

CLUSTER_SCHEMA = pa.schema(
    [
        pa.field("cluster_id", pa.string()),
        pa.field("tenant_id", pa.string()),
        pa.field("namespace", pa.string()),
        pa.field("centroid", pa.list_(pa.float32())),
        pa.field("size", pa.int32()),
        pa.field("label", pa.string()),
        pa.field("error_code", pa.string()),
        pa.field("created_at", pa.timestamp("us", tz="UTC")),
        pa.field("updated_at", pa.timestamp("us", tz="UTC")),
    ]
)

MEMBER_SCHEMA = pa.schema(
    [
        pa.field("episode_id", pa.string()),
        pa.field("cluster_id", pa.string()),
        pa.field("tenant_id", pa.string()),
        pa.field("namespace", pa.string()),
        pa.field("subject_id", pa.string()),
        pa.field("distance", pa.float64()),
        pa.field("assigned_at", pa.timestamp("us", tz="UTC")),
    ]
)

_CLUSTER_COLUMNS = ", ".join(CLUSTER_SCHEMA.names)
_MEMBER_COLUMNS = ", ".join(MEMBER_SCHEMA.names)


def _clusters(
    con: Any, partition: tuple[str, str] | None, *, centroids: bool, among: str | None = None
) -> pa.Table:
    """The clusters of ``partition`` (tenant, namespace), or of every partition (of those in
    the registered table ``among``, when given), ordered by partition and id."""
    centroid = "centroid" if centroids else "NULL::FLOAT[] AS centroid"
    columns = _CLUSTER_COLUMNS.replace("centroid", centroid, 1)
    where = "WHERE tenant_id = ? AND namespace = ? " if partition is not None else ""
    if among is not None:
        where += f"{'AND' if where else 'WHERE'} (tenant_id, namespace) IN (FROM {among}) "
    return (
        con.sql(
            f"SELECT {columns} FROM clusters {where}ORDER BY tenant_id, namespace, cluster_id",
            params=list(partition) if partition is not None else None,
        )
        .to_arrow_table()
        .cast(CLUSTER_SCHEMA)
    )


def _members(con: Any, tenant_id: str, namespace: str) -> pa.Table:
    return (
        con.sql(
            f"SELECT {_MEMBER_COLUMNS} FROM cluster_members "
            "WHERE tenant_id = ? AND namespace = ? ORDER BY episode_id",
            params=[tenant_id, namespace],
        )
        .to_arrow_table()
        .cast(MEMBER_SCHEMA)
    )


def load_partition_clusters(
    meta: MetaStore, tenant_id: str, namespace: str, *, centroids: bool = True
) -> pa.Table:
    """The partition's clusters ordered by id (centroid column empty when not asked for)."""
    with meta.connect() as con:
        return _clusters(con, (tenant_id, namespace), centroids=centroids)


def load_clusters_by_partition(
    meta: MetaStore, partitions: Iterable[tuple[str, str]] | None = None
) -> dict[tuple[str, str], pa.Table]:
    """Every partition's clusters (centroids kept), or those of ``partitions`` (tenant,
    namespace), by partition, each as ``load_partition_clusters`` reads it; a partition
    without clusters is absent.

    Why: the clusters of every partition share the table's row groups (4,000 rows at 1M
    episodes), so a partition's read decompressed every centroid: ~4 ms CPU each, 100 times a
    1M night, against ~35 ms for one read of them all (BENCHMARKS.md s47). ``partitions``
    bounds what is held to a night's partitions in a home of many more."""
    with meta.connect() as con:
        if partitions is None:
            table = _clusters(con, None, centroids=True)
        else:
            pairs = sorted(set(partitions))
            wanted = pa.table(
                {
                    "tenant_id": pa.array([k[0] for k in pairs], pa.string()),
                    "namespace": pa.array([k[1] for k in pairs], pa.string()),
                }
            )
            with registered(con, _wanted_partitions=wanted):
                table = _clusters(con, None, centroids=True, among="_wanted_partitions")
    keys = list(
        zip(
            table.column("tenant_id").to_pylist(),
            table.column("namespace").to_pylist(),
            strict=True,
        )
    )
    out: dict[tuple[str, str], pa.Table] = {}
    start = 0
    for end in range(1, len(keys) + 1):
        if end == len(keys) or keys[end] != keys[start]:
            # a copy, not a slice: a pickled slice carries its parent's whole buffers
            out[keys[start]] = table.take(pa.array(range(start, end), pa.int64()))
            start = end
    return out


def load_partition_members(meta: MetaStore, tenant_id: str, namespace: str) -> pa.Table:
    """The partition's cluster members ordered by episode id."""
    with meta.connect() as con:
        return _members(con, tenant_id, namespace)


def load_partition(
    meta: MetaStore, tenant_id: str, namespace: str, *, centroids: bool = True
) -> tuple[pa.Table, pa.Table]:
    """(clusters, members) of one partition through one connection (opening one costs)."""
    with meta.connect() as con:
        return (
            _clusters(con, (tenant_id, namespace), centroids=centroids),
            _members(con, tenant_id, namespace),
        )


def save_partition_clusters(
    meta: MetaStore,
    tenant_id: str,
    namespace: str,
    clusters: pa.Table,
    members: pa.Table,
    *,
    replace: bool,
) -> None:
    """Write clusters and members of one partition in one transaction.

    ``replace=False`` (incremental): upsert the given clusters (new or changed) and insert the
    given members (new ones). ``replace=True`` (recluster): the given rows become the
    partition's whole clustering; rows of the partition not among them are deleted.
    """
    _save(meta, [(clusters, members)], replace=(tenant_id, namespace) if replace else None)


def save_new_clusters(meta: MetaStore, saves: list[tuple[pa.Table, pa.Table]]) -> None:
    """``save_partition_clusters(..., replace=False)`` of several partitions at once
    (``saves``: their (clusters, members)), in one transaction: one upsert of their clusters
    and one insert of their members in all, the same rows as one call per partition (cluster
    ids name tenant and namespace, and an episode is in one partition).

    Why: the process pool's one writer is the 1M 1% night's critical path, and these three
    statements per partition (an upsert through the cluster key, the member lookup, the
    insert) cost ~10 ms each time whatever their ~100 rows (BENCHMARKS.md s43)."""
    if saves:
        _save(meta, saves, replace=None)


def _save(
    meta: MetaStore, saves: list[tuple[pa.Table, pa.Table]], *, replace: tuple[str, str] | None
) -> None:
    """``saves``' clusters upserted and members written, in one transaction; ``replace``: the
    (tenant, namespace) whose rows not among them are deleted first (a recluster), when the
    members are upserted whatever; otherwise inserted unless one is stored (``_any_member``)."""
    clusters = pa.concat_tables(
        [c.select(CLUSTER_SCHEMA.names).cast(CLUSTER_SCHEMA) for c, _ in saves]
    )
    members = pa.concat_tables(
        [m.select(MEMBER_SCHEMA.names).cast(MEMBER_SCHEMA) for _, m in saves]
    )
    with meta.transaction() as con, registered(con, _new_clusters=clusters, _new_members=members):
        if replace is not None:
            con.execute(
                "DELETE FROM cluster_members WHERE tenant_id = ? AND namespace = ? "
                "AND episode_id NOT IN (SELECT episode_id FROM _new_members)",
                list(replace),
            )
            con.execute(
                "DELETE FROM clusters WHERE tenant_id = ? AND namespace = ? "
                "AND cluster_id NOT IN (SELECT cluster_id FROM _new_clusters)",
                list(replace),
            )
        con.execute(
            f"INSERT INTO clusters ({_CLUSTER_COLUMNS}) "
            f"SELECT {_CLUSTER_COLUMNS} FROM _new_clusters "
            "ON CONFLICT (cluster_id) DO UPDATE SET centroid = excluded.centroid, "
            "size = excluded.size, label = excluded.label, "
            "error_code = excluded.error_code, updated_at = excluded.updated_at"
        )
        crash_point("cluster.in_transaction")  # atomic: clusters without members never land
        upsert = replace is not None or _any_member(con, members)
        con.execute(
            f"INSERT INTO cluster_members ({_MEMBER_COLUMNS}) "
            f"SELECT {_MEMBER_COLUMNS} FROM _new_members{_ON_MEMBER if upsert else ''}"
        )


# How stored members take the incoming rows of the same episodes (``_any_member``).
_ON_MEMBER = (
    " ON CONFLICT (episode_id) DO UPDATE SET cluster_id = excluded.cluster_id, "
    "distance = excluded.distance, assigned_at = excluded.assigned_at"
)

# Up to this many incoming members are looked up by an IN list of literals (an index scan:
# ~3-4 ms for a 1% night's ~100); beyond it DuckDB's parse of the list grows with it (10k ids:
# ~180 ms) and a semi join against the registered rows, which scans the key column whatever the
# count (~15-17 ms at 1M members), is cheaper.
LITERAL_LOOKUP_MAX = 256


def _any_member(con: Any, members: pa.Table) -> bool:
    """Whether any of ``members`` (the rows registered as ``_new_members``) is a stored
    member (of any partition: the episode id is the key).

    Why ask first: an incremental night's members are new episodes, and an ``INSERT ... ON
    CONFLICT`` of a partition's ~100 of them cost ~25-30 ms, DuckDB walking the 1M-key index
    (episode ids and cluster ids spread over it) for the conflict check it then never uses;
    the lookup and a plain insert cost ~6 ms (10k members, a first night's partition: ~47 ms
    upserted, ~30 ms looked up and inserted; a 1M home's meta file, BENCHMARKS.md s36). When
    one is stored the upsert runs as before, so what is stored is the same either way."""
    if not members.num_rows:
        return False
    if members.num_rows <= LITERAL_LOOKUP_MAX:
        where = in_list("episode_id", members.column("episode_id").to_pylist())
    else:
        where = "episode_id IN (SELECT episode_id FROM _new_members)"
    found = con.execute(f"SELECT 1 FROM cluster_members WHERE {where} LIMIT 1").fetchall()
    return bool(found)


def list_clusters(meta: MetaStore, tenant_id: str | None = None) -> list[dict[str, Any]]:
    """Clusters with their member ids: the contract of ``memctl clusters --format json``."""
    where, params = ("WHERE c.tenant_id = ?", [tenant_id]) if tenant_id is not None else ("", [])
    with meta.connect() as con:
        rows = con.execute(
            f"""SELECT c.cluster_id, c.tenant_id, c.namespace, c.size, c.label, c.error_code,
                   coalesce(list(m.episode_id ORDER BY m.episode_id)
                            FILTER (WHERE m.episode_id IS NOT NULL), []) AS member_ids
            FROM clusters c LEFT JOIN cluster_members m ON m.cluster_id = c.cluster_id
            {where}
            GROUP BY ALL ORDER BY c.tenant_id, c.namespace, c.cluster_id""",
            params,
        ).fetchall()
    return [
        {
            "cluster_id": cid,
            "tenant_id": tenant,
            "namespace": namespace,
            "member_ids": list(member_ids),
            "size": len(member_ids),
            "label": label,
            "error_code": error_code,
        }
        for cid, tenant, namespace, _size, label, error_code, member_ids in rows
    ]


def blocked_claim_episodes(meta: MetaStore, tenant_id: str, namespace: str) -> set[str]:
    """Episode ids whose blocked claims an earlier run already counted in the audit log.

    The audit events of :data:`BLOCKED_PREFERENCE_ACTION` carry the episode ids they counted
    (ids only, never content), so a rerun counts each blocked claim exactly once even when
    late episodes arrive with an old ``recorded_at``.
    """
    with meta.connect() as con:
        rows = con.execute(
            "SELECT detail FROM audit_log WHERE action = ? AND tenant_id = ? "
            "AND json_extract_string(detail, '$.namespace') = ?",
            [BLOCKED_PREFERENCE_ACTION, tenant_id, namespace],
        ).fetchall()
    seen: set[str] = set()
    for (detail,) in rows:
        seen.update(json.loads(detail or "{}").get("episode_ids", []))
    return seen
