"""A fresh, throwaway home that runs the pipeline the way a nightly run would, for evaluation.

Why not the Prefect flow: the nightly flow is thin orchestration over these same stage calls
(cluster + mine per partition, score, build review batches); calling them directly keeps
``memory_core`` free of Prefect and an evaluation of three data sets inside minutes.

Two things differ from production, on purpose, and the report says so:

* scoring never touches the network: ``ANTHROPIC_API_KEY`` is hidden while the score stage
  runs, so the labelled heuristic scores; what Claude *would* have been sent is estimated from
  the exact request bodies the scorer builds (``cost_dry_run``);
* review: every open batch is approved as ``memctl review approve BATCH`` would
  (``decide_batch`` with reviewer ``memctl-eval``), so promotion can be measured. Gold labels
  never decide anything; they only score afterwards;
* forgetting: of the nightly forgetting pass only Lance maintenance runs (``maintain``: the
  full-text index recall uses); TTL compaction into digests is not run before measuring, and
  revocation and deletion are measured by their own probes.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memory_core.config import Settings, load_settings
from memory_core.context import Partition, RunContext
from memory_core.embed import Embedder, make_embedder
from memory_core.models import CandidateStatus
from memory_core.stages.cluster import cluster_partition
from memory_core.stages.embed import embed_episodes
from memory_core.stages.ingest import IngestResult, ingest_records
from memory_core.stages.mine import mine_partition
from memory_core.stores import Stores, open_stores

__all__ = ["EVAL_REVIEWER", "EvalHome", "Stopwatch", "day_after_last", "no_api_key"]


def day_after_last(episodes: list[dict[str, Any]]) -> datetime:
    """The night's clock: one day after the newest episode, so nothing is in the future."""
    last = max(datetime.fromisoformat(e["occurred_at"].replace("Z", "+00:00")) for e in episodes)
    return last.astimezone(UTC) + timedelta(days=1)


EVAL_REVIEWER = "memctl-eval"


