"""The pipeline, one package per stage, in the order a night runs them.

    ingest      JSONL -> episodes: validate every line, the write gate (secrets redacted,
                tool/agent claims without authority), write once (``memctl ingest``)
    embed       vectors for episodes stored without one, in bulk through the cache
                (``memctl embed``; the nightly's first task)
    extract     Claude fact extraction from conversations, in Message Batches (replayable)
    cluster     per (tenant, namespace) partition: group episodes by the problem they are about
    mine        clusters -> candidates: procedures with counterexamples, insights, preferences
    score       importance of candidates: Claude in Message Batches, or a labelled heuristic
    review      bounded batches for people; decisions (approve/reject/edit that narrows)
    promote     the one commit path: commit gate, supersession, facts/procedures, lineage
    staleness   take back what is no longer true: stale, contested, deprecated, canaries
    forget      expiry, revocation through lineage, user deletion with receipts, Lance purge
    compact     episodes past retention folded per cluster into digests (opt. Claude summary)

Each stage is a function of (stores, config, run context) returning a result; its package
``__init__`` says what the stage guarantees and exports its entry points. ``partitions.py`` is
shared by the partitioned stages (cluster, mine): what is new in each partition since its
watermark. The nightly flow (``flows/nightly.py``) runs ingest's output through embed,
cluster, mine, score, review and staleness; ``flows/forgetting.py`` runs forget and compact.
"""

PIPELINE = (
    "ingest",
    "embed",
    "extract",
    "cluster",
    "mine",
    "score",
    "review",
    "promote",
    "staleness",
    "forget",
    "compact",
)
