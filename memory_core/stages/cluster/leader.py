"""Leader clustering on numpy: the pure, vectorised core of the cluster stage.

Kept apart from ``stage.py`` (which does the I/O and id bookkeeping) so the algorithm can be
read, tested and benchmarked on plain arrays. See ``stage.py`` for why the features and the
distance are what they are.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from threadpoolctl import ThreadpoolController

from memory_core.embed import HashEmbedder

__all__ = [
    "CHUNK",
    "GOAL_DIM",
    "STEPS_DIM",
    "LeaderState",
    "assign",
    "combine",
    "episode_features",
    "goal_block",
    "merge_provisional",
    "one_blas_thread",
    "seeds",
    "steps_block",
    "unit_rows",
]

GOAL_DIM = 128
STEPS_DIM = 64
CHUNK = 1024


_BLAS_GUARD = threading.Lock()
_blas_controller: Any = None


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """One BLAS thread in this process from the first clustering on (not restored after).

    Why: the products here are small (a chunk of 1,024 rows against a few hundred centroids),
    so a pool of BLAS threads per product costs more than it gives: placing a 10k partition
    took 0.21 CPU s with OpenBLAS's 2 threads and 0.14 with one (same labels; BENCHMARKS.md,
    issue 19 s26); the nightly's worker threads are the parallelism. And the count must not
    change under a running product: it is process-wide, and OpenBLAS's results differ in the
    last bits between 1 and 2 threads (a distance to a centroid, so a decision at the
    threshold). The per-call ``threadpool_limits`` used before restored the count while the
    other worker thread's products ran (and a restore from a thread other than the one that
    set the limit did not take effect with this OpenBLAS, 0.3.31): which count a product ran on
    depended on timing. Set on every entry (another library may have restored it since),
    never restored: every product of every run is computed alike."""
    global _blas_controller
    with _BLAS_GUARD:
        if _blas_controller is None:
            # finds the loaded libraries once (~6 ms): numpy's BLAS, which these products use
            _blas_controller = ThreadpoolController()
        _blas_controller.limit(limits=1, user_api="blas")
    yield


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero); a new array."""
    return _unit_in_place(np.array(matrix, copy=True))


def _unit_in_place(matrix: np.ndarray) -> np.ndarray:
    # einsum: no squared temporary (np.linalg.norm made one: ~4x the time on 10k x 576)
    norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix))
    np.maximum(norms, 1e-12, out=norms)
    matrix /= norms[:, None].astype(matrix.dtype, copy=False)
    return matrix


def _bucket(text: str) -> tuple[int, float]:
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest[:4], "little") % STEPS_DIM, (1.0 if digest[4] & 1 else -1.0)


def steps_block(signatures: list[tuple[tuple[str, float], ...]]) -> np.ndarray:
    """Unit rows of a hashed bag of abstract step signatures (``(signature, weight)`` sets).

    What the agent did, independent of the words it used: two runs that looked up a user and
    changed a reservation share most of this block whatever the conversation said. Episodes
    without steps get a zero row (the block then adds nothing to their distance).
    """
    out = np.zeros((len(signatures), STEPS_DIM), dtype=np.float32)
    cache: dict[str, tuple[int, float]] = {}
    for row, sigs in enumerate(signatures):
        for sig, weight in sigs:
            if sig not in cache:
                cache[sig] = _bucket(sig)
            bucket, sign = cache[sig]
            out[row, bucket] += sign * weight
    return _unit_in_place(out)  # a zero row stays zero


def goal_block(goals: list[str | None]) -> np.ndarray:
    """Hashed bag of words of each goal (unit rows; zeros for an empty goal)."""
    block = np.zeros((len(goals), GOAL_DIM), dtype=np.float32)
    texts = [g.strip() if g else "" for g in goals]
    unique = sorted({t for t in texts if t})
    if unique:
        index = {t: i for i, t in enumerate(unique)}
        embedded = HashEmbedder(GOAL_DIM).embed(unique)
        rows = [i for i, t in enumerate(texts) if t]
        block[rows] = embedded[[index[texts[i]] for i in rows]]
    return block


