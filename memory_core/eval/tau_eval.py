"""Measure clustering and counterexample mining on tau-bench trajectories.

The pipeline sees only what the ``openai-chat`` adapter makes of each run (message episodes and
one trajectory per run: goal, tool calls with arguments, conditions from tool results);
the gold intents (sets of gold action names) are used here, after the fact, to score:
ARI and NMI of our clusters against intents, the same for k-means given the true number of
intents on the same vectors (a strong baseline: it is told k), and how many failed trials end
up as counterexamples of a candidate in their own intent.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

from memory_core.config import Settings
from memory_core.context import Partition, RunContext
from memory_core.embed import Embedder
from memory_core.eval.tau_bench import convert_tau_bench, load_tau_bench
from memory_core.stages.cluster import cluster_partition, list_clusters
from memory_core.stages.embed import embed_episodes
from memory_core.stages.ingest import ingest_records
from memory_core.stages.mine import mine_partition
from memory_core.stores import open_stores
from memory_core.stores.candidates import list_candidates

__all__ = ["TauEvaluation", "evaluate_tau_bench"]


@dataclass(frozen=True)
class TauEvaluation:
    episodes: int
    intents: int
    clusters: int
    ari: float
    nmi: float
    kmeans_ari: float
    kmeans_nmi: float
    failed_trials: int
    failed_as_counterexample_in_intent: int
    failed_as_counterexample_any: int
    candidates_passing: int
    candidates_auto_rejected: int

    def as_dict(self) -> dict[str, Any]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def evaluate_tau_bench(
    path: Path, settings: Settings, *, embedder: Embedder, seed: int = 0
) -> TauEvaluation:
    """Convert, ingest into ``settings.home``, cluster and mine; then score with the labels."""
    conversion = convert_tau_bench(load_tau_bench(path))
    stores = open_stores(settings)
    stores.lance.ensure_tables(embedder.dim, embedder=embedder.version)
    last = max(
        datetime.fromisoformat(e["occurred_at"].replace("Z", "+00:00")) for e in conversion.episodes
    )
    ctx = RunContext(now=(last + timedelta(days=1)).astimezone(UTC), run_id="tau-eval")
    ingest_records(
        stores,
        settings,
        ctx,
        [json.dumps(e) for e in conversion.episodes],
        embedder=embedder,
        source=path.name,
    )
    embed_episodes(stores, settings, ctx, embedder=embedder)  # as the nightly does first
    partitions = sorted({(e["tenant_id"], e["namespace"]) for e in conversion.episodes})
    for tenant, namespace in partitions:
        partition = Partition(tenant, namespace)
        cluster_partition(stores, settings.cluster, ctx, partition, steps=settings.steps)
        mine_partition(stores, settings, ctx, partition)

    members = {m: c["cluster_id"] for c in list_clusters(stores.meta) for m in c["member_ids"]}
    ids = [e["episode_id"] for e in conversion.trajectories]  # runs, not their messages
    truth = [conversion.intent_of_episode[i] for i in ids]
    ours = [members.get(i, f"unclustered:{i}") for i in ids]

    table = stores.lance.scan("episodes", columns=["episode_id", "vector"])
    vectors = dict(
        zip(table.column("episode_id").to_pylist(), table.column("vector").to_pylist(), strict=True)
    )
    matrix = np.asarray([vectors[i] for i in ids], dtype=np.float32)
    k = len(set(truth))
    kmeans = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(matrix)

    outcome = {e["episode_id"]: e["outcome"] for e in conversion.trajectories}
    failed = [i for i in ids if outcome[i] == "failure"]
    candidates = list_candidates(stores.meta)
    in_intent: set[str] = set()
    anywhere: set[str] = set()
    for cand in candidates:
        if not cand.support_ids:
            continue
        intent = Counter(
            conversion.intent_of_episode.get(s, "") for s in cand.support_ids
        ).most_common(1)[0][0]
        for cid in cand.counterexample_ids:
            anywhere.add(cid)
            if conversion.intent_of_episode.get(cid) == intent:
                in_intent.add(cid)
    procedural = [c for c in candidates if c.kind.value == "procedural"]
    return TauEvaluation(
        episodes=len(ids),
        intents=k,
        clusters=len(set(ours)),
        ari=float(adjusted_rand_score(truth, ours)),
        nmi=float(normalized_mutual_info_score(truth, ours)),
        kmeans_ari=float(adjusted_rand_score(truth, kmeans)),
        kmeans_nmi=float(normalized_mutual_info_score(truth, kmeans)),
        failed_trials=len(failed),
        failed_as_counterexample_in_intent=len(in_intent & set(failed)),
        failed_as_counterexample_any=len(anywhere & set(failed)),
        candidates_passing=sum(c.status.value != "auto_rejected" for c in procedural),
        candidates_auto_rejected=sum(c.status.value == "auto_rejected" for c in procedural),
    )
