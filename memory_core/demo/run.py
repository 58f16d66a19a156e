"""`memctl demo`: generate the seeded demo, ingest it, run the nightly flow once, summarise.

The ground truth is written beside the episodes (``<home>/demo/truth.json``) and used only to
score the result, never fed to the pipeline.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from memory_core.config import Settings
from memory_core.context import RunContext
from memory_core.demo.generate import generate_demo, write_demo
from memory_core.embed import make_embedder
from memory_core.eval.demo_truth import score_candidates_against_truth
from memory_core.orchestration import orchestrator
from memory_core.stages.ingest import ingest_file
from memory_core.stores import open_stores
from memory_core.stores.candidates import list_candidates

__all__ = ["run_demo"]


def run_demo(settings: Settings, *, seed: int = 7, now: datetime | None = None) -> dict[str, Any]:
    run_nightly = orchestrator().run_nightly  # Prefect is imported only when the flow runs

    started = time.perf_counter()
    data = generate_demo(seed=seed)
    episodes_path, truth_path = write_demo(data, settings.home / "demo")
    last = max(
        datetime.fromisoformat(e["occurred_at"].replace("Z", "+00:00")) for e in data.episodes
    )
    clock = now or (last + timedelta(days=1)).astimezone(UTC)

    stores = open_stores(settings)
    embedder = make_embedder(settings.embed)
    stores.lance.ensure_tables(embedder.dim, embedder=embedder.version)
    ingest = ingest_file(stores, settings, RunContext(now=clock), episodes_path, embedder=embedder)
    t_ingest = time.perf_counter()
    flow_summary = run_nightly(settings, now=clock)
    t_flow = time.perf_counter()

    candidates = list_candidates(stores.meta)
    quality = score_candidates_against_truth(candidates, data.truth)
    return {
        "home": str(settings.home),
        "episodes_file": str(episodes_path),
        "truth_file": str(truth_path),
        "episodes": ingest.lines,
        "inserted": ingest.inserted,
        "unchanged": ingest.unchanged,
        "redactions": ingest.redactions,
        "claims_without_authority": ingest.claims_without_authority,
        "run_id": flow_summary["run_id"],
        "partitions": flow_summary["partitions"],
        "candidates_by_status": flow_summary["candidates_by_status"],
        "candidate_precision": quality["precision"],
        "candidate_recall": quality["recall"],
        "quality": {k: v for k, v in quality.items() if k not in {"precision", "recall"}},
        "seconds": {
            "ingest": round(t_ingest - started, 1),
            "consolidate": round(t_flow - t_ingest, 1),
            "total": round(t_flow - started, 1),
        },
    }
