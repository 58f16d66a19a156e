"""Choose the cluster features' weights and the join threshold per partition, without labels.

Why: a threshold tuned on one kind of data (the demo, where error codes separate problems)
merges everything on another (one airline's conversations all sit in a small cosine radius).
So each partition picks its own (goal weight, step weight, threshold) from a small grid: the
one whose clustering of a deterministic sample has the best mean silhouette (cosine, in that
setting's own feature space). Silhouette rewards clusters that are tight and apart; a
clustering with one cluster, or only singletons, has no silhouette and scores -1 (never
chosen over a real structure). Ties keep the earlier grid point (the configured defaults come
first), so the choice is deterministic. A point that scores the highest silhouette there is
(1.0) ends the search: nothing later could replace it, so the grid record lists the points
scored up to it.

The choice is made when a partition is clustered from scratch (first run, ``--recluster``, a
stale centroid dimension) and recorded with the cluster run (the stage result and an audit
event); incremental runs reuse the recorded choice, so stored centroids and new episodes stay
in one feature space.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memory_core.config import ClusterConfig
from memory_core.stages.cluster.leader import (
    CHUNK,
    LeaderState,
    assign,
    merge_provisional,
    one_blas_thread,
    unit_rows,
)

__all__ = [
    "Choice",
    "choose",
    "distances",
    "grid",
    "key_groups",
    "leader_on_gram",
    "mean_silhouette",
    "sample_rows",
]


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


def key_groups(keys: np.ndarray) -> list[np.ndarray]:
    """Row indices of each key, in processing order (keys in ascending order)."""
    if len(keys) == 0:
        return []
    order = np.argsort(keys, kind="stable")
    return np.split(order, np.flatnonzero(np.diff(keys[order])) + 1)


def leader_on_gram(
    features: np.ndarray,
    gram: np.ndarray,
    keys: np.ndarray,
    reach: np.ndarray,
    groups: list[np.ndarray] | None = None,
) -> tuple[np.ndarray, LeaderState]:
    """The leader pass of :func:`leader.assign` on a fresh state, for a sample of at most
    ``leader.CHUNK`` rows, run on the sample's Gram matrix; (labels, state).

    Why: selection runs this pass at every grid point on the same sample, and with a fresh
    state every episode goes through the sequential loop. A cluster's running sum is the sum
    of its members' rows, so its dot product with any sample row is a sum of Gram entries:
    one row of ``dots`` per cluster, updated by adding the joining row of ``gram``, and its
    norm follows from the same numbers. Each step then costs a few operations on vectors of
    the sample's length instead of products with 500-dim centroids. Same decisions as
    ``assign`` (up to float rounding): nearest centroid of the same key, joined within reach,
    else a new cluster; ties to the older cluster.
    """
    labels = gram_labels(gram, keys, reach, key_groups(keys) if groups is None else groups)
    return labels, state_of(features, labels, keys)


@dataclass(frozen=True)
class _Pass:
    """One key's leader pass, with the distances it decided on: the farthest row that joined
    its nearest earlier cluster and the nearest one that did not (it seeded its own)."""

    farthest_join: float
    nearest_seed: float
    local: list[int]
    firsts: list[int]

    def holds(self, reach: list[float]) -> bool:
        """Whether a pass with these reaches would decide every row alike (so give these
        labels, exactly): every join still within reach, every seed still beyond it."""
        return self.farthest_join <= min(reach) and self.nearest_seed > max(reach)


def gram_labels(
    gram: np.ndarray,
    keys: np.ndarray,
    reach: np.ndarray,
    groups: list[np.ndarray],
    memo: dict[int, list[_Pass]] | None = None,
) -> np.ndarray:
    """Each row's cluster (numbered by seed row, as :func:`leader.assign` numbers them) from
    one leader pass per key group on the Gram matrix.

    ``memo`` (one per feature space) keeps every key's passes: a pass depends on the reach
    only through its join-or-seed decisions, so when another threshold decides every row of
    the key the same way (each row's distance to its nearest earlier cluster on the same side
    of the reach) its labels are the stored ones, exactly; selection's thresholds mostly
    decide a key alike, and the pass is most of selection's cost."""
    n = len(keys)
    seeds: list[tuple[int, int, int]] = []  # (seed row, group, local label)
    passes: list[tuple[np.ndarray, list[int]]] = []  # (rows, local labels)
    for index, rows in enumerate(groups):
        # episodes of different keys never share a cluster: one pass per key
        if len(rows) == 1:
            local, firsts = [0], [0]
        else:
            local, firsts = _key_pass(gram, rows, reach[rows], memo, index)
        seeds.extend((int(rows[f]), len(passes), c) for c, f in enumerate(firsts))
        passes.append((rows, local))
    seeds.sort()  # clusters numbered in creation order, by their seed row, as assign does
    maps = [[0] * (max(local) + 1) for _, local in passes]
    for cluster, (_seed, group, local_label) in enumerate(seeds):
        maps[group][local_label] = cluster
    labels_arr = np.zeros(n, dtype=np.int64)
    for (rows, local), mapping in zip(passes, maps, strict=True):
        labels_arr[rows] = [mapping[c] for c in local]
    return labels_arr


