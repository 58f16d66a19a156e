"""The seeded demo through the pipeline over two nights, scored with its ground truth.

Two nights, because updates and time travel need a before and an after: night 1 ingests and
consolidates the episodes recorded in the first half of the demo's span, night 2 the rest.
A user who changed their mind in the second half should then have the new preference current,
the old one superseded, and ``--as-of`` a first-half time should still answer the old one.

The truth (``generate_demo``'s, or ``truth.json`` beside ``--path FILE``) only scores: which
promoted rows are true (``demo_truth``), which objects were current when, where secrets were
planted, which episodes expired.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memory_core.eval import metrics
from memory_core.eval.demo_truth import score_candidates_against_truth
from memory_core.eval.harness import EvalHome, Stopwatch
from memory_core.eval.probes import (
    cost_report,
    deletion_probe,
    revocation_probe,
    sensitive_writes,
    write_quality,
)
from memory_core.eval.retrieval import Query, evenly, open_reader, run_queries
from memory_core.models import CandidateStatus
from memory_core.stages.promote.supersede import normalise
from memory_core.stores.candidates import list_candidates
from memory_core.stores.facts import list_rows

__all__ = ["evaluate_demo", "load_demo"]


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)


def load_demo(path: Path | None, *, seed: int = 7) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Episodes and truth: generated from ``seed``, or ``path`` (JSONL) with ``truth.json``."""
    if path is None:
        from memory_core.demo.generate import generate_demo

        data = generate_demo(seed=seed)
        return data.episodes, data.truth
    truth_path = Path(path).with_name("truth.json")
    if not truth_path.is_file():
        msg = f"{path}: the demo's truth.json must sit beside the episodes file"
        raise FileNotFoundError(msg)
    episodes = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return episodes, json.loads(truth_path.read_text())


def _split(episodes: list[dict[str, Any]]) -> tuple[list, list, datetime, datetime]:
    def seen(e: dict[str, Any]) -> datetime:
        return max(_time(e["occurred_at"]), _time(e.get("recorded_at") or e["occurred_at"]))

    first, last = min(map(seen, episodes)), max(map(seen, episodes))
    middle = first + (last - first) / 2
    night1 = [e for e in episodes if seen(e) <= middle]
    night2 = [e for e in episodes if seen(e) > middle]
    return night1, night2, middle + timedelta(minutes=1), last + timedelta(days=1)


def _updates(home: EvalHome, truth: dict[str, Any]) -> dict[str, Any]:
    """Supersession accuracy and as-of correctness for the truth's preferences."""
    facts = home.rows("facts")
    by_key: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in facts:
        if row.get("subject_id"):
            by_key.setdefault((row["tenant_id"], row["subject_id"], row["predicate"]), []).append(
                row
            )
    changed = correct = probes = right = 0
    for pref in truth["preferences"]:
        key = (pref["tenant_id"], pref["subject_id"], pref["predicate"])
        rows = by_key.get(key, [])
        if not rows:
            continue
        stored = {normalise(r["object"]) for r in rows}
        current = [r for r in rows if r["status"] == "active" and r.get("recorded_to") is None]
        if pref["changed"] and len(stored) > 1:
            changed += 1
            correct += len(current) == 1 and normalise(current[0]["object"]) == normalise(
                pref["current_object"]
            )
        history = sorted(pref["history"], key=lambda h: h["valid_from"])
        for i, entry in enumerate(history):
            if normalise(entry["object"]) not in stored:
                continue
            begin = _time(entry["valid_from"])
            end = _time(history[i + 1]["valid_from"]) if i + 1 < len(history) else None
            at = begin + ((end - begin) / 2 if end else timedelta(hours=1))
            answer = [
                r for r in list_rows(
                    home.stores.lance, "facts", as_of=at, tenant_id=key[0], subject_id=key[1]
                )
                if r["predicate"] == key[2]
            ]  # fmt: skip
            probes += 1
            right += len(answer) == 1 and normalise(answer[0]["object"]) == normalise(
                entry["object"]
            )
    return {
        "changed_preferences_with_both_versions": changed,
        "supersession_accuracy": metrics.rate(correct, changed),
        "as_of_probes": probes,
        "as_of_correctness": metrics.rate(right, probes),
    }


