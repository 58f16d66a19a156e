"""What a review batch may show outside our stores: ids and counts, never memory text.

The Prefect UI form of a waiting promotion-review run, the reviewer's answer and the run's
artifacts live in Prefect's database (the home's server, a shared one, or a Prefect Cloud
workspace), where ``memctl forget`` does not reach. So the flow publishes only this card: the
batch id and scope, counts (items, decisions, kinds, risk flags, what approval would do), the
candidate ids, and how to read the items themselves (``memctl review show BATCH``, which reads
our stores and so never shows what was forgotten). No memory text, no subject id.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from memory_core.errors import InvalidReview, ReviewClosed

__all__ = ["card_rows", "refusal_note", "review_card"]


def _counts(values: list[str]) -> str:
    counted = Counter(v for v in values if v)
    return ", ".join(f"{k} {n}" for k, n in sorted(counted.items())) or "none"


def _outcome(item: Mapping[str, Any]) -> str | None:
    would = item.get("would") or {}
    return would.get("outcome") if isinstance(would, Mapping) else None


def card_rows(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per item for the artifact table: ids, counts, flags and decisions only."""
    if summary.get("records"):  # a staleness batch: records, not candidates
        return [
            {
                "record_id": i["candidate_id"],
                "table": i.get("table"),
                "status": i.get("status"),
                "decision": i.get("decision"),
            }
            for i in summary["items"]
        ]
    return [
        {
            "candidate_id": i["candidate_id"],
            "kind": i.get("kind"),
            "support": (i.get("support") or {}).get("count"),
            "supporting_subjects": (i.get("support") or {}).get("subjects"),
            "counterexamples": (i.get("counterexamples") or {}).get("count"),
            "confidence": i.get("confidence"),
            "importance": i.get("importance"),
            "risk_flags": ", ".join(i.get("risk_flags") or []),
            "if_approved": _outcome(i),
            "decision": i.get("decision"),
        }
        for i in summary["items"]
    ]


def review_card(summary: Mapping[str, Any], *, refused: str | None = None) -> str:
    """Markdown for the form's description and the batch artifact (see the module doc)."""
    items = summary["items"]
    bid = summary["batch_id"]
    decisions = [i.get("decision") or "undecided" for i in items]
    lines = [
        f"## Review batch `{bid}`",
        "",
        f"{summary['kind']} items of **{summary['tenant_id']}/{summary['namespace']}**: "
        f"{summary['item_count']} in all, {summary['undecided']} undecided; status "
        f"**{summary['status']}**, expires {str(summary['expires_at'])[:16]}.",
        "",
        f"- decisions: {_counts(decisions)}",
    ]
    if summary.get("records"):
        lines.append(f"- approve = {summary.get('approve')}; reject = {summary.get('reject')}")
    else:
        flags = [f for i in items for f in (i.get("risk_flags") or [])]
        lines += [
            f"- kinds: {_counts([i.get('kind') or '' for i in items])}",
            f"- risk flags: {_counts(flags)}",
            f"- if approved now: {_counts([_outcome(i) or '' for i in items])}",
        ]
    ids = ", ".join(f"`{i['candidate_id']}`" for i in items)
    lines += [
        f"- item ids: {ids}",
        "",
        "**Read the items before deciding** (claims, procedures, evidence, scores, what "
        "approval would do):",
        "",
        f"    memctl review show {bid}",
        "",
        "This form shows ids and counts only: Prefect keeps it, and your answer, in its own "
        "database, out of reach of `memctl forget`. Do not quote memory text in the reason; "
        "the run deletes your answer from Prefect once it has applied it.",
    ]
    if refused:
        lines += ["", f"**Your last answer was not applied:** {refused}. Submit another."]
    return "\n".join(lines)


def refusal_note(exc: Exception) -> str:
    """Why an answer was not applied, by field and id only (never the values it quoted)."""
    if isinstance(exc, ValidationError):
        fields = sorted({".".join(str(p) for p in e["loc"]) or "answer" for e in exc.errors()})
        return f"invalid {', '.join(fields)}"
    if isinstance(exc, InvalidReview):
        where = f" of item {exc.candidate_id}" if exc.candidate_id else ""
        if exc.field.startswith("edits."):  # an edit's reason may quote the values
            return (
                f"{exc.field}{where} does not apply (edits may only narrow); "
                "`memctl review approve --edit` shows the full reason"
            )
        return f"{exc.field or 'answer'}{where}: {exc.reason}"
    if isinstance(exc, ReviewClosed):
        return f"the batch is {exc.status}; decisions are final"
    return type(exc).__name__
