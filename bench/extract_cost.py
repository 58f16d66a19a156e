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

Mem0, counted the same way. The issue measured Mem0 2.2.1 adding each of the same 100
tau-bench conversations whole: 11,085 input tokens each, of which 862 are the conversation's
user and assistant text, so 10,223 are what one add call costs whatever the text (its ~7.7k
system prompt and the rest of its prompts). That fixed part is taken from the issue, not
rerun here (no Mem0, no API). Mem0's equivalent for a data set is then: calls x 10,223 + the
user and agent text it is given, counted like our bodies (characters / 4). Two ways of
adding, both reported, per conversation and per session:

* ``one add per conversation``: the whole conversation in one call (the issue's tau-bench
  protocol);
* ``one add per session``: one call per session (a LoCoMo conversation is 19-32 dated
  sessions; an agent adds a session when it ends, which is how Mem0 is used on it).

Prints JSON.
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
MEM0_TOKENS_PER_CONVERSATION = 11_085  # the measurement on tau-bench
MEM0_TEXT_TOKENS_PER_CONVERSATION = 862  # of which user and assistant text
MEM0_FIXED_PER_ADD = MEM0_TOKENS_PER_CONVERSATION - MEM0_TEXT_TOKENS_PER_CONVERSATION


def mem0_equivalent(
    episodes: list[dict[str, Any]], ours: int, conversations: int
) -> dict[str, Any]:
    """Mem0's input tokens for the same conversations, counted like our bodies (see the module
    docstring), and how many times fewer ours are, per conversation and per session."""
    chars = 0
    sessions: set[str] = set()
    for e in episodes:
        if e.get("source_role") not in ("user", "agent") or not e.get("text"):
            continue
        chars += len(e["text"])
        sessions.add(e.get("session_id") or e["episode_id"])
    conversations = max(conversations, 1)
    n_sessions = max(len(sessions), 1)
    text_tokens = chars / 4
    whole = conversations * MEM0_FIXED_PER_ADD + text_tokens
    per_session = n_sessions * MEM0_FIXED_PER_ADD + text_tokens
    out: dict[str, Any] = {
        "fixed_tokens_per_add": MEM0_FIXED_PER_ADD,
        "text_tokens": round(text_tokens),
        "sessions": n_sessions,
        "ours_per_conversation": round(ours / conversations, 1),
        "ours_per_session": round(ours / n_sessions, 1),
    }
    for name, total in (("one_add_per_conversation", whole), ("one_add_per_session", per_session)):
        out[name] = {
            "mem0_per_conversation": round(total / conversations, 1),
            "mem0_per_session": round(total / n_sessions, 1),
            "times_fewer": round(total / max(ours, 1), 2),
        }
    return out


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
        "mem0_counted_the_same_way": mem0_equivalent(episodes, tokens, conversations),
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
