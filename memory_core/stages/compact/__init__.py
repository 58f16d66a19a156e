"""Compact: episodes past retention are folded into digests: per cluster, or, for sessions
whose facts the extract stage has taken, one digest per whole session.

Guarantees: a digest keeps one line and one provenance entry per source, so forgetting can take
a source back out of it; the text is a deterministic template; an optional Claude summary sits
on the header line only, is checked before use, and is dropped when any source leaves.

Modules: ``stage`` (fold episodes into digests, drop sources), ``digest_summary`` (Claude
summaries through Message Batches).
"""

from memory_core.stages._exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {"stage": ["CompactResult", "compact_episodes"], "digest_summary": ["summarize_digests"]},
)
