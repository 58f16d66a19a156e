"""LoCoMo conversations through the pipeline, scored with the questions' evidence turns.

Each conversation is a tenant, each turn a user-role episode (``locomo.convert_locomo``), with
a few credentials planted in turns' text (``plant``). Questions are asked by both speakers of
their conversation (a question may be about either); a question is recalled when one of its
evidence turns is served (itself, or as a source of a digest or fact), and answered when the
gold answer appears verbatim in the packed context. Adversarial questions (category 5) have
no answer and are asked for recall only.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from memory_core.eval.harness import EvalHome, Stopwatch, day_after_last
from memory_core.eval.locomo import convert_locomo, load_locomo
from memory_core.eval.locomo_extract import evaluate_replayed_extraction
from memory_core.eval.plant import plant_secrets
from memory_core.eval.probes import (
    cost_report,
    deletion_probe,
    revocation_probe,
    sensitive_writes,
    write_quality,
)
from memory_core.eval.retrieval import Query, evenly, open_reader, run_queries

__all__ = ["evaluate_locomo_file"]


def _queries(conversion: Any, sample: int | None) -> list[Query]:
    speakers: dict[str, list[str]] = {}
    for episode in conversion.episodes:
        names = speakers.setdefault(episode["tenant_id"], [])
        if episode["subject_id"] not in names:
            names.append(episode["subject_id"])
    queries = []
    for q in conversion.questions:
        if not q.evidence_ids:
            continue
        answer = q.answer if q.category != 5 and q.answer else None
        queries.append(
            Query(
                text=q.question, tenant_id=q.conversation_id,
                subjects=tuple(speakers.get(q.conversation_id, [None])),
                relevant=frozenset(q.evidence_ids), answers=(answer,) if answer else (),
                kind=f"category_{q.category}",
            )
        )  # fmt: skip
    return evenly(queries, sample)


def evaluate_locomo_file(
    root: Path, path: Path, *, embedder: str, sample: int | None = None, k: int = 10
) -> dict[str, Any]:
    """Run one night on the converted conversations in ``root/locomo``; measure."""
    items = load_locomo(path)
    conversion = convert_locomo(items)
    episodes, planted = plant_secrets(conversion.episodes, every=100)
    now = day_after_last(episodes)
    home = EvalHome.create(root, "locomo", embedder=embedder)
    clock = Stopwatch()
    try:
        ingested = home.night(episodes, now=now, source=path.name)
        clock.lap("pipeline")
        quality = write_quality(home)
        quality["useful_memory_precision"] = None
        quality["useful_memory_definition"] = "no gold for promoted rows in LoCoMo"
        quality.update(sensitive_writes(home, [p.needle for p in planted]))
        clock.lap("write_quality")
        with open_reader(home.settings.lance_uri, home.embedder, home.settings.recall) as memory:
            retrieval = run_queries(
                memory, _queries(conversion, sample), now=now, k=k,
                budget_tokens=home.settings.recall.budget_tokens,
            ).as_dict()  # fmt: skip
        clock.lap("retrieval")
        extraction = evaluate_replayed_extraction(
            root, items, episodes, _queries(conversion, sample), embedder=embedder, now=now,
            k=k, source=path.name,
        )  # fmt: skip
        clock.lap("replayed_extraction")
        updates: dict[str, Any] = {"supersession_accuracy": None, "as_of_correctness": None}
        updates.update(revocation_probe(home, now=now))
        clock.lap("revocation")
        turns = Counter((e["tenant_id"], e["subject_id"]) for e in episodes)
        tenant, subject = min(turns, key=lambda ts: (-turns[ts], ts))
        updates.update(deletion_probe(home, now=now, tenant_id=tenant, subject_id=subject))
        updates["deleted_subject"] = f"{tenant}/{subject}"
        clock.lap("deletion")
        return {
            "dataset": "locomo",
            "source": path.name,
            "episodes": len(episodes),
            "ingested": ingested,
            "nights": 1,
            "planted_secrets": len(planted),
            "questions": len(conversion.questions),
            "write_quality": quality,
            "retrieval": retrieval,
            "replayed_extraction": extraction,
            "update_forgetting": updates,
            "embedder": home.embedder.version,
            "cost": cost_report(home, len(episodes)),
            "seconds": clock.laps,
        }
    finally:
        home.remove()