def _key_pass(
    gram: np.ndarray,
    rows: np.ndarray,
    reach: np.ndarray,
    memo: dict[int, list[_Pass]] | None,
    index: int,
) -> tuple[list[int], list[int]]:
    known = memo.setdefault(index, []) if memo is not None else []
    reach_list = reach.tolist()
    for done in known:
        if done.holds(reach_list):
            return done.local, done.firsts
    sub = gram[np.ix_(rows, rows)]
    if len(rows) <= _SMALL:
        local, firsts, dists = _small_pass(sub.tolist(), reach_list)
    else:
        local, firsts, dists = _one_key_pass(sub, reach)
    if memo is not None:
        seeded = set(firsts)
        joins = [d for i, d in enumerate(dists) if i not in seeded]
        seeds = [d for i, d in enumerate(dists) if i in seeded and not math.isnan(d)]
        known.append(_Pass(max(joins, default=-math.inf), min(seeds, default=math.inf),
                           local, firsts))  # fmt: skip
    return local, firsts


def state_of(features: np.ndarray, labels: np.ndarray, keys: np.ndarray) -> LeaderState:
    """The leader state of a finished pass: each cluster's exact sum of its rows, its unit
    centroid, size and key (clusters numbered as ``labels`` number them)."""
    n = len(features)
    count = int(labels.max()) + 1 if n else 0
    state = LeaderState(features.shape[1])
    if count:
        onehot = np.zeros((count, n), dtype=features.dtype)
        onehot[labels, np.arange(n)] = 1.0
        sums = (onehot @ features).astype(np.float64)  # exact: sums of rows, as assign keeps
        ckeys = np.zeros(count, dtype=np.int64)
        ckeys[labels] = keys
        state._grow(count)
        state.sums[:count] = sums
        state.centroids[:count] = unit_rows(sums)
        state.sizes[:count] = np.bincount(labels, minlength=count)
        state.keys[:count] = ckeys
        state.count = count
    return state


_SMALL = 12  # up to this many rows of one key, plain Python beats small numpy calls


def _small_pass(
    gram: list[list[float]], reach: list[float]
) -> tuple[list[int], list[int], list[float]]:
    """:func:`_one_key_pass` on Python lists, for a few rows (same arithmetic, same ties)."""
    labels: list[int] = []
    firsts: list[int] = []
    decided: list[float] = []
    dots: list[list[float]] = []  # [c][i]: row i . sum of cluster c
    inv: list[float] = []
    sq: list[float] = []
    for i, row in enumerate(gram):
        best, j = -math.inf, -1
        for c in range(len(dots)):
            sim = dots[c][i] * inv[c]
            if sim > best:
                best, j = sim, c
        decided.append(1.0 - best if j >= 0 else math.nan)
        if j >= 0 and 1.0 - best <= reach[i]:
            labels.append(j)
            sq[j] += 2.0 * dots[j][i] + row[i]
            dots[j] = [a + b for a, b in zip(dots[j], row, strict=True)]
            inv[j] = 1.0 / max(math.sqrt(max(sq[j], 0.0)), 1e-12)
            continue
        labels.append(len(dots))
        firsts.append(i)
        dots.append(list(row))
        sq.append(row[i])
        inv.append(1.0 / max(math.sqrt(max(row[i], 0.0)), 1e-12))
    return labels, firsts, decided