def _queries(
    home: EvalHome, truth: dict[str, Any], now: datetime, sample: int | None
) -> list[Query]:
    facts = [r for r in home.rows("facts") if r.get("subject_id")]
    procs = home.rows("procedures")
    preferences, procedures, expired = [], [], []
    for pref in truth["preferences"]:
        if not pref["qualifies"]:
            continue
        key = (pref["tenant_id"], pref["subject_id"], pref["predicate"])
        rows = [r for r in facts if (r["tenant_id"], r["subject_id"], r["predicate"]) == key]
        good = {r["fact_id"] for r in rows if normalise(r["object"]) == normalise(
            pref["current_object"]) and r["status"] == "active"}  # fmt: skip
        old = {r["fact_id"] for r in rows if r["status"] == "superseded"}
        preferences.append(
            Query(
                text=f"What {pref['predicate'].replace('_', ' ')} does {pref['subject_id']} "
                "prefer?",
                tenant_id=pref["tenant_id"], subjects=(pref["subject_id"],),
                relevant=frozenset(good | set(pref["episode_ids"])),
                answers=(pref["current_object"],), kind="preference", forbidden=frozenset(old),
            )
        )  # fmt: skip
    for proc in truth["procedures"]:
        ids = {
            r["procedure_id"]
            for r in procs
            if (r["tenant_id"], r["namespace"]) == (proc["tenant_id"], proc["namespace"])
            and list(json.loads(r["steps"]) if isinstance(r["steps"], str) else r["steps"])
            == proc["steps"]
        }
        procedures.append(
            Query(
                text=proc["goal"], tenant_id=proc["tenant_id"],
                subjects=(proc["support_subjects"][0],),
                relevant=frozenset(ids | set(proc["support_ids"])), answers=tuple(proc["steps"]),
                kind="procedure", state={**proc["context"], **proc["preconditions"]},
            )
        )  # fmt: skip
    for episode in home.rows("episodes"):
        expires = episode.get("expires_at")
        if expires is not None and expires <= now and (episode.get("text") or episode["goal"]):
            expired.append(
                Query(
                    text=episode.get("text") or episode["goal"], tenant_id=episode["tenant_id"],
                    subjects=(episode["subject_id"],), relevant=frozenset(), kind="expired",
                    forbidden=frozenset({episode["episode_id"]}),
                )
            )  # fmt: skip
    expired.sort(key=lambda q: sorted(q.forbidden))
    groups = [preferences, procedures, expired]
    return [q for group in groups for q in evenly(group, sample)]


def _busiest_subject(episodes: list[dict[str, Any]]) -> tuple[str, str]:
    """The user with most own statements, among those in the most tenants (ties by name):
    the harder case, since the same id elsewhere must survive."""
    users = [e for e in episodes if e["source_role"] == "user"]
    tenants: dict[str, set[str]] = {}
    for e in users:
        tenants.setdefault(e["subject_id"], set()).add(e["tenant_id"])
    counts = Counter((e["tenant_id"], e["subject_id"]) for e in users)
    (tenant, subject), _ = min(
        counts.items(), key=lambda kv: (-len(tenants[kv[0][1]]), -kv[1], kv[0])
    )
    return tenant, subject


def evaluate_demo(
    root: Path,
    *,
    embedder: str,
    path: Path | None = None,
    seed: int = 7,
    sample: int | None = None,
    k: int = 10,
) -> dict[str, Any]:
    """Run the demo over two nights in ``root/demo`` and measure everything that applies."""
    episodes, truth = load_demo(path, seed=seed)
    night1, night2, middle, end = _split(episodes)
    home = EvalHome.create(root, "demo", embedder=embedder)
    clock = Stopwatch()
    try:
        ingested = 0
        for night, at in ((night1, middle), (night2, end)):
            if night:
                ingested += home.night(night, now=at, source="demo")
        clock.lap("pipeline")
        cands = list_candidates(home.stores.meta)
        promoted = [c for c in cands if c.status is CandidateStatus.promoted]
        gold = score_candidates_against_truth(promoted, truth)
        proposed = score_candidates_against_truth(cands, truth)
        quality = write_quality(home)
        stated = {
            (p["tenant_id"], p["subject_id"], p["predicate"], normalise(h["object"]))
            for p in truth["preferences"]
            for h in p["history"]
        }
        injected = {
            (i["tenant_id"], i["subject_id"], i["predicate"], normalise(i["object"]))
            for i in truth["injected_instructions"] + truth["agent_claims"]
        } - stated  # an agent guessing what the user did say is not a false write
        quality["tool_or_agent_claims_as_facts"] = sum(
            (r["tenant_id"], r.get("subject_id"), r["predicate"], normalise(r["object"]))
            in injected
            for r in home.rows("facts")
        )
        quality["useful_memory_precision"] = gold["precision"]
        quality["useful_memory_precision_by_kind"] = {
            kind: gold[kind]["precision"] for kind in ("procedural", "preferences", "insights")
        }
        quality["candidate_precision"] = proposed["precision"]
        quality["candidate_recall"] = proposed["recall"]
        quality.update(sensitive_writes(home, [s["needle"] for s in truth["secrets"]]))
        clock.lap("write_quality")
        updates = _updates(home, truth)
        with open_reader(home.settings.lance_uri, home.embedder, home.settings.recall) as memory:
            retrieval = run_queries(
                memory, _queries(home, truth, end, sample), now=end, k=k,
                budget_tokens=home.settings.recall.budget_tokens,
            ).as_dict()  # fmt: skip
        clock.lap("retrieval")
        updates.update(revocation_probe(home, now=end))
        clock.lap("revocation")
        tenant, subject = _busiest_subject(episodes)
        updates.update(deletion_probe(home, now=end, tenant_id=tenant, subject_id=subject))
        updates["deleted_subject"] = f"{tenant}/{subject}"
        clock.lap("deletion")
        return {
            "dataset": "demo",
            "source": str(path) if path else f"generate_demo(seed={seed})",
            "episodes": len(episodes),
            "ingested": ingested,
            "nights": 2 if night1 and night2 else 1,
            "write_quality": quality,
            "retrieval": retrieval,
            "update_forgetting": updates,
            "embedder": home.embedder.version,
            "cost": cost_report(home, len(episodes)),
            "seconds": clock.laps,
        }
    finally:
        home.remove()
