"""The issue's procedure checks on tau-bench, scored with the gold intents after the fact.

Why one module: the evaluation (``dataset_tau``) and ``bench/tau_cluster.py`` must judge
procedures the same way, or a reader sees two figures for one question. The definitions
(issue 16):

- a run's *gold world-changing steps* are the tool names of its task's gold actions that
  change the world under the home's step rules (``step_abstract.changes_world``: lookups and
  hand-offs/escalations are not changes), so both sides are read with one rule;
- a gold intent is *learnable* when its runs hold >= ``min_successes`` successes from
  >= ``min_users`` users (what the promotion policy needs to see);
- a learnable intent *has a procedure* when a procedural candidate, supported by at least one
  run of that intent, shows world-changing steps (as a set of tool names) equal to the
  intent's; *passing* if that candidate passed the policy;
- *procedure precision*: procedural candidates whose world-changing steps equal those of the
  gold intent of every supporting run (passing candidates; all candidates; promoted rows);
- *failed runs linked*: failed runs of learnable intents that are counterexamples of their
  intent's procedure or evidence of a pitfall qualifying it.

The older, stricter reading ("the supporting runs share one gold intent label") is kept
beside it as ``one_label``: it counts a procedure wrong when two intents whose gold actions
differ only by a step that changes nothing (a hand-off) support the same observed steps.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from memory_core.config import StepsConfig
from memory_core.step_abstract import changes_world

__all__ = ["PASSING", "gold_changes", "procedure_checks", "procedure_tools"]

PASSING = frozenset({"pending_score", "pending_review", "approved", "promoted"})


def gold_changes(intent: str, steps: StepsConfig, namespace: str) -> frozenset[str]:
    """The world-changing tool names of a gold intent (``"a|b"``: sorted gold action names)."""
    return frozenset(n for n in intent.split("|") if n and changes_world(n, steps, namespace))


def procedure_tools(candidate: Mapping[str, Any]) -> frozenset[str]:
    """The tool names of a procedural candidate's world-changing steps."""
    stats = candidate.get("stats") or {}
    shown = stats.get("world_changing_steps")
    if shown is None:
        shown = (candidate.get("procedure") or {}).get("steps") or []
    return frozenset(str(s).split("(", 1)[0] for s in shown)


def _rate(hits: int, total: int) -> float | None:
    return round(hits / total, 4) if total else None


def procedure_checks(
    candidates: Sequence[Mapping[str, Any]],
    trajectories: Sequence[Mapping[str, Any]],
    intent_of: Mapping[str, str],
    steps: StepsConfig,
    *,
    promoted_ids: Iterable[str] = (),
    min_successes: int = 3,
    min_users: int = 2,
) -> dict[str, Any]:
    """The figures above from candidates as ``memctl candidates --format json`` prints them.

    ``trajectories`` are the runs' trajectory episodes (``episode_id``, ``subject_id``,
    ``outcome``, ``namespace``), ``intent_of`` their gold intent labels; ``promoted_ids``
    the candidate ids whose procedure was promoted (for the promoted-row precision).
    """
    namespace = str(trajectories[0]["namespace"]) if trajectories else ""
    outcome = {str(t["episode_id"]): t["outcome"] for t in trajectories}
    user = {str(t["episode_id"]): t["subject_id"] for t in trajectories}
    wanted = {i: gold_changes(intent_of[i], steps, namespace) for i in outcome if i in intent_of}
    by_intent: dict[str, list[str]] = defaultdict(list)
    for i in outcome:
        if i in intent_of:
            by_intent[intent_of[i]].append(i)
    learnable = sorted(
        name
        for name, runs in by_intent.items()
        if sum(outcome[r] == "success" for r in runs) >= min_successes
        and len({user[r] for r in runs if outcome[r] == "success"}) >= min_users
    )
    procs = [c for c in candidates if c.get("kind") == "procedural"]
    pitfalls = [c for c in candidates if (c.get("stats") or {}).get("pitfall")]

    def supported(c: Mapping[str, Any]) -> list[str]:
        return [s for s in c.get("support_ids") or [] if s in wanted]

    def correct(c: Mapping[str, Any]) -> bool:
        runs = supported(c)
        return bool(runs) and all(wanted[r] == procedure_tools(c) for r in runs)

    def one_label(c: Mapping[str, Any]) -> bool:
        runs = supported(c)
        return bool(runs) and len({intent_of[r] for r in runs}) == 1

    per_intent: dict[str, dict[str, Any]] = {}
    linked_total = failed_total = 0
    for name in learnable:
        runs = by_intent[name]
        target = wanted[runs[0]]
        mine = [c for c in procs if procedure_tools(c) == target
                and any(intent_of.get(s) == name for s in supported(c))]  # fmt: skip
        mine_ids = {c["candidate_id"] for c in mine}
        failed = {r for r in runs if outcome[r] == "failure"}
        linked: set[str] = set()
        for c in mine:
            linked |= set(c.get("counterexample_ids") or []) & failed
        for p in pitfalls:
            if (p.get("stats") or {}).get("pitfall_of") in mine_ids:
                linked |= set(p.get("support_ids") or []) & failed
        linked_total += len(linked)
        failed_total += len(failed)
        per_intent[name or "(no gold action)"] = {
            "runs": len(runs),
            "successes": sum(outcome[r] == "success" for r in runs),
            "world_changing_gold": sorted(target),
            "procedure": bool(mine),
            "procedure_passing": any(c.get("status") in PASSING for c in mine),
            "steps": (mine[0].get("procedure") or {}).get("steps") if mine else None,
            "failed_runs": len(failed),
            "failed_linked": len(linked),
        }
    passing = [c for c in procs if c.get("status") in PASSING]
    promoted = set(promoted_ids)
    shipped = [c for c in procs if c["candidate_id"] in promoted]
    return {
        "definition": "world-changing steps (tool names; lookups and hand-offs excluded) "
        "equal to the gold intent's",
        "learnable_intents": len(learnable),
        "learnable_with_procedure": sum(v["procedure"] for v in per_intent.values()),
        "learnable_with_passing_procedure": sum(
            v["procedure_passing"] for v in per_intent.values()
        ),
        "per_intent": per_intent,
        "procedural_candidates": len(procs),
        "procedural_passing": len(passing),
        "precision_passing": _rate(sum(map(correct, passing)), len(passing)),
        "precision_all": _rate(sum(map(correct, procs)), len(procs)),
        "precision_promoted": _rate(sum(map(correct, shipped)), len(shipped)),
        "promoted_procedures": len(shipped),
        "one_label_precision_passing": _rate(sum(map(one_label, passing)), len(passing)),
        "one_label_precision_promoted": _rate(sum(map(one_label, shipped)), len(shipped)),
        "pitfalls": len(pitfalls),
        "pitfalls_passing": sum(p.get("status") in PASSING for p in pitfalls),
        "failed_runs_of_learnable": failed_total,
        "failed_linked": linked_total,
        "failed_linked_rate": _rate(linked_total, failed_total),
    }
