"""LLM cost of importance scoring: this pipeline against scoring every session's transcript.

Usage (each home must have been consolidated: episodes in Lance, candidates in DuckDB)::

    python bench/llm_cost.py --home demo=DATA/demo --home tau=DATA/tau \
        --transcripts tau=../shared/data/tau_bench_airline_tasks_00_24.json [--out cost.json]

For each home it replays scoring twice through the real SDK and an ``httpx2.MockTransport``
that answers like the API and counts what it receives; nothing touches the network:

* ours: every candidate the consolidation scored is put back to ``pending_score`` in a *copy*
  of the metadata file (the home itself is not changed), with an empty score cache and no open
  batches, and ``score_candidates`` runs as the nightly flow would (batches when large enough);
* baseline, the common approach: one Messages request per session carrying the session's
  whole transcript with the same rubric. With ``--transcripts LABEL=FILE`` (tau-bench JSON) the
  raw trajectories are the transcripts; otherwise the stored episodes of each session are (these
  are already condensed, so the baseline is then undercounted and our ratio conservative).

Input tokens are counted the same way on both sides, from the request bodies the transport
received: characters of every system and message text / 4. Requests are Messages requests,
each batch item counted as one (the API bills them so); ``http_calls`` shows how few HTTP calls
carry them. Targets: at least 20x fewer input tokens than the baseline, and at most 0.05
requests per episode. The exit status is 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anthropic
import httpx2

from memory_core.config import load_settings
from memory_core.context import RunContext
from memory_core.models import CandidateStatus
from memory_core.stages.score import score_candidates
from memory_core.stages.score.prompt import ANSWER_SCHEMA, system_blocks
from memory_core.stores import open_stores
from memory_core.stores.candidates import list_candidates, set_candidate_status

TARGET_INPUT_RATIO = 20.0
TARGET_REQUESTS_PER_EPISODE = 0.05
_ANSWER = json.dumps(
    {"score": 3, "rationale": "bench answer", "kind_check": "semantic", "risk_flags": []}
)
_T0 = datetime(2026, 1, 1, tzinfo=UTC)


def text_tokens(params: dict[str, Any]) -> int:
    """Characters of the system and message texts / 4: one rule for both sides."""
    chars = 0
    system = params.get("system") or []
    chars += len(system) if isinstance(system, str) else sum(len(b.get("text", "")) for b in system)
    for message in params.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            chars += len(content)
        else:
            chars += sum(len(b.get("text", "")) for b in content or [])
    return math.ceil(chars / 4)


class CountingAPI:
    """Answers like the Messages and Batches API; counts requests and input tokens received."""

    def __init__(self) -> None:
        self.requests = 0
        self.input_tokens = 0
        self.http: Counter[str] = Counter()
        self._batches: dict[str, list[dict[str, Any]]] = {}

    def client(self) -> anthropic.Anthropic:
        transport = httpx2.MockTransport(self.handle)
        return anthropic.Anthropic(api_key="bench", http_client=httpx2.Client(transport=transport))

    def _count(self, params: dict[str, Any]) -> int:
        tokens = text_tokens(params)
        self.requests += 1
        self.input_tokens += tokens
        return tokens

    def _message(self, params: dict[str, Any], n: int) -> dict[str, Any]:
        tokens = self._count(params)
        return {
            "id": f"msg_{n}",
            "type": "message",
            "role": "assistant",
            "model": params.get("model", ""),
            "content": [{"type": "text", "text": _ANSWER}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": tokens, "output_tokens": 30},
        }

    def _batch(self, batch_id: str) -> dict[str, Any]:
        n = len(self._batches[batch_id])
        return {
            "id": batch_id,
            "type": "message_batch",
            "processing_status": "ended",
            "request_counts": {
                "processing": 0,
                "succeeded": n,
                "errored": 0,
                "canceled": 0,
                "expired": 0,
            },
            "created_at": _T0.isoformat(),
            "expires_at": (_T0 + timedelta(days=1)).isoformat(),
            "ended_at": _T0.isoformat(),
            "results_url": f"https://api.anthropic.com/v1/messages/batches/{batch_id}/results",
        }

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        path = request.url.path
        body = json.loads(request.content) if request.content else {}
        if path == "/v1/messages":
            self.http["messages"] += 1
            return httpx2.Response(200, json=self._message(body, self.http["messages"]))
        if path == "/v1/messages/batches" and request.method == "POST":
            self.http["batch_create"] += 1
            batch_id = f"msgbatch_{self.http['batch_create']}"
            self._batches[batch_id] = body["requests"]
            return httpx2.Response(200, json=self._batch(batch_id))
        batch_id = path.split("/")[4]
        if path.endswith("/results"):
            self.http["batch_results"] += 1
            lines = [
                json.dumps(
                    {
                        "custom_id": r["custom_id"],
                        "result": {"type": "succeeded", "message": self._message(r["params"], i)},
                    }
                )
                for i, r in enumerate(self._batches[batch_id])
            ]
            return httpx2.Response(200, content=("\n".join(lines) + "\n").encode())
        self.http["batch_retrieve"] += 1
        return httpx2.Response(200, json=self._batch(batch_id))


def _sessions_from_episodes(rows: list[dict[str, Any]]) -> list[str]:
    sessions: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        key = (row["tenant_id"], row.get("session_id") or row["episode_id"])
        sessions[key].append(row)
    return [
        json.dumps(sorted(eps, key=lambda r: str(r.get("occurred_at"))), default=str)
        for _, eps in sorted(sessions.items())
    ]


def _sessions_from_tau(path: Path) -> list[str]:
    return [
        json.dumps(item.get("traj") or [], default=str) for item in json.loads(path.read_text())
    ]


def baseline(transcripts: list[str], model: str) -> CountingAPI:
    """One request per session with its whole transcript and the same rubric."""
    api = CountingAPI()
    client = api.client()
    for transcript in transcripts:
        client.messages.create(
            model=model,
            max_tokens=400,
            system=system_blocks(),  # type: ignore[arg-type]
            messages=[
                {
                    "role": "user",
                    "content": f"<session>\n{transcript}\n</session>\nScore what this session "
                    "teaches that is worth keeping.",
                }
            ],
            output_config={"format": {"type": "json_schema", "schema": ANSWER_SCHEMA}},
        )
    return api


def measure(home: Path, *, transcripts: Path | None = None) -> dict[str, Any]:
    """Requests and input tokens per 1,000 episodes, ours and the baseline, for one home."""
    settings = load_settings(home=home)
    with tempfile.TemporaryDirectory() as tmp:
        meta_copy = Path(tmp) / "meta.duckdb"
        shutil.copy(settings.meta_path, meta_copy)
        settings = load_settings(home=home, stores={"meta_path": str(meta_copy)})
        stores = open_stores(settings)
        episodes = stores.lance.scan("episodes").drop_columns(["vector"]).to_pylist()
        scored = [c for c in list_candidates(stores.meta) if c.scorer is not None]
        set_candidate_status(
            stores.meta,
            {c.candidate_id: (CandidateStatus.pending_score, c.reason) for c in scored},
            now=_T0,
        )
        with stores.meta.transaction() as con:  # a cold run: no cache, no open batch
            con.execute("DELETE FROM score_cache")
            con.execute("DELETE FROM llm_batches")
        ours_api = CountingAPI()
        ctx = RunContext(now=datetime.now(UTC), run_id="bench_llm_cost")
        result = score_candidates(
            stores, settings.score, ctx, client=ours_api.client(), sleep=lambda s: None
        )
    sessions = _sessions_from_tau(transcripts) if transcripts else _sessions_from_episodes(episodes)
    base_api = baseline(sessions, settings.score.model)
    n = max(len(episodes), 1)

    def side(api: CountingAPI) -> dict[str, Any]:
        return {
            "requests": api.requests,
            "input_tokens": api.input_tokens,
            "requests_per_1000_episodes": round(api.requests * 1000 / n, 2),
            "input_tokens_per_1000_episodes": round(api.input_tokens * 1000 / n, 1),
            "requests_per_episode": round(api.requests / n, 4),
            "http_calls": dict(api.http),
            "http_calls_per_episode": round(sum(api.http.values()) / n, 4),
        }

    ratio = base_api.input_tokens / ours_api.input_tokens if ours_api.input_tokens else math.inf
    ours = side(ours_api)
    return {
        "home": str(home),
        "episodes": len(episodes),
        "sessions": len(sessions),
        "candidates_scored": len(scored),
        "score_mode": result.mode,
        "ours": ours,
        "baseline": side(base_api),
        "input_token_ratio": round(ratio, 1) if math.isfinite(ratio) else None,
        "meets_input_target": ratio >= TARGET_INPUT_RATIO,
        "meets_request_target": ours["requests_per_episode"] <= TARGET_REQUESTS_PER_EPISODE,
    }


def _pairs(values: list[str], flag: str) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for value in values:
        label, sep, path = value.partition("=")
        if not sep:
            sys.exit(f"{flag} expects LABEL=PATH, got {value!r}")
        out[label] = Path(path)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", action="append", required=True, help="LABEL=DIR, repeatable")
    parser.add_argument("--transcripts", action="append", default=[], help="LABEL=TAU_JSON")
    parser.add_argument("--out", type=Path, help="also write the JSON report here")
    args = parser.parse_args(argv)
    homes = _pairs(args.home, "--home")
    transcripts = _pairs(args.transcripts, "--transcripts")
    report = {
        label: measure(home, transcripts=transcripts.get(label)) for label, home in homes.items()
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    ok = all(r["meets_input_target"] and r["meets_request_target"] for r in report.values())
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
