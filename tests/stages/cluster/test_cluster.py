"""Clustering: incremental, keyed by error code, deterministic, stable ids on recluster."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.config import ClusterConfig
from memory_core.stages.cluster import list_clusters
from memory_core.stages.cluster.leader import LeaderState, assign, merge_provisional, unit_rows
from memory_core.stores.clusters import load_partition_members


def members_of(mem) -> dict[str, str]:
    table = load_partition_members(mem.stores.meta, "acme", "it")
    return dict(
        zip(
            table.column("episode_id").to_pylist(),
            table.column("cluster_id").to_pylist(),
            strict=False,
        )
    )


def printer(kit: SimpleNamespace, eid: str, minutes: int = 0) -> dict:
    return kit.make_episode(
        eid, minutes=minutes, goal="Printer shows offline and jobs fail with 0x0000011b",
        actions=["clear print queue", "restart print spooler", "print test page"],
        conditions={"error_code": "0x0000011b", "spooler_queue_stuck": "true"},
        text="Cleared the queue, restarted the spooler, and the test page printed.",
    )  # fmt: skip


def test_near_duplicate_joins_and_far_episode_seeds_a_cluster(mem, kit) -> None:
    mem.ingest([kit.make_episode("a")])
    first = mem.cluster()
    assert (first.new_members, first.new_clusters, first.total_clusters) == (1, 1, 1)
    near = kit.make_episode(
        "a2", minutes=5, text="Reset the network adapter, reconnected the VPN for the user."
    )
    mem.ingest([near, printer(kit, "far", minutes=6)])
    second = mem.cluster()
    assert (second.new_members, second.new_clusters, second.total_clusters) == (2, 1, 2)
    members = members_of(mem)
    assert members["a2"] == members["a"]
    assert members["far"] != members["a"]


def test_different_error_codes_never_share_a_cluster(mem, kit) -> None:
    same_text = {"text": "Reset the network adapter and reconnected the VPN."}
    mem.ingest(
        [
            kit.make_episode("c720", conditions={"error_code": "720"}, **same_text),
            kit.make_episode("c721", minutes=1, conditions={"error_code": "721"}, **same_text),
            kit.make_episode("none", minutes=2, conditions={}, **same_text),
        ]
    )
    mem.cluster()
    members = members_of(mem)
    assert len(set(members.values())) == 3
    codes = {c["error_code"] for c in list_clusters(mem.stores.meta)}
    assert codes == {"720", "721", None}


def test_goal_variants_of_one_error_code_share_a_cluster(mem, kit) -> None:
    goals = [
        "VPN fails with error 720",
        "Cannot connect to the VPN: error 720",
        "Corporate VPN won't connect (error 720 on connect)",
    ]
    eps = [kit.make_episode(f"g{i}", minutes=i, goal=g) for i, g in enumerate(goals)]
    eps.append(
        kit.make_episode(
            "fail", minutes=9, outcome="failure", conditions={"error_code": "720"},
            text="Tried resetting the adapter, the VPN still fails with 720.",
        )
    )  # fmt: skip
    mem.ingest(eps)
    mem.cluster()
    assert len(set(members_of(mem).values())) == 1


def test_rerun_with_nothing_new_changes_nothing(mem, kit) -> None:
    mem.ingest([*kit.seed_scenario(), printer(kit, "p1")])
    mem.cluster()
    before = mem.snapshot()
    again = mem.cluster(now=kit.NOW.replace(day=2))
    assert again.new_members == 0 and again.new_clusters == 0
    assert mem.snapshot() == before


def test_recluster_of_an_unchanged_partition_writes_nothing(mem, kit) -> None:
    mem.ingest([*kit.seed_scenario(), printer(kit, "p1")])
    mem.cluster()
    before = mem.snapshot()
    result = mem.cluster(recluster=True, now=kit.NOW.replace(day=2))
    assert result.reclustered and result.new_members == 0 and result.new_clusters == 0
    assert mem.snapshot() == before


def test_recluster_keeps_cluster_ids_stable(mem, kit) -> None:
    scenario = kit.seed_scenario()
    late = [printer(kit, f"p{i}", minutes=500 + i) for i in range(3)]
    mem.ingest(scenario[5:] + late)  # arrives first: failures, cert fixes, printers
    mem.cluster()
    mem.ingest(scenario[:5])  # then the earlier successes
    mem.cluster()
    old = members_of(mem)
    result = mem.cluster(recluster=True)
    new = members_of(mem)
    assert result.reclustered
    assert set(new) == set(old)
    assert set(new.values()) == set(old.values())  # every cluster kept its id
    assert sum(old[e] != new[e] for e in new) == result.new_members


def test_clustering_is_deterministic(tmp_path: Path, kit) -> None:
    eps = kit.seed_scenario() + [printer(kit, f"p{i}", minutes=i) for i in range(2)]
    runs = []
    for name in ("one", "two"):
        other = kit.open_mem(tmp_path / name)
        other.ingest(list(reversed(eps)))
        other.cluster()
        runs.append([(c["cluster_id"], c["member_ids"]) for c in list_clusters(other.stores.meta)])
    assert runs[0] == runs[1]


def test_partitions_are_clustered_apart(mem, kit) -> None:
    mem.ingest(kit.seed_scenario() + kit.seed_scenario(tenant="globex", prefix="g-"))
    mem.cluster("acme")
    mem.cluster("globex")
    clusters = list_clusters(mem.stores.meta)
    for cluster in clusters:
        prefix = "g-" if cluster["tenant_id"] == "globex" else ""
        assert all(m.startswith("g-") == bool(prefix) for m in cluster["member_ids"])
    assert {c["tenant_id"] for c in list_clusters(mem.stores.meta, "globex")} == {"globex"}


def test_list_clusters_contract(mem, kit) -> None:
    mem.ingest(kit.seed_scenario())
    mem.cluster()
    [cluster] = list_clusters(mem.stores.meta, "acme")
    assert {"cluster_id", "tenant_id", "namespace", "member_ids", "size", "label"} <= set(cluster)
    assert cluster["cluster_id"].startswith("clu_")
    assert cluster["size"] == len(cluster["member_ids"]) == 10
    assert cluster["member_ids"] == sorted(cluster["member_ids"])
    assert cluster["label"] == "VPN fails with error 720"


def test_leader_folds_fragments_seeded_far_apart() -> None:
    rng = np.random.default_rng(1)
    centre = unit_rows(rng.normal(size=(1, 32)))[0]
    # members sit ~0.3 from the centre but ~0.5 from each other: early ones seed apart
    points = unit_rows(centre + 1.0 * unit_rows(rng.normal(size=(40, 32))))
    state = LeaderState(32)
    reach = np.full(40, 0.42)
    labels, _ = assign(points, np.zeros(40, dtype=np.int64), reach, state)
    assert len(set(labels.tolist())) > 1
    merged = merge_provisional(state, 0, {0: 0.42})[labels]
    assert len(set(merged.tolist())) == 1


def test_default_reach_credits_a_shared_error_code() -> None:
    config = ClusterConfig()
    assert config.threshold + config.error_code_weight == 0.6


def test_silhouette_matches_sklearn_and_degenerate_clusterings_score_minus_one() -> None:
    from sklearn.metrics import silhouette_score

    from memory_core.stages.cluster.selection import mean_silhouette

    rng = np.random.default_rng(5)
    feats = unit_rows(rng.standard_normal((60, 16)).astype(np.float32))
    labels = rng.integers(0, 4, 60)
    ours = mean_silhouette(feats, labels)
    assert abs(ours - silhouette_score(feats, labels, metric="cosine")) < 1e-4
    assert mean_silhouette(feats, np.zeros(60, dtype=int)) == -1.0  # one cluster
    assert mean_silhouette(feats, np.arange(60)) == -1.0  # only singletons


def test_the_choice_is_recorded_and_reused_by_incremental_runs(mem, kit) -> None:
    from memory_core.stages.cluster.stage import SELECTION_ACTION

    eps = kit.seed_scenario()
    mem.ingest(eps[:6])
    first = mem.cluster()
    chosen = first.selection
    assert chosen is not None and chosen["method"] == "silhouette" and chosen["grid"]
    best = max(chosen["grid"], key=lambda r: r["silhouette"])
    assert (chosen["threshold"], chosen["steps_weight"]) == (
        best["threshold"],
        best["steps_weight"],
    )
    mem.ingest(eps[6:])
    later = mem.cluster()
    assert later.selection is None  # incremental: the recorded choice, not a new one
    with mem.stores.meta.connect() as con:
        [(count,)] = con.execute(
            "SELECT count(*) FROM audit_log WHERE action = ?", [SELECTION_ACTION]
        ).fetchall()
    assert count == 1


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 120),
    n_keys=st.integers(1, 30),
    seed=st.integers(0, 2**16),
    threshold=st.sampled_from([0.2, 0.3, 0.45]),
)
def test_selection_leader_pass_on_the_gram_matrix_is_assigns(
    n: int, n_keys: int, seed: int, threshold: float
) -> None:
    """Selection's pass on the sample's Gram matrix decides as ``assign`` does on a fresh
    state: the same labels, the same merges, the same centroids (it only computes faster)."""
    from memory_core.stages.cluster.selection import leader_on_gram

    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((6, 16))
    feats = unit_rows(
        (centres[rng.integers(0, 6, n)] + 0.6 * rng.standard_normal((n, 16))).astype(np.float32)
    )
    keys = rng.integers(0, n_keys, n)
    reach = threshold + 0.25 * (keys % 2)  # some keys reach further, as error codes do
    state = LeaderState(16)
    expected, _ = assign(feats, keys, reach, state)
    gram = feats.astype(np.float64) @ feats.T.astype(np.float64)
    got, fast = leader_on_gram(feats, gram, keys, reach)
    assert np.array_equal(got, expected)
    assert fast.count == state.count
    assert np.allclose(fast.centroids[: fast.count], state.centroids[: state.count], atol=1e-5)
    far = {int(k): threshold + 0.1 for k in range(n_keys)}
    assert np.array_equal(merge_provisional(fast, 0, far), merge_provisional(state, 0, far))


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 80),
    n_keys=st.integers(1, 12),
    seed=st.integers(0, 2**16),
    thresholds=st.lists(st.floats(0.05, 0.9), min_size=2, max_size=8),
)
def test_selection_reuses_a_key_pass_only_where_it_decides_alike(
    n: int, n_keys: int, seed: int, thresholds: list[float]
) -> None:
    """Across thresholds, the key passes selection keeps (one memo per feature space) give
    exactly the labels a fresh pass gives at every threshold, in any order of thresholds and
    for keys small (Python pass) and large (numpy pass)."""
    from memory_core.stages.cluster.selection import gram_labels, key_groups

    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((4, 16))
    feats = unit_rows(
        (centres[rng.integers(0, 4, n)] + 0.7 * rng.standard_normal((n, 16))).astype(np.float32)
    )
    keys = rng.integers(0, n_keys, n)
    gram = feats.astype(np.float64) @ feats.T.astype(np.float64)
    groups = key_groups(keys)
    memo: dict = {}
    for t in thresholds:
        reach = t + 0.25 * (keys % 2)
        fresh = gram_labels(gram, keys, reach, groups)
        assert np.array_equal(gram_labels(gram, keys, reach, groups, memo), fresh)


_STEP = st.sampled_from(["a", "b", "", "a\x1fb", "\x1f", "lookup(x=1)"])


@given(st.lists(st.one_of(st.none(), st.lists(_STEP, max_size=4)), max_size=30), st.booleans())
@settings(max_examples=150, deadline=None)
def test_distinct_action_lists_group_exactly_the_equal_lists(rows, nulls) -> None:
    """The Arrow shortcut (length + joined steps) groups rows as comparing the lists would,
    including steps that contain its separator; every distinct list is listed once."""
    import pyarrow as pa

    from memory_core.stages.cluster.stage import _distinct_lists

    if nulls:
        rows = [*rows, ["a", None]]
    column = pa.chunked_array([pa.array(rows, pa.list_(pa.string()))])
    lists, inverse = _distinct_lists(column)
    assert [lists[i] for i in inverse] == [list(r or []) for r in rows]
    assert len({tuple(x) for x in lists}) == len(lists)


def test_one_blas_thread_from_any_thread_stays_one() -> None:
    """Entered from two threads in turn, BLAS runs one thread in both, during and after (the
    per-call limit used before restored the count under the other thread's products, and
    OpenBLAS's results differ in the last bits between thread counts)."""
    import threading

    from threadpoolctl import threadpool_info

    from memory_core.stages.cluster.leader import one_blas_thread

    def blas_threads() -> set[int]:  # numpy's BLAS (scipy's, loaded by sklearn, is not ours)
        return {
            i["num_threads"]
            for i in threadpool_info()
            if i["user_api"] == "blas" and "numpy" in i["filepath"]
        }

    assert blas_threads(), "numpy without a BLAS threadpool: nothing to check"
    inside, release, seen = threading.Event(), threading.Event(), []

    def other() -> None:
        with one_blas_thread():
            inside.set()
            release.wait(10)
            seen.append(blas_threads())
        seen.append(blas_threads())

    thread = threading.Thread(target=other)
    with one_blas_thread():
        thread.start()
        assert inside.wait(10)
        assert blas_threads() == {1}
    assert blas_threads() == {1}
    release.set()
    thread.join()
    assert seen == [{1}, {1}]
    with one_blas_thread():
        assert blas_threads() == {1}


def test_the_clustering_handed_to_mining_is_what_the_store_holds(mem, kit) -> None:
    """``ClusterResult.clustering`` replaces mining's read-back of the partition's clusters and
    members (``mine_partition(clustering=...)``): whatever path a night takes (first batch,
    near and far newcomers, nothing new, a recluster that changes members or none), what it
    hands over must be what ``load_partition`` would read, row for row and in its order."""
    from memory_core.stores.clusters import load_partition

    def check(result) -> None:
        assert result.clustering is not None
        stored = load_partition(mem.stores.meta, "acme", "it")
        for handed, read in zip(result.clustering, stored, strict=True):
            assert handed.schema.names == read.schema.names
            assert handed.cast(read.schema).to_pylist() == read.to_pylist()

    scenario = kit.seed_scenario()
    mem.ingest(scenario[5:])
    check(mem.cluster())  # first batch: the partition chooses its parameters
    near = kit.make_episode("near", minutes=400, text="Reset the network adapter again.")
    mem.ingest([*scenario[:5], near, printer(kit, "far", minutes=401)])
    check(mem.cluster(now=kit.NOW.replace(day=2)))  # joins and a new seed
    check(mem.cluster(now=kit.NOW.replace(day=3)))  # nothing new
    check(mem.cluster(recluster=True, now=kit.NOW.replace(day=4)))
    mem.ingest([printer(kit, f"p{i}", minutes=500 + i) for i in range(3)])
    check(mem.cluster(recluster=True, now=kit.NOW.replace(day=5)))


def test_centroids_of_another_width_rebuild_the_partition(mem, kit) -> None:
    """After the embedding model changed, an ordinary night finds the stored centroids of
    another width and rebuilds the partition; members that stay in their cluster keep their
    time."""
    scenario = kit.seed_scenario()
    mem.ingest(scenario)
    mem.cluster()
    before = load_partition_members(mem.stores.meta, "acme", "it")
    with mem.stores.meta.transaction() as con:
        con.execute("UPDATE clusters SET centroid = centroid[1:3]")
    result = mem.cluster(now=kit.NOW.replace(day=2))
    assert result.reclustered
    after = load_partition_members(mem.stores.meta, "acme", "it")
    assert after.column("episode_id").to_pylist() == before.column("episode_id").to_pylist()
    kept = [
        b == a
        for b, a, bc, ac in zip(
            before.column("assigned_at").to_pylist(), after.column("assigned_at").to_pylist(),
            before.column("cluster_id").to_pylist(), after.column("cluster_id").to_pylist(),
            strict=True,
        )
        if bc == ac
    ]  # fmt: skip
    assert kept and all(kept)
