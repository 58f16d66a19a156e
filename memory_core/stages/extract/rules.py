"""Rules enforced in code on every extracted fact, whoever answered (Claude or a replay).

* Evidence: every ref (or episode id) a fact cites must be a turn of *this* request; a fact
  citing anything else is dropped and counted (``unknown_evidence``): a model cannot attach a
  fact to an episode it was not shown, nor to another tenant's.
* Subject: the fact's ``subject_id`` must be someone who speaks or is spoken to in the request
  (a subject of one of its turns); otherwise it is dropped (``unknown_subject``).
* Authority comes from the evidence's source role, never from the answer's ``speaker_role``:
  ``user_statement`` only when at least one evidence turn is the subject themself speaking as
  a user (``self_evidence``); otherwise ``none`` -- what an agent, a tool or another person
  says about the user is blocked downstream and audited as a blocked preference write, and
  can never become a preference. A ``speaker_role`` that disagrees is corrected and counted.
* Times: ``valid_from`` / ``valid_to`` that do not parse as ISO dates are dropped (counted);
  a missing ``valid_from`` is the first evidence turn's time.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

from memory_core.models import Authority, stable_id
from memory_core.stages.extract.plan import RequestPlan
from memory_core.stages.extract.prompt import ExtractAnswer, ExtractedFact
from memory_core.stores.extract import ExtractedFactRow

__all__ = ["Checked", "check_answer", "norm"]


def norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def norm_predicate(text: str) -> str:
    return "_".join(text.replace("-", " ").split()).casefold()


@dataclass
class Checked:
    """Facts that passed, by session, and what was dropped or corrected (counts by reason)."""

    facts: list[ExtractedFactRow] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)
    corrected: Counter[str] = field(default_factory=Counter)


def _time(value: str | None, checked: Checked, name: str) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        checked.corrected[f"bad_{name}"] += 1
        return None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def check_answer(
    answer: ExtractAnswer,
    plan: RequestPlan,
    *,
    source: str,
    model: str | None,
    prompt_version: str,
) -> Checked:
    """Apply the rules to every fact of one answer for one request."""
    checked = Checked()
    by_episode = plan.episode_refs()
    subjects = {t.subject_id for t in plan.turns.values()}
    seen: set[str] = set()
    for fact in answer.facts:
        row = _check(fact, plan, by_episode, subjects, checked, source, model, prompt_version)
        if row is not None and row.fact_id not in seen:
            seen.add(row.fact_id)
            checked.facts.append(row)
        elif row is not None:
            checked.dropped["duplicate"] += 1
    return checked


def _check(
    fact: ExtractedFact,
    plan: RequestPlan,
    by_episode: dict[str, str],
    subjects: set[str],
    checked: Checked,
    source: str,
    model: str | None,
    prompt_version: str,
) -> ExtractedFactRow | None:
    refs = []
    for item in fact.evidence:
        ref = item.strip()
        ref = ref if ref in plan.turns else by_episode.get(ref, "")
        if not ref:
            checked.dropped["unknown_evidence"] += 1
            return None
        refs.append(ref)
    if fact.subject_id not in subjects:
        checked.dropped["unknown_subject"] += 1
        return None
    turns = [plan.turns[r] for r in dict.fromkeys(refs)]
    own = [t for t in turns if t.role == "user" and t.subject_id == fact.subject_id]
    authority = Authority.user_statement if own else Authority.none
    roles = {t.role for t in turns}
    role = "user" if own else sorted(roles - {"user"})[0] if roles - {"user"} else "user"
    if fact.speaker_role != role:
        checked.corrected["speaker_role"] += 1
    predicate, obj = norm_predicate(fact.predicate), " ".join(fact.object.split())
    if not predicate or not obj:
        checked.dropped["empty"] += 1
        return None
    evidence = sorted(t.episode_id for t in turns)
    first = min(turns, key=lambda t: t.occurred_at)
    valid_from = _time(fact.valid_from, checked, "valid_from") or datetime.fromisoformat(
        first.occurred_at
    )
    return ExtractedFactRow(
        fact_id=stable_id(
            "xf", plan.tenant_id, plan.namespace, fact.subject_id, predicate, norm(obj), evidence
        ),
        tenant_id=plan.tenant_id,
        namespace=plan.namespace,
        subject_id=fact.subject_id,
        session_key=first.session_key,
        predicate=predicate,
        object=obj,
        kind=fact.kind,
        valid_from=valid_from,
        valid_to=_time(fact.valid_to, checked, "valid_to"),
        evidence=evidence,
        self_evidence=sorted(t.episode_id for t in own),
        authority=authority.value,
        speaker_role=role,
        importance=fact.importance,
        source=source,
        custom_id=plan.custom_id,
        model=model,
        prompt_version=prompt_version,
    )
