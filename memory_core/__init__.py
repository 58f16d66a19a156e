"""memory_core: turn agents' raw episodes into trustworthy long-term memory, and forget.

A plain library (no Prefect import): stages are functions of (stores, config, run context);
``flows/`` orchestrates them. Agents read through ``Recaller`` (the read path).
"""

from memory_core.config import Settings, load_settings
from memory_core.context import Partition, RunContext
from memory_core.embed import Embedder, HashEmbedder, MiniLMEmbedder, make_embedder
from memory_core.errors import (
    ConfigError,
    DimensionMismatch,
    EmbedderMismatch,
    EpisodeConflict,
    MemoryCoreError,
    MemoryUnavailable,
    MetaLocked,
    SchemaTooNew,
    TerminalError,
    TransientError,
    ValidationFailed,
)
from memory_core.models import (
    Authority,
    Candidate,
    CandidateKind,
    CandidateStatus,
    Episode,
    Outcome,
    Provenance,
    Sensitivity,
    SourceRole,
    Status,
)
from memory_core.recall import Recaller, RecallResult
from memory_core.stores import Stores, open_stores

__all__ = [
    "Authority",
    "Candidate",
    "CandidateKind",
    "CandidateStatus",
    "ConfigError",
    "DimensionMismatch",
    "Embedder",
    "EmbedderMismatch",
    "Episode",
    "EpisodeConflict",
    "HashEmbedder",
    "MemoryCoreError",
    "MemoryUnavailable",
    "MetaLocked",
    "MiniLMEmbedder",
    "Outcome",
    "Partition",
    "Provenance",
    "RecallResult",
    "Recaller",
    "RunContext",
    "SchemaTooNew",
    "Sensitivity",
    "Settings",
    "SourceRole",
    "Status",
    "Stores",
    "TerminalError",
    "TransientError",
    "ValidationFailed",
    "load_settings",
    "make_embedder",
    "open_stores",
]
