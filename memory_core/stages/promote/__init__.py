"""Promote: the one commit path from approved candidates to facts and versioned procedures.

Guarantees: the commit gate checks, against the episodes themselves, that a candidate has the
authority its kind needs (a preference only from the user's own statements; a procedure only
with a human reviewer); a changed record supersedes the current one or is held as a conflict,
never overwritten; each table changes in one commit, and lineage, outcomes, audit and receipt
in one DuckDB transaction.

Modules: ``stage`` (commit and preview), ``commit_gate`` (authority at commit time),
``supersede`` (pure supersession rules), ``plan`` (a commit's pending writes per table),
``rows`` (derived rows and lineage edges), ``result`` (what a commit did).
"""

from memory_core.stages._exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__, {"stage": ["commit_candidates", "preview_candidates"], "result": ["CommitResult"]}
)
