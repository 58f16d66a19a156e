"""Time from a reviewer's decision to the read path reflecting it, with the reader left open.

Per repetition, a fresh home (hash embedder, real LanceDB + DuckDB) holds three subjects:

* ``ua``: an approved fact bound to ``kb/vpn@r1``; the source moves to r2 and the nightly
  staleness stage puts the fact in a ``revalidate`` batch, which the reviewer *rejects*;
* ``ub``: an approved preference contradicted once, ``contested``, in a ``settle`` batch the
  reviewer *settles* (keeps the fact);
* ``uc``: a preference candidate in a promotion batch the reviewer *approves*.

A ``Recaller`` is opened before the decisions and never reopened. For each decision we time
``decide_batch`` (the decision and its commit) and then query the open reader until it shows
the change (fact revoked / conflict marker gone / new fact served); ``visible_ms`` is from the
start of the decision to the first query that reflects it.

    python bench/review_to_read.py --reps 7      # prints one JSON document
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memory_core.config import load_settings
from memory_core.context import Partition, RunContext
from memory_core.embed import HashEmbedder
from memory_core.recall import Recaller
from memory_core.stages.ingest import ingest_records
from memory_core.stages.mine import mine_partition
from memory_core.stages.review import ReviewRequest, build_review_batches, decide_batch
from memory_core.stages.score import score_candidates
from memory_core.stages.staleness import run_staleness
from memory_core.stages.staleness.source_file import update_sources
from memory_core.stores import Stores, open_stores
from memory_core.stores.review import list_batches

NOW = datetime(2026, 8, 1, 12, tzinfo=UTC)
LATER = datetime(2026, 8, 5, 12, tzinfo=UTC)


def _said(eid: str, subject: str, predicate: str, obj: str, day: int, cites: bool = False) -> str:
    text = f"The {predicate} is {obj}."
    record: dict[str, Any] = {
        "episode_id": eid, "tenant_id": "acme", "subject_id": subject, "namespace": "it",
        "occurred_at": f"2026-07-{day:02d}T09:00:00Z", "source_role": "user", "text": text,
        "claims": [{"predicate": predicate, "object": obj, "span": text}],
    }  # fmt: skip
    if cites:
        record["sources"] = [{"source_id": "kb/vpn", "revision": "r1"}]
    return json.dumps(record)


def _round(stores: Stores, settings: Any, now: datetime, lines: list[str], emb: Any) -> None:
    ctx = RunContext(now=now)
    ingest_records(stores, settings, ctx, lines, embedder=emb, source="bench.jsonl")
    mine_partition(stores, settings, ctx, Partition("acme", "it"))
    score_candidates(stores, settings.score, ctx, sync=True)
    build_review_batches(stores, settings, ctx)


def _setup(home: Path) -> tuple[Any, Stores, HashEmbedder]:
    settings = load_settings(home=home, embed={"model": "hash"})
    stores = open_stores(settings)
    emb = HashEmbedder(settings.embed.dim)
    first = [
        _said("a1", "ua", "vpn_server", "vpn1", 1, cites=True),
        _said("a2", "ua", "vpn_server", "vpn1", 2, cites=True),
        _said("b1", "ub", "ui_theme", "dark", 1),
        _said("b2", "ub", "ui_theme", "dark", 2),
    ]
    _round(stores, settings, NOW, first, emb)
    for batch in list_batches(stores.meta, status="open"):
        request = ReviewRequest(decision="approve", reviewer="setup")
        decide_batch(stores, settings, RunContext(now=NOW), batch.batch_id, request, embedder=emb)
    second = [
        _said("b3", "ub", "ui_theme", "light", 20),
        _said("c1", "uc", "editor", "vim", 21),
        _said("c2", "uc", "editor", "vim", 22),
    ]
    _round(stores, settings, LATER, second, emb)
    update = json.dumps({"source_id": "kb/vpn", "revision": "r2", "changed_at": NOW.isoformat()})
    update_sources(stores, RunContext(now=LATER), [update])
    run_staleness(stores, settings, RunContext(now=LATER))
    return settings, stores, emb


def _facts(reader: Recaller, subject: str, **kw: Any) -> list[dict[str, Any]]:
    got = reader.recall(
        "preference", tenant_id="acme", subject_id=subject, memory_type="semantic",
        now=LATER, **kw,
    )  # fmt: skip
    return got.records


def _time(decide: Callable[[], Any], reflected: Callable[[], bool]) -> dict[str, float]:
    t0 = time.perf_counter()
    decide()
    t1 = time.perf_counter()
    polls = 0
    while not reflected():
        polls += 1
        if time.perf_counter() - t0 > 30:
            msg = "the read path did not reflect the decision within 30 s"
            raise RuntimeError(msg)
    t2 = time.perf_counter()
    return {"decide_ms": (t1 - t0) * 1000, "visible_ms": (t2 - t0) * 1000, "extra_polls": polls}


def one_rep(home: Path) -> dict[str, dict[str, float]]:
    settings, stores, emb = _setup(home)
    batches = {b.kind: b for b in list_batches(stores.meta, status="open")}
    assert set(batches) == {"semantic", "revalidate", "settle"}, set(batches)
    reader = Recaller.from_settings(settings, embedder=emb, access_log=False)
    assert _facts(reader, "uc") == [] and _facts(reader, "ub")[0]["conflict"] is True
    assert _facts(reader, "ua", include_stale=True)[0]["stale"] is True
    ctx = RunContext(now=LATER)

    def decide(kind: str, decision: str, reason: str = "") -> Callable[[], Any]:
        request = ReviewRequest(decision=decision, reviewer="bench", reason=reason)
        return lambda: decide_batch(
            stores, settings, ctx, batches[kind].batch_id, request, embedder=emb
        )

    out = {
        "approve": _time(decide("semantic", "approve"), lambda: len(_facts(reader, "uc")) == 1),
        "reject": _time(
            decide("revalidate", "reject", "the server moved"),
            lambda: _facts(reader, "ua", include_stale=True) == [],
        ),
        "settle": _time(
            decide("settle", "approve"), lambda: _facts(reader, "ub")[0]["conflict"] is False
        ),
    }
    reader.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    load_before = os.getloadavg()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.reps):
            runs.append(one_rep(Path(tmp) / f"home{i}"))
    summary: dict[str, Any] = {"reps": args.reps, "load_avg_before": load_before}
    for kind in ("approve", "reject", "settle"):
        summary[kind] = {
            metric: round(statistics.median(r[kind][metric] for r in runs), 1)
            for metric in ("decide_ms", "visible_ms", "extra_polls")
        }
        summary[kind]["visible_ms_max"] = round(max(r[kind]["visible_ms"] for r in runs), 1)
    summary["load_avg_after"] = os.getloadavg()
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
