"""A partition's clustering is saved as an upsert: after any sequence of saves the stored
clusters and members are what a plain key -> row model of the statements holds (conflicting
rows keep their tenant, namespace, subject and creation time; a recluster drops the partition's
rows it does not list), whether or not the incoming members were stored before (the plain
insert ``save_partition_clusters`` takes when none is, and the upsert otherwise)."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memory_core.stores.clusters as clusters_module
from memory_core.config import load_settings
from memory_core.stores import open_stores
from memory_core.stores.clusters import (
    CLUSTER_SCHEMA,
    MEMBER_SCHEMA,
    save_new_clusters,
    save_partition_clusters,
)

T0 = datetime(2026, 7, 1, tzinfo=UTC)
PARTITIONS = [("acme", "it"), ("acme", "ops")]
EPISODES = [f"e{i}" for i in range(6)]
CLUSTERS = ["c0", "c1", "c2"]

# one save: its partition, whether it is a recluster, and (episode, cluster) of its members
save = st.tuples(
    st.sampled_from(range(len(PARTITIONS))),
    st.booleans(),
    st.lists(
        st.tuples(st.sampled_from(EPISODES), st.sampled_from(CLUSTERS)),
        max_size=4,
        unique_by=lambda m: m[0],
    ),
)


# one commit group of the process pool: saves of distinct partitions, no episode in two of them
group = st.lists(save, min_size=1, max_size=len(PARTITIONS), unique_by=lambda s: s[0]).filter(
    lambda saves: len({e for *_, ms in saves for e, _ in ms}) == sum(len(ms) for *_, ms in saves)
)


def _tables(part: int, members: list[tuple[str, str]], night: int) -> tuple[pa.Table, pa.Table]:
    tenant, namespace = PARTITIONS[part]
    at = T0 + timedelta(days=night)
    cids = sorted({f"{namespace}-{c}" for _, c in members})
    clusters = pa.table(
        {
            "cluster_id": cids,
            "tenant_id": [tenant] * len(cids),
            "namespace": [namespace] * len(cids),
            "centroid": [[float(night), 1.0]] * len(cids),
            "size": [night + 1] * len(cids),
            "label": [f"label {night}"] * len(cids),
            "error_code": [None] * len(cids),
            "created_at": [at] * len(cids),
            "updated_at": [at] * len(cids),
        },
        schema=CLUSTER_SCHEMA,
    )
    rows = pa.table(
        {
            "episode_id": [e for e, _ in members],
            "cluster_id": [f"{namespace}-{c}" for _, c in members],
            "tenant_id": [tenant] * len(members),
            "namespace": [namespace] * len(members),
            "subject_id": [f"u{night}"] * len(members),
            "distance": [0.1 * night] * len(members),
            "assigned_at": [at] * len(members),
        },
        schema=MEMBER_SCHEMA,
    )
    return clusters, rows


def _model(
    state: dict[str, dict[str, tuple[Any, ...]]], part: int, replace: bool,
    clusters: pa.Table, members: pa.Table,
) -> None:  # fmt: skip
    """What the statements leave, as dicts keyed like the tables."""
    tenant, namespace = PARTITIONS[part]
    new_clusters = {r["cluster_id"]: r for r in clusters.to_pylist()}
    new_members = {r["episode_id"]: r for r in members.to_pylist()}
    if replace:
        for key, row in list(state["members"].items()):
            if row[2:4] == (tenant, namespace) and key not in new_members:
                del state["members"][key]
        for key, row in list(state["clusters"].items()):
            if row[1:3] == (tenant, namespace) and key not in new_clusters:
                del state["clusters"][key]
    for key, r in new_clusters.items():
        old = state["clusters"].get(key)
        head = old[:3] if old else (key, r["tenant_id"], r["namespace"])
        created = old[7] if old else r["created_at"]
        state["clusters"][key] = (*head, r["centroid"], r["size"], r["label"], r["error_code"],
                                  created, r["updated_at"])  # fmt: skip
    for key, r in new_members.items():
        old = state["members"].get(key)
        kept = old[2:5] if old else (r["tenant_id"], r["namespace"], r["subject_id"])
        state["members"][key] = (key, r["cluster_id"], *kept, r["distance"], r["assigned_at"])


def _stored(home: Path) -> dict[str, dict[str, tuple[Any, ...]]]:
    meta = open_stores(load_settings(home=home, embed={"model": "hash"})).meta
    with meta.connect() as con:
        clusters = con.execute(f"SELECT {', '.join(CLUSTER_SCHEMA.names)} FROM clusters").fetchall()
        members = con.execute(
            f"SELECT {', '.join(MEMBER_SCHEMA.names)} FROM cluster_members"
        ).fetchall()
    return {
        "clusters": {r[0]: (*r[:3], list(r[3]), *r[4:]) for r in clusters},
        "members": {r[0]: r for r in members},
    }


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=st.lists(save, min_size=1, max_size=5), literal_max=st.sampled_from([0, 256]))
def test_stored_clustering_after_any_sequence_of_saves_is_the_upsert_model(
    history: list[tuple[int, bool, list[tuple[str, str]]]], literal_max: int
) -> None:
    """``literal_max``: both lookups of stored members (an IN list of literals; a semi join
    against the incoming rows, which a first night's 10k members take)."""
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        patch.setattr(clusters_module, "LITERAL_LOOKUP_MAX", literal_max)
        home = Path(tmp)
        meta = open_stores(load_settings(home=home, embed={"model": "hash"})).meta
        expected: dict[str, dict[str, tuple[Any, ...]]] = {"clusters": {}, "members": {}}
        for night, (part, replace, members) in enumerate(history):
            clusters, rows = _tables(part, members, night)
            tenant, namespace = PARTITIONS[part]
            save_partition_clusters(meta, tenant, namespace, clusters, rows, replace=replace)
            _model(expected, part, replace, clusters, rows)
        assert _stored(home) == expected


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=st.lists(group, min_size=1, max_size=4), literal_max=st.sampled_from([0, 256]))
def test_a_groups_new_clusters_saved_together_store_what_saving_each_stores(
    history: list[list[tuple[int, bool, list[tuple[str, str]]]]], literal_max: int
) -> None:
    """As the pool's commit groups save: each recluster on its own, then the group's
    incremental saves in one ``save_new_clusters``; the stored rows are the model's."""
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        patch.setattr(clusters_module, "LITERAL_LOOKUP_MAX", literal_max)
        home = Path(tmp)
        meta = open_stores(load_settings(home=home, embed={"model": "hash"})).meta
        expected: dict[str, dict[str, tuple[Any, ...]]] = {"clusters": {}, "members": {}}
        for night, saves in enumerate(history):
            tables = [(part, replace, *_tables(part, members, night))
                      for part, replace, members in saves]  # fmt: skip
            for part, replace, clusters, rows in tables:
                if replace:
                    tenant, namespace = PARTITIONS[part]
                    save_partition_clusters(meta, tenant, namespace, clusters, rows, replace=True)
                    _model(expected, part, True, clusters, rows)
            new = [
                (part, clusters, rows) for part, replace, clusters, rows in tables if not replace
            ]
            save_new_clusters(meta, [(clusters, rows) for _, clusters, rows in new])
            for part, clusters, rows in new:
                _model(expected, part, False, clusters, rows)
        assert _stored(home) == expected
