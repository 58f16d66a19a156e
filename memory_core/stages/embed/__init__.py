"""Embed: fill the vectors of episodes that were written without one, in bulk.

Guarantees: every episode stored with a null vector (ingest with ``embed.at_ingest = false``,
MCP saves) gets one from the configured embedder, through the embedding cache (same text, same
model: embedded once); nothing else about the row changes (status, text, validity), a row
deleted meanwhile is not brought back, and a store holding another model's vectors is refused
(``EmbedderMismatch``). Run by ``memctl embed`` and as the nightly's first task.

A null vector means "not embedded yet": the read path's vector leg skips such rows (Lance's
nearest-neighbour search ignores nulls) while its full-text leg finds them; clustering takes
only embedded episodes (the rest stay unclustered and are placed the night after they are
embedded); digests average only their sources' vectors.

Modules: ``stage`` (scan pending rows, embed through the cache, one commit per batch).
"""

from memory_core.stages._exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__, {"stage": ["EmbedResult", "embed_episodes", "pending_embedding"]}
)
