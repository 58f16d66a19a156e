"""tau-bench airline trajectories through the pipeline, scored with the gold intents.

The pipeline sees the episodes the ``openai-chat`` adapter makes of each run (one per message
and one trajectory per run, ``tau_bench.convert_tau_bench``) with a few credentials planted in
their text (``plant``); the gold intents (sets of gold action names) only score: cluster
agreement (ARI/NMI) of the runs' trajectories, the issue's procedure checks
(``tau_checks.procedure_checks``, the same function ``bench/tau_cluster.py`` prints: a
procedure is right when its world-changing steps equal its supporting runs' gold intent's;
useful-memory precision here is that check over promoted procedures), and retrieval of the
same task's other trials.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

from memory_core.eval.harness import EvalHome, Stopwatch, day_after_last
from memory_core.eval.plant import plant_secrets
from memory_core.eval.probes import (
    cost_report,
    deletion_probe,
    revocation_probe,
    sensitive_writes,
    write_quality,
)
from memory_core.eval.retrieval import Query, evenly, open_reader, run_queries
from memory_core.eval.tau_bench import convert_tau_bench, load_tau_bench
from memory_core.eval.tau_checks import procedure_checks
from memory_core.stages.cluster import list_clusters
from memory_core.stores.candidates import list_candidates

__all__ = ["evaluate_tau_bench_file"]


def _queries(conversion: Any, sample: int | None) -> list[Query]:
    """One query per task (its first trial's goal, asked by its user): any episode of the
    task's other trials (a message or the trajectory) is what should be found."""
    by_task: dict[str, list[dict[str, Any]]] = {}
    for episode in conversion.trajectories:
        by_task.setdefault(conversion.task_of_episode[episode["episode_id"]], []).append(episode)
    by_session: dict[str, set[str]] = {}
    for episode in conversion.episodes:
        by_session.setdefault(episode["session_id"], set()).add(episode["episode_id"])
    queries = []
    for task in sorted(by_task, key=lambda t: (len(t), t)):
        trials = sorted(by_task[task], key=lambda e: e["occurred_at"])
        first = trials[0]
        if not first.get("goal") or len(trials) < 2:
            continue
        relevant = frozenset().union(*(by_session[e["session_id"]] for e in trials[1:]))
        queries.append(
            Query(
                text=first["goal"], tenant_id=first["tenant_id"], subjects=(first["subject_id"],),
                relevant=relevant, kind="same_task",
            )
        )  # fmt: skip
    return evenly(queries, sample)


def _procedure_checks(home: EvalHome, conversion: Any) -> dict[str, Any]:
    """The issue's checks over every candidate; precision over the promoted procedures."""
    candidates = [c.contract_dict() for c in list_candidates(home.stores.meta)]
    promoted = [c["candidate_id"] for c in candidates if c.get("status") == "promoted"]
    return procedure_checks(
        candidates, conversion.trajectories, conversion.intent_of_episode,
        home.settings.steps, promoted_ids=promoted,
    )  # fmt: skip


def evaluate_tau_bench_file(
    root: Path, path: Path, *, embedder: str, sample: int | None = None, k: int = 10
) -> dict[str, Any]:
    """Run one night on the converted trajectories in ``root/tau-bench``; measure."""
    conversion = convert_tau_bench(load_tau_bench(path))
    episodes, planted = plant_secrets(conversion.episodes, every=100)
    now = day_after_last(episodes)
    home = EvalHome.create(root, "tau-bench", embedder=embedder)
    clock = Stopwatch()
    try:
        ingested = home.night(episodes, now=now, source=path.name)
        clock.lap("pipeline")
        members = {
            m: c["cluster_id"] for c in list_clusters(home.stores.meta) for m in c["member_ids"]
        }
        ids = [e["episode_id"] for e in conversion.trajectories]  # runs, not their messages
        gold = [conversion.intent_of_episode[i] for i in ids]
        ours = [members.get(i, f"unclustered:{i}") for i in ids]
        quality = write_quality(home)
        checks = _procedure_checks(home, conversion)
        quality["useful_memory_precision"] = checks["precision_promoted"]
        quality["useful_memory_definition"] = (
            "promoted procedures whose world-changing steps equal their supporting runs' gold "
            "intent's (lookups and hand-offs are not changes)"
        )
        quality["one_label_precision"] = checks["one_label_precision_promoted"]
        quality["procedure_checks"] = checks
        quality["learnable_intents"] = checks["learnable_intents"]
        quality["learnable_intents_with_procedure"] = checks["learnable_with_procedure"]
        quality["procedure_precision_passing"] = checks["precision_passing"]
        quality["procedure_precision_all"] = checks["precision_all"]
        quality["failed_runs_linked_rate"] = checks["failed_linked_rate"]
        quality["cluster_ari"] = round(float(adjusted_rand_score(gold, ours)), 4)
        quality["cluster_nmi"] = round(float(normalized_mutual_info_score(gold, ours)), 4)
        quality.update(sensitive_writes(home, [p.needle for p in planted]))
        clock.lap("write_quality")
        with open_reader(home.settings.lance_uri, home.embedder, home.settings.recall) as memory:
            retrieval = run_queries(
                memory, _queries(conversion, sample), now=now, k=k,
                budget_tokens=home.settings.recall.budget_tokens,
            ).as_dict()  # fmt: skip
        clock.lap("retrieval")
        updates: dict[str, Any] = {"supersession_accuracy": None, "as_of_correctness": None}
        updates.update(revocation_probe(home, now=now))
        clock.lap("revocation")
        users = Counter(e["subject_id"] for e in episodes)
        subject = min(users, key=lambda s: (-users[s], s))
        tenant = episodes[0]["tenant_id"]
        updates.update(deletion_probe(home, now=now, tenant_id=tenant, subject_id=subject))
        updates["deleted_subject"] = f"{tenant}/{subject}"
        clock.lap("deletion")
        return {
            "dataset": "tau-bench",
            "source": path.name,
            "episodes": len(episodes),
            "sessions": len(conversion.sessions),
            "trajectories": len(conversion.trajectories),
            "ingested": ingested,
            "nights": 1,
            "planted_secrets": len(planted),
            "write_quality": quality,
            "retrieval": retrieval,
            "update_forgetting": updates,
            "embedder": home.embedder.version,
            "cost": cost_report(home, len(episodes)),
            "seconds": clock.laps,
        }
    finally:
        home.remove()