def combine(
    vectors: np.ndarray,
    goals: np.ndarray,
    steps: np.ndarray | None,
    goal_weight: float,
    steps_weight: float,
) -> np.ndarray:
    """Unit rows of [unit vector, goal_weight * goal block, steps_weight * step block].

    Written into one preallocated matrix and normalised in place (no stacked copies)."""
    n, dv = vectors.shape
    out = np.zeros((n, dv + GOAL_DIM + STEPS_DIM), dtype=np.float32)
    out[:, :dv] = vectors
    if goal_weight > 0:
        np.multiply(goals, np.float32(goal_weight), out=out[:, dv : dv + GOAL_DIM])
    if steps is not None and steps_weight > 0:
        np.multiply(steps, np.float32(steps_weight), out=out[:, dv + GOAL_DIM :])
    return _unit_in_place(out)


def episode_features(
    vectors: np.ndarray,
    goals: list[str | None],
    goal_weight: float,
    steps: np.ndarray | None = None,
    steps_weight: float = 0.0,
) -> np.ndarray:
    """Unit rows of [episode vector, goal_weight * hashed goal, steps_weight * step block].

    Empty goals and episodes without steps add nothing to their block. The step block is
    always present (zeros when ``steps`` is None) so stored centroids keep one dimension.
    """
    vectors = unit_rows(np.nan_to_num(np.asarray(vectors, dtype=np.float32)))
    goals_hashed = (
        goal_block(goals)
        if goal_weight > 0 and goals
        else np.zeros((len(vectors), GOAL_DIM), dtype=np.float32)
    )
    return combine(vectors, goals_hashed, steps, goal_weight, steps_weight)


@dataclass
class LeaderState:
    """Growing centroid matrix with running sums; rows are clusters in creation order."""

    dim: int
    centroids: np.ndarray = field(init=False)
    sums: np.ndarray = field(init=False)
    sizes: np.ndarray = field(init=False)
    keys: np.ndarray = field(init=False)
    count: int = 0

    def __post_init__(self) -> None:
        self.centroids = np.zeros((16, self.dim), dtype=np.float32)
        self.sums = np.zeros((16, self.dim), dtype=np.float64)
        self.sizes = np.zeros(16, dtype=np.int64)
        self.keys = np.zeros(16, dtype=np.int64)

    def _grow(self, need: int) -> None:
        cap = len(self.sizes)
        if need <= cap:
            return
        new_cap = max(need, cap * 2)
        for name in ("centroids", "sums", "sizes", "keys"):
            old = getattr(self, name)
            new = np.zeros((new_cap, *old.shape[1:]), dtype=old.dtype)
            new[: self.count] = old[: self.count]
            setattr(self, name, new)

    def load(self, centroids: np.ndarray, sizes: np.ndarray, keys: np.ndarray) -> None:
        """Append existing clusters: unit centroids standing for ``sizes`` members each."""
        n = len(centroids)
        self._grow(self.count + n)
        rows = slice(self.count, self.count + n)
        self.centroids[rows] = unit_rows(np.asarray(centroids, dtype=np.float32))
        self.sums[rows] = self.centroids[rows].astype(np.float64) * sizes[:, None]
        self.sizes[rows] = sizes
        self.keys[rows] = keys
        self.count += n

    def add(self, centroid: np.ndarray, size: int, key: int) -> int:
        self._grow(self.count + 1)
        row = self.count
        self.centroids[row] = centroid
        self.sums[row] = centroid.astype(np.float64) * size
        self.sizes[row] = size
        self.keys[row] = key
        self.count += 1
        return row

    def join(self, row: int, feature: np.ndarray) -> None:
        total = self.sums[row]
        total += feature
        self.sizes[row] += 1
        # what np.linalg.norm computes for a 1-D float array, without its dispatch overhead
        self.centroids[row] = total / max(math.sqrt(total @ total), 1e-12)

    def join_many(self, rows: np.ndarray, features: np.ndarray) -> None:
        if len(rows) == 0:
            return
        order = np.argsort(rows, kind="stable")
        touched, starts = np.unique(rows[order], return_index=True)
        # segment sums (np.add.at is an order of magnitude slower on 2-D data)
        self.sums[touched] += np.add.reduceat(features[order].astype(np.float64), starts, axis=0)
        self.sizes[touched] += np.diff(np.append(starts, len(rows)))
        self.centroids[touched] = unit_rows(self.sums[touched]).astype(np.float32)


