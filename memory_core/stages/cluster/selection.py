"""Choose the cluster features' weights and the join threshold per partition, without labels.

Why: a threshold tuned on one kind of data (the demo, where error codes separate problems)
merges everything on another (one airline's conversations all sit in a small cosine radius).
So each partition picks its own (goal weight, step weight, threshold) from a small grid: the
one whose clustering of a deterministic sample has the best mean silhouette (cosine, in that
setting's own feature space). Silhouette rewards clusters that are tight and apart; a
clustering with one cluster, or only singletons, has no silhouette and scores -1 (never
chosen over a real structure). Ties keep the earlier grid point (the configured defaults come
first), so the choice is deterministic.

The choice is made when a partition is clustered from scratch (first run, ``--recluster``, a
stale centroid dimension) and recorded with the cluster run (the stage result and an audit
event); incremental runs reuse the recorded choice, so stored centroids and new episodes stay
in one feature space.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from memory_core.config import ClusterConfig
from memory_core.stages.cluster.leader import LeaderState, assign, merge_provisional

__all__ = ["Choice", "choose", "distances", "grid", "mean_silhouette", "sample_rows"]


@dataclass(frozen=True)
class Choice:
    """The parameters a partition is clustered with, and how they were chosen."""

    goal_weight: float
    steps_weight: float
    threshold: float
    method: str = "config"
    score: float | None = None
    sample: int = 0
    scores: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "goal_weight": self.goal_weight,
            "steps_weight": self.steps_weight,
            "threshold": self.threshold,
            "method": self.method,
            "score": None if self.score is None else round(self.score, 4),
            "sample": self.sample,
            "grid": self.scores,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Choice:
        return cls(
            float(data["goal_weight"]),
            float(data["steps_weight"]),
            float(data["threshold"]),
            str(data.get("method", "recorded")),
            data.get("score"),
            int(data.get("sample", 0)),
        )

    @classmethod
    def default(cls, config: ClusterConfig) -> Choice:
        return cls(config.goal_weight, config.steps_weight, config.threshold)


def grid(config: ClusterConfig) -> list[tuple[float, float, float]]:
    """(goal weight, step weight, threshold) points; the configured values first."""
    first = (config.goal_weight, config.steps_weight, config.threshold)
    points = [
        (g, s, t)
        for g in config.select_goal_weights
        for s in config.select_steps_weights
        for t in config.select_thresholds
    ]
    return [first, *[p for p in points if p != first]]


def sample_rows(n: int, size: int) -> np.ndarray:
    """Evenly spaced row indices (processing order), at most ``size``: deterministic."""
    if n <= size:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, size).round().astype(np.int64))


def distances(features: np.ndarray) -> np.ndarray:
    """Pairwise cosine distances of unit rows (float32: the sample is small)."""
    return np.clip(1.0 - features @ features.T, 0.0, 2.0)


def mean_silhouette(
    features: np.ndarray, labels: np.ndarray, dist: np.ndarray | None = None
) -> float:
    """Mean silhouette with cosine distance; -1 without at least two clusters of >1 point.

    Singletons score 0 (the usual convention), so a clustering of mostly singletons scores
    near 0, below any clustering with real, separated groups. ``dist`` (from
    :func:`distances`) can be passed to reuse one matrix across thresholds.
    """
    _, labels = np.unique(labels, return_inverse=True)
    k, n = int(labels.max()) + 1 if len(labels) else 0, len(labels)
    counts = np.bincount(labels, minlength=k)
    if k < 2 or k >= n or (counts > 1).sum() < 1:
        return -1.0
    dist = distances(features) if dist is None else dist
    onehot = np.zeros((n, k), dtype=dist.dtype)
    onehot[np.arange(n), labels] = 1.0
    sums = dist @ onehot  # (n, k): summed distance of each point to each cluster
    own = counts[labels]
    a = sums[np.arange(n), labels] / np.maximum(own - 1, 1)
    means = sums / np.maximum(counts, 1)[None, :]
    means[np.arange(n), labels] = np.inf
    b = means.min(axis=1)
    s = np.where(own > 1, (b - a) / np.maximum(np.maximum(a, b), 1e-12), 0.0)
    return float(s.mean())


def choose(
    config: ClusterConfig,
    features_for: Callable[[float, float], np.ndarray],
    keys: np.ndarray,
    has_code: np.ndarray,
) -> Choice:
    """Cluster the sample at every grid point; keep the best mean silhouette.

    ``features_for(goal_weight, steps_weight)`` returns the sample's unit feature rows (in
    processing order); ``keys`` are their error-code keys and ``has_code`` whether the code is
    non-empty (it widens the reach by ``error_code_weight``, as in the real pass).
    """
    n = len(keys)
    if not config.select or n < 4:
        return Choice.default(config)
    # small matrices: one BLAS thread is faster, and on a shared machine a pool of threads
    # per product was measured 10x slower (bench/consolidate.py, load ~14)
    with threadpool_limits(limits=1, user_api="blas"):
        return _choose(config, features_for, keys, has_code)


def _choose(
    config: ClusterConfig,
    features_for: Callable[[float, float], np.ndarray],
    keys: np.ndarray,
    has_code: np.ndarray,
) -> Choice:
    n = len(keys)
    spaces: dict[tuple[float, float], tuple[np.ndarray, np.ndarray]] = {}
    best: tuple[float, tuple[float, float, float]] | None = None
    scores = []
    bonus = np.where(has_code, config.error_code_weight, 0.0)
    # judge a clustering in the metric it is built with: two episodes sharing a non-empty
    # error code are error_code_weight closer (the credit the leader pass gives them)
    credit = (keys[:, None] == keys[None, :]) & has_code[:, None] & has_code[None, :]
    credit = credit * np.float32(config.error_code_weight)
    for g, s, t in grid(config):
        if (g, s) not in spaces:
            feats = features_for(g, s)
            spaces[(g, s)] = (feats, np.clip(distances(feats) - credit, 0.0, 2.0))
        feats, dist = spaces[(g, s)]
        state = LeaderState(feats.shape[1])
        labels, _ = assign(feats, keys, t + bonus, state)
        reach = {int(k): t + config.error_code_weight for k in np.unique(keys)}
        for k in np.unique(keys[~has_code]):
            reach[int(k)] = t
        labels = merge_provisional(state, 0, reach)[labels]
        score = mean_silhouette(feats, labels, dist)
        clusters = len(np.unique(labels))
        scores.append({"goal_weight": g, "steps_weight": s, "threshold": t,
                       "silhouette": round(score, 4), "clusters": clusters})  # fmt: skip
        if best is None or score > best[0] + 1e-9:
            best = (score, (g, s, t))
    assert best is not None
    score, (g, s, t) = best
    return Choice(g, s, t, "silhouette", score, n, scores)


def choice_json(choice: Choice) -> str:
    return json.dumps(choice.as_dict(), sort_keys=True)
