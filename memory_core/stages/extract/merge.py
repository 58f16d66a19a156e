"""Near-duplicate facts in different words merge: same subject, close predicate + object.

"enjoys: hiking in the mountains" from one session and "likes: mountain hiking" from another
are one fact with two pieces of evidence, which is what lets evidence accumulate across
sessions. Within one (tenant, namespace, subject) -- never across subjects, never across
tenants -- facts whose ``predicate object`` embeddings have cosine >= ``merge_similarity``
(or that are equal after normalisation) are joined (single linkage, union-find). Each group's
representative (most own evidence, then earliest, then smallest id) gives every member its
``group_predicate`` / ``group_object``, which is what the claims path groups by.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memory_core.embed import Embedder
from memory_core.stages.extract.rules import norm
from memory_core.stores.extract import ExtractedFactRow

__all__ = ["merge_groups"]


def _text(fact: ExtractedFactRow) -> str:
    return f"{fact.predicate.replace('_', ' ')} {fact.object}"


def _find(parent: list[int], i: int) -> int:
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


def merge_groups(
    facts: Sequence[ExtractedFactRow], embedder: Embedder, *, similarity: float
) -> dict[str, tuple[str, str]]:
    """fact id -> (representative predicate, object), for every fact given."""
    by_subject: dict[tuple[str, str, str], list[ExtractedFactRow]] = {}
    for f in facts:
        by_subject.setdefault((f.tenant_id, f.namespace, f.subject_id), []).append(f)
    out: dict[str, tuple[str, str]] = {}
    for _, items in sorted(by_subject.items()):
        items = sorted(items, key=lambda f: f.fact_id)
        parent = list(range(len(items)))
        keys = [(f.predicate, norm(f.object)) for f in items]
        first: dict[tuple[str, str], int] = {}
        for i, key in enumerate(keys):
            if key in first:
                parent[_find(parent, i)] = _find(parent, first[key])
            else:
                first[key] = i
        if len(items) > 1:
            vectors = np.asarray(embedder.embed([_text(f) for f in items]), dtype=np.float32)
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors = vectors / np.where(norms == 0, 1, norms)
            close = np.argwhere(np.triu(vectors @ vectors.T, k=1) >= similarity)
            for i, j in close:
                a, b = _find(parent, int(i)), _find(parent, int(j))
                if a != b:
                    parent[max(a, b)] = min(a, b)
        groups: dict[int, list[ExtractedFactRow]] = {}
        for i, f in enumerate(items):
            groups.setdefault(_find(parent, i), []).append(f)
        for members in groups.values():
            rep = min(
                members,
                key=lambda f: (-len(f.self_evidence), f.valid_from is None, f.valid_from or 0,
                               f.fact_id),
            )  # fmt: skip
            for f in members:
                out[f.fact_id] = (rep.predicate, rep.object)
    return out