def _one_key_pass(gram: np.ndarray, reach: np.ndarray) -> tuple[list[int], list[int], list[float]]:
    """The sequential leader pass over rows of one key (see :func:`leader_on_gram`):
    each row's cluster (0, 1, ... in creation order), each cluster's first row, and each
    row's distance to its nearest earlier cluster (nan for the first row)."""
    n = len(gram)
    labels = [0] * n
    dots = np.zeros((n, n), dtype=np.float64)  # [i, c]: row i . sum of cluster c
    inv = np.zeros(n, dtype=np.float64)  # 1 / |sum of cluster c|
    sq = [0.0] * n  # |sum of cluster c|^2
    reach_list, diag = reach.tolist(), np.diagonal(gram).tolist()
    firsts: list[int] = []
    decided = [math.nan] * n
    count = 0
    for i in range(n):
        if count:
            row = dots[i, :count]
            sims = row * inv[:count]
            j = int(sims.argmax())
            decided[i] = 1.0 - float(sims[j])
            if decided[i] <= reach_list[i]:
                labels[i] = j
                sq[j] += 2.0 * float(row[j]) + diag[i]
                dots[:, j] += gram[i]
                inv[j] = 1.0 / max(math.sqrt(max(sq[j], 0.0)), 1e-12)
                continue
        labels[i] = count
        firsts.append(i)
        dots[:, count] = gram[i]
        sq[count] = diag[i]
        inv[count] = 1.0 / max(math.sqrt(max(diag[i], 0.0)), 1e-12)
        count += 1
    return labels, firsts, decided


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
    with one_blas_thread():
        return _choose(config, features_for, keys, has_code)


_PERFECT = 1.0 - 1e-9  # the highest mean silhouette there is


@dataclass
class _Space:
    """One (goal weight, step weight) setting of the sample: its features, Gram matrix and
    distances, the key passes run in it and the scores of the clusterings seen in it."""

    feats: np.ndarray
    gram: np.ndarray
    dist: np.ndarray
    passes: dict[int, list[_Pass]] = field(default_factory=dict)
    scored: dict[bytes, tuple[float, int]] = field(default_factory=dict)


def _choose(
    config: ClusterConfig,
    features_for: Callable[[float, float], np.ndarray],
    keys: np.ndarray,
    has_code: np.ndarray,
) -> Choice:
    n = len(keys)
    spaces: dict[tuple[float, float], _Space] = {}
    best: tuple[float, tuple[float, float, float]] | None = None
    scores = []
    bonus = np.where(has_code, config.error_code_weight, 0.0)
    # judge a clustering in the metric it is built with: two episodes sharing a non-empty
    # error code are error_code_weight closer (the credit the leader pass gives them)
    credit = (keys[:, None] == keys[None, :]) & has_code[:, None] & has_code[None, :]
    credit = credit * np.float32(config.error_code_weight)
    groups = key_groups(keys)
    for g, s, t in grid(config):
        if (g, s) not in spaces:
            feats = features_for(g, s)
            gram = feats.astype(np.float64) @ feats.T.astype(np.float64)
            spaces[(g, s)] = _Space(feats, gram, np.clip(1.0 - gram - credit, 0.0, 2.0))
        space = spaces[(g, s)]
        reach = {int(k): t + config.error_code_weight for k in np.unique(keys)}
        for k in np.unique(keys[~has_code]):
            reach[int(k)] = t
        if n <= CHUNK:
            labels = gram_labels(space.gram, keys, t + bonus, groups, space.passes)
            labels = merge_provisional(state_of(space.feats, labels, keys), 0, reach)[labels]
        else:  # beyond one chunk assign matches whole chunks at once: keep its exact pass
            state = LeaderState(space.feats.shape[1])
            labels, _ = assign(space.feats, keys, t + bonus, state)
            labels = merge_provisional(state, 0, reach)[labels]
        # the score is an exact function of the labels in this space: thresholds that end
        # in the same clustering are scored once
        seen = labels.tobytes()
        if seen not in space.scored:
            space.scored[seen] = (
                mean_silhouette(space.feats, labels, space.dist),
                len(np.unique(labels)),
            )
        score, clusters = space.scored[seen]
        scores.append({"goal_weight": g, "steps_weight": s, "threshold": t,
                       "silhouette": round(score, 4), "clusters": clusters})  # fmt: skip
        if best is None or score > best[0] + 1e-9:
            best = (score, (g, s, t))
        if best[0] >= _PERFECT:
            break  # no later point can score higher, and ties keep the earlier one
    assert best is not None
    score, (g, s, t) = best
    return Choice(g, s, t, "silhouette", score, n, scores)


def choice_json(choice: Choice) -> str:
    return json.dumps(choice.as_dict(), sort_keys=True)
