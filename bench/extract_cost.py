"""What fact extraction would send Claude, counted from the request bodies, per conversation.

    python bench/extract_cost.py [--tau ../shared/data/tau_bench_airline_tasks_00_24.json]
                                 [--locomo ../shared/data/locomo_5conv.json]

For each data set, on a fresh temporary home (hash embedder: vectors do not change a body):
ingest the conversations (tau-bench through the openai-chat adapter, one episode per message;
LoCoMo one episode per turn), plan the extract stage's requests exactly as a nightly run would
(``stages/extract/plan.py``), and count requests and input tokens as the run budget estimates
them (characters of the request JSON / 4, rubric and schema included in every request). Then
every planned request is answered (an empty recorded answer, through ``extract.replay``) and
the plan is made again: the requests of an unchanged rerun. Nothing calls the API.

The comparison figure (Mem0 2.2.1 adding each of the same 100 tau-bench conversations whole:
11,085 input tokens each, 7,671 of them its system prompt) is the issue's measurement, not
rerun here. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from memory_core.config import load_settings
from memory_core.context import RunContext
from memory_core.embed import make_embedder
from memory_core.stages.extract import extract_facts
from memory_core.stages.extract.plan import load_sessions, pack_requests
from memory_core.stages.extract.prompt import prompt_version
from memory_core.stages.ingest import ingest_records
from memory_core.stages.score.budget import estimate_usage
from memory_core.stores import open_stores
from memory_core.stores.extract import done_sessions

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
MEM0_TOKENS_PER_CONVERSATION = 11_085


def _episodes(name: str, path: Path) -> tuple[list[dict[str, Any]], int]:
    if name == "tau-bench":
        from memory_core.eval.tau_bench import convert_tau_bench, load_tau_bench

        conversion = convert_tau_bench(load_tau_bench(path))
        return conversion.episodes, len(conversion.sessions)
    from memory_core.eval.locomo import convert_locomo, load_locomo

    items = load_locomo(path)
    return convert_locomo(items).episodes, len(items)


def measure(name: str, path: Path, home: Path) -> dict[str, Any]:
    settings = load_settings(home=home, embed={"model": "hash"})
    stores = open_stores(settings)
    embedder = make_embedder(settings.embed)
    stores.lance.ensure_tables(embedder.dim, embedder=embedder.version)
    episodes, conversations = _episodes(name, path)
    now = max(e["occurred_at"] for e in episodes)
    from datetime import datetime, timedelta

    clock = datetime.fromisoformat(now.replace("Z", "+00:00")) + timedelta(days=1)
    ingest_records(stores, settings, RunContext(now=clock), [json.dumps(e) for e in episodes],
                   embedder=embedder, source=path.name)  # fmt: skip
    replay = home / "empty.replay.jsonl"
    cfg, pv = settings.extract, prompt_version(settings.extract)
    model = f"replay:{replay.name}"

    def plan() -> list[Any]:
        done = done_sessions(stores.meta)
        sessions, _ = load_sessions(stores, cfg, model=model, prompt_version=pv, done=done)
        return pack_requests(sessions, cfg, model=model, prompt_version=pv)

    plans = plan()
    tokens = sum(estimate_usage(p.params).input_tokens for p in plans)
    rubric = estimate_usage({"system": plans[0].params["system"]}).input_tokens if plans else 0
    replay.write_text("".join(
        json.dumps({"custom_id": p.custom_id, "answer": {"facts": []}}) + "\n" for p in plans
    ))  # fmt: skip
    answered = settings.model_copy(
        update={"extract": cfg.model_copy(update={"replay": str(replay)})}
    )
    extract_facts(stores, answered, RunContext(now=clock), embedder=embedder)
    rerun = plan()
    per_conv = tokens / max(conversations, 1)
    return {
        "conversations": conversations,
        "episodes": len(episodes),
        "sessions_sent": sum(len(p.sessions) for p in plans),
        "requests": len(plans),
        "input_tokens": tokens,
        "rubric_tokens_per_request": rubric,
        "input_tokens_per_conversation": round(per_conv, 1),
        "requests_per_conversation": round(len(plans) / max(conversations, 1), 3),
        "requests_per_episode": round(len(plans) / max(len(episodes), 1), 5),
        "input_tokens_per_episode": round(tokens / max(len(episodes), 1), 1),
        "times_fewer_than_mem0": round(MEM0_TOKENS_PER_CONVERSATION / max(per_conv, 1), 2),
        "requests_on_unchanged_rerun": len(rerun),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tau", type=Path, default=DATA / "tau_bench_airline_tasks_00_24.json")
    parser.add_argument("--locomo", type=Path, default=DATA / "locomo_5conv.json")
    args = parser.parse_args()
    out: dict[str, Any] = {"counted_from": "request bodies (characters / 4), no API call"}
    for name, path in (("tau-bench", args.tau), ("locomo", args.locomo)):
        with tempfile.TemporaryDirectory() as tmp:
            out[name] = measure(name, path, Path(tmp) / "home")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
