"""Review: scored candidates grouped into bounded batches for people, decided, then committed.

Guarantees: batches are bounded and per (tenant, namespace, kind); edits can only narrow what a
memory claims; an approval goes through the one commit path (``stages.promote``) and its gate,
whether it came from the CLI, the Prefect form or auto-approval; staleness batches dispatch to
``staleness.settle``.

Modules: ``stage`` (build and decide batches), ``decisions`` (what a reviewer can say),
``summary`` (what a reviewer reads), ``card`` (what may leave our stores for Prefect's form
and artifacts: ids and counts).
"""

from memory_core.stages._exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "stage": ["ReviewBatchResult", "build_review_batches", "decide_batch"],
        "decisions": ["DecisionResult", "ItemEdit", "ReviewRequest"],
        "summary": ["batch_summary", "summary_markdown"],
        "card": ["card_rows", "refusal_note", "review_card"],
    },
)
