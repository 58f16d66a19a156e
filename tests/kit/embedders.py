"""Embedders for tests that need chosen similarities without loading a semantic model."""

from __future__ import annotations

from typing import Any

from memory_core.embed import HashEmbedder


class TableEmbedder:
    """Fixed vectors for named texts (paraphrases share one), hash vectors for the rest:
    paraphrase merging is tested without loading a semantic model."""

    def __init__(self, same: list[set[str]], dim: int = 384) -> None:
        self.inner = HashEmbedder(dim)
        self.same = same

    @property
    def version(self) -> str:
        return "table-test"

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, texts: list[str]) -> Any:
        vectors = self.inner.embed(list(texts))
        for i, text in enumerate(texts):
            for n, group in enumerate(self.same):
                if text in group:
                    vectors[i] = self.inner.embed([f"group {n}"])[0]
        return vectors