@contextmanager
def no_api_key() -> Iterator[None]:
    """Hide ANTHROPIC_API_KEY for the duration: the evaluation never calls the API."""
    saved = os.environ.pop("ANTHROPIC_API_KEY", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["ANTHROPIC_API_KEY"] = saved


class Stopwatch:
    """Seconds per phase, for the report (wall time on this machine, not a benchmark)."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(now - self._last, 1)
        self._last = now


@dataclass
class EvalHome:
    """One data set's home: settings, open stores, the embedder, and what was run on it."""

    home: Path
    settings: Settings
    stores: Stores
    embedder: Embedder
    commits: dict[str, int] = field(default_factory=dict)
    cost: dict[str, int | float] = field(default_factory=dict)
    score_modes: list[str] = field(default_factory=list)

    @classmethod
    def create(cls, root: Path, name: str, *, embedder: str) -> EvalHome:
        """A new empty home ``root/name`` (removed first if present)."""
        home = Path(root) / name
        shutil.rmtree(home, ignore_errors=True)
        settings = load_settings(home=home, embed={"model": embedder}, recall={"access_log": False})
        stores = open_stores(settings)
        emb = make_embedder(settings.embed)
        stores.lance.ensure_tables(emb.dim, embedder=emb.version)
        return cls(home, settings, stores, emb)

    def ingest(self, episodes: list[dict[str, Any]], *, now: datetime, source: str) -> IngestResult:
        """Ingest, then embed what came without a vector (as the nightly's first task does)."""
        lines = [json.dumps(e, ensure_ascii=False) for e in episodes]
        ctx = RunContext(now=now)
        result = ingest_records(
            self.stores, self.settings, ctx, lines, embedder=self.embedder, source=source,
        )  # fmt: skip
        embed_episodes(self.stores, self.settings, ctx, embedder=self.embedder)
        return result

    def consolidate(self, *, now: datetime) -> dict[str, Any]:
        """Cluster and mine every partition, estimate LLM cost, score, batch for review."""
        from memory_core.stages.review import build_review_batches
        from memory_core.stages.score import score_candidates

        ctx = RunContext(now=now)
        table = self.stores.lance.scan("episodes", columns=["tenant_id", "namespace"])
        partitions = sorted(
            set(
                zip(
                    table.column("tenant_id").to_pylist(),
                    table.column("namespace").to_pylist(),
                    strict=True,
                )
            )
        )
        for tenant, namespace in partitions:
            part = Partition(tenant, namespace)
            with self.stores.meta.session():
                cluster_partition(
                    self.stores, self.settings.cluster, ctx, part, steps=self.settings.steps
                )
                mine_partition(self.stores, self.settings, ctx, part)
        for key, value in self.cost_dry_run().items():
            self.cost[key] = self.cost.get(key, 0) + value
        with no_api_key():
            scored = score_candidates(self.stores, self.settings.score, ctx)
        self.score_modes.append(scored.mode if scored.mode not in (None, "", "none") else "idle")
        batches = build_review_batches(self.stores, self.settings, ctx)
        return {"partitions": len(partitions), "batches": len(batches.created)}

    def cost_dry_run(self) -> dict[str, int | float]:
        """Requests and tokens the score stage would send Claude for the pending candidates:
        the same selection (no twins, kinds in ``score.llm_kinds``) and the same request
        bodies, estimated with the budget's rule (characters / 4; output = max_tokens)."""
        from memory_core.stages.score.budget import Budget, estimate_usage
        from memory_core.stages.score.evidence import load_evidence
        from memory_core.stages.score.prompt import request_params
        from memory_core.stores.candidates import list_candidates

        config = self.settings.score
        pending = [
            c
            for c in list_candidates(self.stores.meta, status=CandidateStatus.pending_score.value)
            if not c.stats.get("twin_of") and c.kind.value in config.llm_kinds
        ]
        evidence = load_evidence(self.stores.lance, pending)
        batch = len(pending) >= config.batch_min_requests
        budget = Budget(config)
        requests = input_tokens = output_tokens = 0
        cost = 0.0
        for cand in pending:
            usage = estimate_usage(request_params(cand, evidence[cand.candidate_id], config))
            requests += 1
            input_tokens += usage.total_input
            output_tokens += usage.output_tokens
            cost += budget.estimate_cost(usage, batch=batch)
        return {
            "requests": requests,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cost_usd": round(cost, 6),
        }

    def approve_all(self, *, now: datetime) -> dict[str, int]:
        """Approve every open review batch as ``memctl review approve BATCH`` would."""
        from memory_core.stages.review import ReviewRequest, decide_batch
        from memory_core.stores.review import list_batches

        ctx = RunContext(now=now, actor=EVAL_REVIEWER)
        request = ReviewRequest(decision="approve", reviewer=EVAL_REVIEWER)
        totals: dict[str, int] = {}
        for batch in list_batches(self.stores.meta, status="open"):
            result = decide_batch(
                self.stores, self.settings, ctx, batch.batch_id, request, embedder=self.embedder
            )
            if result.commit is not None:
                for key, value in result.commit.counts().items():
                    totals[key] = totals.get(key, 0) + value
        for key, value in totals.items():
            self.commits[key] = self.commits.get(key, 0) + value
        return totals

    def night(self, episodes: list[dict[str, Any]], *, now: datetime, source: str) -> int:
        """One night as a deployment runs it: ingest, consolidate, the reviewer approves every
        batch, maintenance. Returns the episodes inserted."""
        inserted = self.ingest(episodes, now=now, source=source).inserted
        self.consolidate(now=now)
        self.approve_all(now=now)
        self.maintain()
        return inserted

    def maintain(self) -> list[dict[str, Any]]:
        """Nightly Lance maintenance (``maintain_tables``): version pruning, index refresh and
        the full-text index the read path's BM25 leg needs. Without it recall would be
        measured on vectors alone, which is not what agents read after a nightly run."""
        from memory_core.stages.forget.maintain import maintain_tables
        from memory_core.stores.schemas import TABLES

        return maintain_tables(self.stores, self.settings, list(TABLES))

    def rows(self, table: str) -> list[dict[str, Any]]:
        """Every row of a Lance table (all statuses and versions of records), no vectors."""
        if table not in self.stores.lance.table_names():
            return []
        names = [n for n in self.stores.lance.table(table).schema.names if n != "vector"]
        return self.stores.lance.scan(table, columns=names).to_pylist()

    def remove(self) -> None:
        shutil.rmtree(self.home, ignore_errors=True)
