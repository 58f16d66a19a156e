"""Cost of the nightly staleness stage on many facts bound to corpus sources.

N active subject-scope facts (rows written straight into a real Lance table, hash vectors),
each bound to one of S sources at revision r1, and N/2 later user statements agreeing with
their facts (the contested scan reads and compares every one; none contests). Then a tenth of the sources move to r2 and ``run_staleness`` runs: it marks
the bound facts stale (one merge_insert), queues them in revalidate batches and scans for
contradictions and procedure outcomes. A second run (nothing new) measures the nightly
overhead when nothing changed.

    python bench/staleness.py --facts 20000 --sources 2000    # prints one JSON document
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from memory_core.config import load_settings
from memory_core.context import RunContext
from memory_core.stages.staleness import run_staleness
from memory_core.stages.staleness.source_file import update_sources
from memory_core.stores import open_stores

T0 = datetime(2026, 7, 1, tzinfo=UTC)
NOW = datetime(2026, 8, 1, tzinfo=UTC)


def _vectors(n: int, dim: int) -> pa.Array:
    rng = np.random.default_rng(0)
    flat = rng.standard_normal(n * dim).astype(np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(flat), dim)


def _facts(n: int, sources: int, dim: int, schema: pa.Schema) -> pa.Table:
    rows: list[dict[str, Any]] = []
    for i in range(n):
        src = f"kb/doc-{i % sources}"
        rows.append(
            {
                "fact_id": f"fact_{i}", "predicate": f"p{i % 50}", "object": f"o{i}",
                "conditions": "{}", "candidate_id": None, "approver": "bench",
                "sources": json.dumps([{"revision": "r1", "source_id": src}]),
                "tenant_id": "acme", "subject_id": f"u{i}", "namespace": "it",
                "status": "active", "valid_from": T0, "recorded_at": T0,
                "sensitivity": "low", "authority": "user_statement", "confidence": 1.0,
                "provenance": "[]", "content_hash": f"h{i}", "text": f"u{i}: p = o{i}",
            }
        )  # fmt: skip
    table = pa.Table.from_pylist(rows, schema=schema.remove(schema.get_field_index("vector")))
    return table.append_column("vector", _vectors(n, schema.field("vector").type.list_size))


def _episodes(n: int, schema: pa.Schema) -> pa.Table:
    rows = []
    for i in range(n):
        rows.append(
            {
                "episode_id": f"ep{i}", "occurred_at": T0 + timedelta(days=1),
                "source_role": "user", "outcome": "unknown", "conditions": "{}",
                "claims": json.dumps([{"predicate": f"p{i % 50}", "object": f"o{i}",
                                       "authority": "user_statement"}]),
                "tenant_id": "acme", "subject_id": f"u{i}", "namespace": "it",
                "status": "active", "recorded_at": T0 + timedelta(days=1), "sensitivity": "low",
                "authority": "user_statement", "content_hash": f"e{i}", "text": "I prefer it",
            }
        )  # fmt: skip
    table = pa.Table.from_pylist(rows, schema=schema.remove(schema.get_field_index("vector")))
    return table.append_column("vector", _vectors(n, schema.field("vector").type.list_size))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=20_000)
    parser.add_argument("--sources", type=int, default=2_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(home=Path(tmp) / "home", embed={"model": "hash"})
        stores = open_stores(settings)
        stores.lance.ensure_tables(settings.embed.dim)
        facts = stores.lance.table("facts")
        facts.add(_facts(args.facts, args.sources, settings.embed.dim, facts.schema))
        episodes = stores.lance.table("episodes")
        episodes.add(_episodes(args.facts // 2, episodes.schema))
        lines = [
            json.dumps({"source_id": f"kb/doc-{i}", "revision": "r1" if i % 10 else "r2",
                        "changed_at": NOW.isoformat()})
            for i in range(args.sources)
        ]  # fmt: skip
        update_sources(stores, RunContext(now=NOW), lines)
        load = os.getloadavg()
        t0 = time.perf_counter()
        first = run_staleness(stores, settings, RunContext(now=NOW))
        t1 = time.perf_counter()
        second = run_staleness(stores, settings, RunContext(now=NOW))
        t2 = time.perf_counter()
        print(
            json.dumps(
                {
                    "facts": args.facts,
                    "sources": args.sources,
                    "stale": len(first["revisions"]["stale"]),
                    "revalidate_batches": len(first["revisions"]["revalidate_batches"]),
                    "first_run_s": round(t1 - t0, 2),
                    "first_run_parts_s": first["seconds"],
                    "rerun_nothing_new_s": round(t2 - t1, 2),
                    "rerun_parts_s": second["seconds"],
                    "load_avg": load,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
