"""LoCoMo's replayed-extraction arm: facts from the dataset's own annotations, side by side.

Why replayed: no Claude call is possible here. LoCoMo ships per-session ``observation``
annotations (facts tied to the turns that state them); ``locomo.observation_replay`` turns
them into the answers of exactly the requests the extract stage plans for the stored (already
redacted) conversations, keyed by those requests' custom ids. The stage then runs with
``extract.replay``: the same parsing, the same evidence / subject / authority rules, the same
paraphrase merge and the same claims path as Claude's answers would take. Every figure here
is labelled "replayed dataset annotations, not Claude".

What is measured, on one fresh home, in order:

1. cost: requests and input tokens (characters / 4 of the planned request bodies, the
   budget's estimate) per episode and per conversation, and the requests of an unchanged
   rerun (must be 0);
2. one night (consolidate, every review batch approved, maintenance), then the questions in
   the arms episodes-only, facts-only and facts + episodes within the recall token budget;
3. compaction of episodes past retention (``forget.episodic_ttl_days``): every extracted
   session folds into one digest (``stages/compact``), and the questions again; rows kept
   before and after.

The proposal rule is the default one (``[extract]``: two sessions and two episodes, or one
explicit self-statement scored >= 4). The annotations carry no importance, so the
single-statement route reads the labelled heuristic score (``extract/importance.py``); the
JSON counts the facts proposed by each route under that label.

Counting rule (like-for-like): every arm, before and after compaction, is packed by score into
the same token budget (``recall.budget_tokens``, 2,000) and the same record limit
(``LIKE_FOR_LIKE_K`` = 60: a LoCoMo turn is ~30 tokens, so the budget, not the limit, stops
the episodes arm too; each pass reports its budget use). No arm may read more text than
another. A question is recalled when one of its evidence turns is in the packed context: the
turn itself, a digest that holds the turn's line (a digest is packed whole or not at all, so a
packed digest holds all its lines), or a fact whose evidence is that turn. The earlier report
used k = 10 records: ten turns (~300 tokens) against ten digests of up to eight turns each,
which is what inflated its after-compaction recall.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memory_core.context import RunContext
from memory_core.eval.harness import EvalHome
from memory_core.eval.locomo import REPLAY_LABEL, observation_replay
from memory_core.eval.retrieval import Query, open_reader, run_queries
from memory_core.stages.score.budget import estimate_usage

__all__ = ["LIKE_FOR_LIKE_K", "evaluate_replayed_extraction"]

LIKE_FOR_LIKE_K = 60
_ARMS = ("episodes", "facts_only", "episodes_facts")


def _plans(home: EvalHome, replay_file: Path) -> list[Any]:
    from memory_core.stages.extract.plan import load_sessions, pack_requests
    from memory_core.stages.extract.prompt import prompt_version

    cfg = home.settings.extract
    pv = prompt_version(cfg)
    model = f"replay:{replay_file.name}"
    sessions, _ = load_sessions(home.stores, cfg, model=model, prompt_version=pv, done={})
    return pack_requests(sessions, cfg, model=model, prompt_version=pv)


def _rows(home: EvalHome) -> dict[str, int]:
    out = {}
    for table in ("episodes", "facts", "digests"):
        if table in home.stores.lance.table_names():
            out[table] = home.stores.lance.count(table, "status = 'active'")
    out["total"] = sum(out.values())
    return out


def _retrieval(home: EvalHome, queries: list[Query], *, now: Any, k: int) -> dict[str, Any]:
    with open_reader(home.settings.lance_uri, home.embedder, home.settings.recall) as memory:
        run = run_queries(
            memory, queries, now=now, k=k, budget_tokens=home.settings.recall.budget_tokens
        ).as_dict()
    return {arm: run["ablation"][arm] for arm in _ARMS} | {
        "wrong_scope_retrievals": run["wrong_scope_retrievals"],
        "budget_utilisation_all_classes": run["context_budget_utilisation"],
    }


def _proposal(home: EvalHome) -> dict[str, Any]:
    """Objects proposed by each route of the configured rule, labelled by who scored."""
    from memory_core.stages.extract.importance import HEURISTIC_LABEL, proposal_routes
    from memory_core.stores.extract import extracted_facts

    cfg = home.settings.extract
    routes = proposal_routes(extracted_facts(home.stores.meta), cfg)
    return {
        "rule": {
            "min_sessions": cfg.min_sessions,
            "min_episodes": cfg.min_episodes,
            "single_statement_min_importance": cfg.single_statement_min_importance,
        },
        **routes.as_dict(),
        "labels": {
            "by_evidence": REPLAY_LABEL,
            "by_answer_importance": REPLAY_LABEL + " (the annotations carry no importance)",
            "by_heuristic_importance": HEURISTIC_LABEL,
        },
    }


def _both(home: EvalHome, queries: list[Query], *, now: Any) -> dict[str, Any]:
    """The like-for-like figures, per arm (see the counting rule above)."""
    return {
        "k": LIKE_FOR_LIKE_K,
        "retrieval": _retrieval(home, queries, now=now, k=LIKE_FOR_LIKE_K),
    }


def _targets(before: dict[str, Any], after: dict[str, Any], rows_ratio: float) -> dict[str, Any]:
    base = before["episodes"]["recall_at_k"]
    return {
        "counting_rule": "budget-bound, every arm the same 2,000 tokens (module docstring)",
        "rows_after_le_0_30_of_episodes": rows_ratio <= 0.30,
        "recall_after_ge_0_95_episodes_only": after["episodes_facts"]["recall_at_k"] >= 0.95 * base,
        "recall_facts_episodes_ge_episodes_only": before["episodes_facts"]["recall_at_k"] >= base,
        "answer_facts_episodes_gt_episodes_only": before["episodes_facts"]["answer_in_context"]
        > before["episodes"]["answer_in_context"],
        "answer_after_gt_episodes_only": after["episodes_facts"]["answer_in_context"]
        > before["episodes"]["answer_in_context"],
    }


def evaluate_replayed_extraction(
    root: Path,
    items: list[dict[str, Any]],
    episodes: list[dict[str, Any]],
    queries: list[Query],
    *,
    embedder: str,
    now: Any,
    k: int,
    source: str,
    retention_days: float = 30.0,
) -> dict[str, Any]:
    """The arm on a fresh home ``root/locomo-extract``; see the module docstring."""
    from memory_core.stages.extract import extract_facts
    from memory_core.stages.forget import run_forgetting

    home = EvalHome.create(root, "locomo-extract", embedder=embedder)
    try:
        home.ingest(episodes, now=now, source=source)
        replay_file = home.home / "locomo-observations.replay.jsonl"
        plans = _plans(home, replay_file)
        lines = observation_replay(items, plans)
        replay_file.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
        extract = home.settings.extract.model_copy(update={"replay": str(replay_file)})
        home.settings = home.settings.model_copy(update={"extract": extract})
        first = extract_facts(
            home.stores, home.settings, RunContext(now=now), embedder=home.embedder
        )
        rerun = extract_facts(
            home.stores, home.settings, RunContext(now=now), embedder=home.embedder
        )
        proposal = _proposal(home)  # before compaction (the report's state)
        home.consolidate(now=now)
        home.approve_all(now=now)
        home.maintain()
        rows_before = _rows(home)
        before = _both(home, queries, now=now)
        forget = home.settings.forget.model_copy(update={"episodic_ttl_days": retention_days})
        home.settings = home.settings.model_copy(update={"forget": forget})
        receipt = run_forgetting(home.stores, home.settings, RunContext(now=now),
                                 embedder=home.embedder)  # fmt: skip
        rows_after = _rows(home)
        after = _both(home, queries, now=now)
        ratio = round(rows_after["total"] / max(len(episodes), 1), 4)
        conversations = len({e["tenant_id"] for e in episodes})
        tokens = sum(estimate_usage(p.params).input_tokens for p in plans)
        n = max(len(episodes), 1)
        return {
            "replay": REPLAY_LABEL,
            "embedder": home.embedder.version,
            "proposal": proposal,
            "facts_extracted": first.facts_written,
            "facts_dropped_by_rules": dict(first.dropped),
            "facts_promoted": rows_before.get("facts", 0),
            "cost": {
                "counted_from": "request bodies the replay would have sent (characters / 4)",
                "requests": len(plans),
                "input_tokens": tokens,
                "requests_per_episode": round(len(plans) / n, 5),
                "input_tokens_per_episode": round(tokens / n, 1),
                "requests_per_conversation": round(len(plans) / max(conversations, 1), 3),
                "input_tokens_per_conversation": round(tokens / max(conversations, 1), 1),
                "requests_on_unchanged_rerun": rerun.requests_planned,
            },
            **before,
            "rows": rows_before,
            "after_compaction": {
                "retention_days": retention_days,
                "episodes_folded": receipt["compaction"].get("episodes_folded"),
                "digests": receipt["compaction"].get("digests"),
                **after,
                "rows": rows_after,
                "rows_ratio_to_episodes_only": ratio,
            },
            "targets": _targets(before["retrieval"], after["retrieval"], ratio),
        }
    finally:
        home.remove()