def assign(
    features: np.ndarray, keys: np.ndarray, reach: np.ndarray, state: LeaderState
) -> tuple[np.ndarray, np.ndarray]:
    """Leader clustering of ``features`` (already in processing order) into ``state``.

    Returns each episode's cluster row and its distance to that centroid when it joined.
    """
    n = len(features)
    labels = np.full(n, -1, dtype=np.int64)
    dists = np.zeros(n, dtype=np.float64)
    for start in range(0, n, CHUNK):
        stop = min(start + CHUNK, n)
        chunk, ckeys, creach = features[start:stop], keys[start:stop], reach[start:stop]
        k0 = state.count
        matched = np.zeros(stop - start, dtype=bool)
        if k0:
            sims = chunk @ state.centroids[:k0].T
            sims[ckeys[:, None] != state.keys[None, :k0]] = -np.inf
            best = np.argmax(sims, axis=1)
            best_d = 1.0 - sims[np.arange(stop - start), best]
            matched = best_d <= creach
            labels[start:stop][matched] = best[matched]
            dists[start:stop][matched] = best_d[matched]
        for i in np.flatnonzero(~matched):
            feature = chunk[i]
            if state.count > k0:
                sims_new = state.centroids[k0 : state.count] @ feature
                sims_new[state.keys[k0 : state.count] != ckeys[i]] = -np.inf
                j = int(np.argmax(sims_new))
                dist = 1.0 - float(sims_new[j])
                if dist <= creach[i]:
                    labels[start + i] = k0 + j
                    dists[start + i] = dist
                    state.join(k0 + j, feature)
                    continue
            labels[start + i] = state.add(feature, 1, int(ckeys[i]))
            dists[start + i] = 0.0
        state.join_many(labels[start:stop][matched], chunk[matched])
    return labels, dists


def seeds(labels: np.ndarray, first_row: int, count: int) -> dict[int, int]:
    """For each cluster row >= first_row: the index of its first member (its seed)."""
    rows, first = np.unique(labels, return_index=True)
    keep = (rows >= first_row) & (rows < count)
    return {int(r): int(i) for r, i in zip(rows[keep], first[keep], strict=True)}


def merge_provisional(state: LeaderState, first: int, reach_of_key: dict[int, float]) -> np.ndarray:
    """Fold clusters seeded in this run (rows >= ``first``) into their nearest neighbour.

    A leader pass is order-dependent: two early episodes of one problem that happen to be
    far apart seed two clusters, and both then grow. Centroids average the wording away, so
    a provisional cluster whose centroid lies within reach of another cluster's centroid (same
    key) is folded into it. Rounds repeat until nothing merges; in each round every cluster
    takes part in at most one merge, closest pairs first, so the result is deterministic.
    Clusters older than ``first`` never merge with each other (their members stay put).
    Returns ``target[row]``: the row each original row ended up in (dead rows point onward).
    """
    target = np.arange(state.count)
    alive = np.ones(state.count, dtype=bool)
    while True:
        rows = np.flatnonzero(alive)
        provisional = rows[rows >= first]
        if len(provisional) == 0:
            break
        pairs: list[tuple[float, int, int]] = []
        cents = state.centroids[rows]
        for start in range(0, len(provisional), CHUNK):
            block = provisional[start : start + CHUNK]
            sims = state.centroids[block] @ cents.T
            sims[state.keys[block][:, None] != state.keys[rows][None, :]] = -np.inf
            sims[block[:, None] == rows[None, :]] = -np.inf
            best = np.argmax(sims, axis=1)
            dist = 1.0 - sims[np.arange(len(block)), best].astype(np.float64)
            reach = np.array([reach_of_key.get(int(k), 0.0) for k in state.keys[block]])
            near = np.flatnonzero(dist <= reach)
            others = rows[best[near]]
            pairs.extend(
                zip(
                    np.round(dist[near], 6).tolist(),
                    np.minimum(block[near], others).tolist(),
                    np.maximum(block[near], others).tolist(),
                    strict=True,
                )
            )
        if not pairs:
            break
        busy: set[int] = set()
        merged = False
        for _dist, a, b in sorted(set(pairs)):
            if a in busy or b in busy:
                continue
            busy.update((a, b))
            # the older cluster (smaller row: existing, or seeded first) survives
            state.sums[a] += state.sums[b]
            state.sizes[a] += state.sizes[b]
            state.centroids[a] = unit_rows(state.sums[a : a + 1])[0]
            alive[b] = False
            target[b] = a
            merged = True
        if not merged:
            break
    for row in range(len(target)):  # follow chains to the final survivor
        while target[target[row]] != target[row]:
            target[row] = target[target[row]]
    return target
