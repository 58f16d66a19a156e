"""What a reviewer reads: one batch, each item judged quickly from a single record.

Per item: the claim or procedure, its conditions, support and counterexamples (each episode's
subject, role, time, goal and outcome; never its free text), confidence, importance and the
scorer's rationale, risk flags, what approving it would do now (new, unchanged, supersede
what, conflict with what, or refused by the gate and why), and the insight twins that follow
it. The same dict feeds ``memctl review show`` and the Prefect artifacts and form.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from memory_core.config import Settings
from memory_core.errors import NotFound
from memory_core.models import Candidate, CandidateKind
from memory_core.stages.mine.counterexamples import format_conditions
from memory_core.stages.promote.rows import evidence_episodes
from memory_core.stages.promote.stage import preview_candidates
from memory_core.stores import Stores
from memory_core.stores.candidates import get_candidates
from memory_core.stores.review import get_batch, get_items, twins_of

__all__ = ["batch_summary", "summary_markdown"]

MAX_EPISODES_SHOWN = 6
SAID_CHARS = 160


def _said(ep: Mapping[str, Any], predicate: str | None) -> str | None:
    """What a statement said about the predicate (its span), unless the episode is sensitive."""
    if predicate is None or ep.get("sensitivity") == "high":
        return None
    claims = json.loads(ep.get("claims") or "[]")
    for claim in claims:
        if claim.get("predicate") == predicate:
            text = str(claim.get("span") or claim.get("object") or "")
            return text if len(text) <= SAID_CHARS else text[: SAID_CHARS - 1] + "…"
    return None


def _episode(ep: Mapping[str, Any] | None, eid: str, predicate: str | None) -> dict[str, Any]:
    if ep is None:
        return {"episode_id": eid, "missing": True}
    when = ep.get("occurred_at")
    out = {
        "episode_id": eid,
        "subject_id": ep.get("subject_id"),
        "source_role": ep.get("source_role"),
        "occurred_at": when.isoformat() if isinstance(when, datetime) else when,
        "goal": ep.get("goal"),
        "outcome": ep.get("outcome"),
    }
    said = _said(ep, predicate)
    if said:
        out["said"] = said
    return out


def _evidence(
    ids: Sequence[str], episodes: Mapping[str, Mapping[str, Any]], predicate: str | None = None
) -> dict[str, Any]:
    shown = [_episode(episodes.get(e), e, predicate) for e in list(ids)[:MAX_EPISODES_SHOWN]]
    subjects = {episodes[e].get("subject_id") for e in ids if e in episodes}
    return {"count": len(ids), "subjects": len(subjects), "episodes": shown}


def _what(c: Candidate) -> dict[str, Any]:
    if c.kind is CandidateKind.procedural and c.procedure is not None:
        return {"procedure": c.procedure.model_dump()}
    return {"claim": c.claim.model_dump() if c.claim else None}


def batch_summary(
    stores: Stores, settings: Settings, batch_id: str, *, now: datetime
) -> dict[str, Any]:
    """The batch with every item as a reviewer needs it (see the module docstring)."""
    batch = get_batch(stores.meta, batch_id)
    if batch is None:
        what, hint = "review batch", "list batches with `memctl review list`"
        raise NotFound(what, batch_id, hint)
    from memory_core.stages.staleness.summary import record_batch_summary

    if batch.kind in ("revalidate", "settle", "failures"):  # records, not candidates
        return record_batch_summary(stores, batch)
    items = get_items(stores.meta, batch_id)
    cands = {
        c.candidate_id: c for c in get_candidates(stores.meta, [i.candidate_id for i in items])
    }
    twins = twins_of(
        stores.meta, [c for c, v in cands.items() if v.kind is CandidateKind.procedural]
    )
    open_ids = [i.candidate_id for i in items if i.decision is None and i.candidate_id in cands]
    preview_set = [cands[c] for c in open_ids] + [
        t for c in open_ids for t in twins.get(c, []) if t.status.value == "pending_review"
    ]
    would = preview_candidates(stores, settings, preview_set, now=now) if preview_set else {}
    episodes = evidence_episodes(stores.lance, list(cands.values()), stores.meta)
    out_items = []
    for item in items:
        cand = cands.get(item.candidate_id)
        if cand is None:
            out_items.append({"candidate_id": item.candidate_id, "missing": True})
            continue
        stats = cand.stats
        predicate = cand.claim.predicate if cand.claim and not cand.stats.get("twin_of") else None
        out_items.append(
            {
                "candidate_id": cand.candidate_id,
                "kind": cand.kind.value,
                "subject_id": cand.subject_id,
                "text": cand.text,
                **_what(cand),
                "conditions": cand.conditions,
                "confidence": cand.confidence,
                "importance": cand.importance,
                "scorer": cand.scorer,
                "rationale": stats.get("rationale"),
                "risk_flags": list(stats.get("risk_flags") or [])
                + (["conflict"] if stats.get("conflict") else []),
                "support": _evidence(cand.support_ids, episodes, predicate),
                "counterexamples": _evidence(cand.counterexample_ids, episodes, predicate),
                "would": would.get(cand.candidate_id),
                "held_conflict": stats.get("conflict"),
                "twins": [
                    {
                        "candidate_id": t.candidate_id,
                        "claim": t.claim.model_dump() if t.claim else None,
                        "status": t.status.value,
                        "would": would.get(t.candidate_id),
                    }
                    for t in twins.get(cand.candidate_id, [])
                ],
                "decision": item.decision,
                "reviewer": item.reviewer,
                "decision_reason": item.reason,
                "edits": item.edits,
                "status": cand.status.value,
                "status_reason": cand.reason,
            }
        )
    return {**batch.as_dict(), "items": out_items}


def _would_text(would: Mapping[str, Any] | None) -> str:
    if not would:
        return ""
    outcome = would.get("outcome")
    if outcome == "supersede" and would.get("supersedes"):
        old = would["supersedes"]
        what = old.get("object") or (f"{old.get('name')} v{old.get('version')}")
        ident = old.get("fact_id") or old.get("procedure_id")
        return f"supersedes {ident} ({what}, valid from {old.get('valid_from')})"
    if outcome == "new" and would.get("version"):
        return f"new procedure, version {would['version']}"
    return f"{outcome}: {would.get('reason')}"


def _evidence_md(label: str, ev: Mapping[str, Any]) -> list[str]:
    lines = [f"- {label}: {ev['count']} episode(s) from {ev['subjects']} subject(s)"]
    for ep in ev["episodes"]:
        if ep.get("missing"):
            lines.append(f"  - `{ep['episode_id']}` (gone)")
            continue
        what = f'said "{ep["said"]}"' if ep.get("said") else (ep["goal"] or "(no goal)")
        lines.append(
            f"  - `{ep['episode_id']}` {ep['occurred_at'][:10] if ep['occurred_at'] else ''} "
            f"{ep['source_role']} {ep['subject_id']}: {what} -> {ep['outcome']}"
        )
    return lines


def summary_markdown(summary: Mapping[str, Any]) -> str:
    """Markdown of a batch summary: the Prefect artifact and the form's description."""
    if summary.get("records"):  # a staleness batch (stages/staleness/summary.py)
        from memory_core.stages.staleness.summary import record_summary_markdown

        return record_summary_markdown(summary)
    lines = [
        f"## Review batch `{summary['batch_id']}`",
        "",
        f"{summary['kind']} candidates of **{summary['tenant_id']}/{summary['namespace']}**: "
        f"{summary['item_count']} item(s), {summary['undecided']} undecided; status "
        f"**{summary['status']}**, expires {summary['expires_at'][:16]}.",
        "",
    ]
    for n, item in enumerate(summary["items"], 1):
        if item.get("missing"):
            lines.append(f"### {n}. `{item['candidate_id']}` (candidate gone)")
            continue
        head = item["text"] or item["candidate_id"]
        lines += [f"### {n}. {head}", "", f"`{item['candidate_id']}`", ""]
        if item.get("procedure"):
            proc = item["procedure"]
            lines.append(f"- procedure **{proc['name']}**: " + " → ".join(proc["steps"]))
            if proc["preconditions"]:
                lines.append(f"- preconditions: {format_conditions(proc['preconditions'])}")
        elif item.get("claim"):
            claim = item["claim"]
            lines.append(f"- claim: **{claim['predicate']} = {claim['object']}**")
        if item["conditions"]:
            lines.append(f"- conditions: {format_conditions(item['conditions'])}")
        importance = item["importance"]
        lines.append(
            f"- confidence {item['confidence']:.2f}, importance "
            f"{importance if importance is not None else 'n/a'} ({item['scorer']}): "
            f"{item['rationale'] or 'no rationale'}"
        )
        lines.append(f"- risk flags: {', '.join(item['risk_flags']) or 'none'}")
        lines += _evidence_md("support", item["support"])
        lines += _evidence_md("counterexamples", item["counterexamples"])
        if item.get("would"):
            lines.append(f"- if approved: {_would_text(item['would'])}")
        for twin in item["twins"]:
            claim = twin["claim"] or {}
            lines.append(
                f"- insight that follows this decision: {claim.get('predicate')} = "
                f"{claim.get('object')} (`{twin['candidate_id']}`)"
            )
        if item["decision"]:
            lines.append(
                f"- decided: **{item['decision']}** by {item['reviewer']}; now {item['status']}"
            )
        lines.append("")
    return "\n".join(lines)
