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
3. compaction of episodes past retention (``forget.episodic_ttl_days``) and the questions
   again; rows kept before and after.

The annotations carry no importance, so the single-statement path of the proposal rule cannot
apply; the arm proposes every annotated fact (``min_sessions = min_episodes = 1``), says so in
the JSON, and also reports how many would be proposed under the default rule.
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

__all__ = ["ARM_RULE", "evaluate_replayed_extraction"]

ARM_RULE = {"min_sessions": 1, "min_episodes": 1}
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
        "wrong_scope_retrievals": run["wrong_scope_retrievals"]
    }


def _proposed_by_default(home: EvalHome) -> int:
    """Objects that the default rule (two sessions, two episodes) would propose."""
    from memory_core.config import ExtractConfig
    from memory_core.stores.extract import extracted_facts

    default = ExtractConfig()
    groups: dict[tuple[str, str, str, str, str], set[tuple[str, str]]] = {}
    for f in extracted_facts(home.stores.meta):
        if f.authority != "user_statement":
            continue
        key = (f.tenant_id, f.namespace, f.subject_id, f.group_predicate or f.predicate,
               (f.group_object or f.object).casefold())  # fmt: skip
        groups.setdefault(key, set()).update((f.session_key, e) for e in f.self_evidence)
    return sum(
        len({s for s, _ in ev}) >= default.min_sessions
        and len({e for _, e in ev}) >= default.min_episodes
        for ev in groups.values()
    )


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
        extract = home.settings.extract.model_copy(update={"replay": str(replay_file), **ARM_RULE})
        home.settings = home.settings.model_copy(update={"extract": extract})
        first = extract_facts(
            home.stores, home.settings, RunContext(now=now), embedder=home.embedder
        )
        rerun = extract_facts(
            home.stores, home.settings, RunContext(now=now), embedder=home.embedder
        )
        home.consolidate(now=now)
        home.approve_all(now=now)
        home.maintain()
        rows_before = _rows(home)
        before = _retrieval(home, queries, now=now, k=k)
        forget = home.settings.forget.model_copy(update={"episodic_ttl_days": retention_days})
        home.settings = home.settings.model_copy(update={"forget": forget})
        receipt = run_forgetting(home.stores, home.settings, RunContext(now=now),
                                 embedder=home.embedder)  # fmt: skip
        rows_after = _rows(home)
        after = _retrieval(home, queries, now=now, k=k)
        conversations = len({e["tenant_id"] for e in episodes})
        tokens = sum(estimate_usage(p.params).input_tokens for p in plans)
        n = max(len(episodes), 1)
        return {
            "replay": REPLAY_LABEL,
            "proposal_rule": {**ARM_RULE, "why": "annotations carry no importance"},
            "facts_extracted": first.facts_written,
            "facts_dropped_by_rules": dict(first.dropped),
            "facts_promoted": rows_before.get("facts", 0),
            "proposed_under_default_rule": _proposed_by_default(home),
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
            "retrieval": before,
            "rows": rows_before,
            "after_compaction": {
                "retention_days": retention_days,
                "episodes_folded": receipt["compaction"].get("episodes_folded"),
                "retrieval": after,
                "rows": rows_after,
                "rows_ratio_to_episodes_only": round(
                    rows_after["total"] / max(len(episodes), 1), 4
                ),
            },
        }
    finally:
        home.remove()
