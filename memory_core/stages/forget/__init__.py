"""Forget (invariant 7): expiry, revocation through lineage, and user deletion with a receipt.

Guarantees: expired rows stop being served at once and are hard-deleted after the grace
period; revoking a source re-checks everything derived from it against its promotion policy;
a user deletion reaches every Lance table and old version, every DuckDB table and cache, is
verified, and converges on a rerun after a crash (the request stays pending until its receipt
is written).

Modules: ``stage`` (entry points the CLI and flows call), ``expire`` (rules, access log),
``purge`` (hard delete of rows with their DuckDB traces, shared with compact), ``revoke``
(lineage walk), ``user_deletion`` (``memctl forget --subject``), ``subject_values`` (the
values only a forgotten subject gave, which its receipt looks for), ``maintain`` (Lance table
upkeep), ``rewrite`` (Lance fragment rewrite planned centrally, executed on workers, committed
once).
"""

from memory_core.stages._exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "stage": [
            "carry_out_request",
            "end_purpose",
            "forget_episode",
            "forget_subject",
            "process_deletion_requests",
            "request_deletion",
            "revoke_source",
            "run_forgetting",
        ]
    },
)
