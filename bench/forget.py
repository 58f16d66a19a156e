"""Benchmark forgetting against the bare Lance floor, in the same run; prints JSON.

    .venv/bin/python bench/forget.py --rows 1000000        # the issue's size (~1.6 GB)
    .venv/bin/python bench/forget.py --rows 100000 --repeat 3

A synthetic ``episodes`` table (real schema and scalar indices, written directly with Lance,
not through ingest) of ``--rows`` x 384-d rows in fragments of 100k; ``--subjects`` subjects
spread over every fragment (subject = row % subjects); every 10th row is past TTL + grace.

(a) TTL expiry of those 10% plus compaction through ``run_forgetting`` (scan for the rows and
    their DuckDB traces, delete, compaction materializing deletions, index refresh, cleanup of
    old versions) vs the floor: the same delete, ``compact_files(materialize_deletions_
    threshold=0.0)`` and ``cleanup_old_versions(older_than=0)``. Target: ratio <= 1.3.
(b) ``forget_subject`` of one subject: delete, derived re-checks, DuckDB purge, compaction of
    every fragment (the subject is in all of them), index refresh, version purge, and
    verification of every version of every table. Target: < 15 s.
(c) issue 19: the same ``forget_subject`` on a copy of the base that maintenance has regrouped
    by tenant and subject (``stores/layout.py``, fragments of ``--layout-rows``; the regroup
    itself is timed once), against (b)'s bare floor of the same run. Target: <= 0.3x.
Each trial runs on a fresh copy of the same base; medians over ``--repeat`` trials.
``--tool-calls``: every episode's first step is a tool call with its subject's own device id
(``get_device(device_id=DEV-s00042-3)``), so (b) and (c) also pay for finding the values only
the subject gave (``stages/forget/subject_values.py``: every other episode read) and for
looking for them afterwards; without it the steps are free text and that work is skipped.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa

from memory_core.config import Settings, load_settings
from memory_core.context import RunContext
from memory_core.read.indexes import ensure_fts
from memory_core.stages.forget import forget_subject, run_forgetting
from memory_core.stores import open_stores
from memory_core.stores.layout import compaction_options, regroup, subject_share
from memory_core.stores.schemas import schema_for

NOW = datetime(2026, 8, 1, 12, 0, tzinfo=UTC)
FRAGMENT = 100_000


TOOL_CALLS = False  # --tool-calls


def _actions(idx: np.ndarray, subjects: int) -> list[list[str]]:
    if not TOOL_CALLS:
        return [["step a", "step b"]] * len(idx)
    return [
        [f'{{"args":{{"device_id":"DEV-s{i % subjects:05d}-{i % 3}"}},"tool":"get_device"}}',
         "step b"]
        for i in idx
    ]  # fmt: skip


def _batch(start: int, n: int, subjects: int, dim: int, rng: np.random.Generator) -> pa.Table:
    idx = np.arange(start, start + n)
    old = idx % 10 == 0
    occurred = np.where(old, 60, 2)  # days before NOW: 60 > TTL 30 + grace 7
    at = [
        NOW - timedelta(days=int(d), seconds=int(i % 86400))
        for d, i in zip(occurred, idx, strict=True)
    ]
    vec = rng.standard_normal((n, dim), dtype=np.float32)
    vec /= np.linalg.norm(vec, axis=1, keepdims=True)
    ts = pa.timestamp("us", tz="UTC")
    cols = {
        "episode_id": [f"ep{i:08d}" for i in idx],
        "session_id": [None] * n,
        "occurred_at": pa.array(at, ts),
        "source_role": ["agent"] * n,
        "goal": [f"goal {i % 97}" for i in idx],
        "actions": _actions(idx, subjects),
        "outcome": ["success"] * n,
        "conditions": ['{"os":"linux"}'] * n,
        "observations": [[]] * n,
        "feedback": [None] * n,
        "claims": ["[]"] * n,
        "consent_basis": [None] * n,
        "sources": ["[]"] * n,
        "procedure_id": [None] * n,
        "procedure_version": [None] * n,
        "redactions": pa.array(np.zeros(n, np.int32)),
        "tenant_id": [f"t{i % 10}" for i in idx],
        "subject_id": [f"s{i % subjects:05d}" for i in idx],
        "namespace": ["it"] * n,
        "status": ["active"] * n,
        "valid_from": pa.array(at, ts),
        "valid_to": pa.nulls(n, ts),
        "recorded_at": pa.array(at, ts),
        "recorded_to": pa.nulls(n, ts),
        "expires_at": pa.nulls(n, ts),
        "sensitivity": ["low"] * n,
        "purpose": [None] * n,
        "authority": ["agent_inference"] * n,
        "confidence": pa.array(np.ones(n, np.float32)),
        "importance": pa.nulls(n, pa.float32()),
        "provenance": ["[]"] * n,
        "content_hash": [f"h{i:030d}" for i in idx],
        "embedding_version": ["hash-384"] * n,
        "policy_version": ["1"] * n,
        "text": [f"episode {i} text about goal {i % 97}" for i in idx],
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(vec.reshape(-1)), dim),
    }
    schema = schema_for("episodes", dim)
    return pa.Table.from_pydict({f.name: cols[f.name] for f in schema}, schema=schema)


FTS_TABLES = ["episodes", "facts", "procedures", "digests"]  # forget.fts_tables default


def _settings(home: Path, dim: int) -> Settings:
    return load_settings(home=home, embed={"model": "hash", "dim": dim},
                         forget={"fts_tables": FTS_TABLES})  # fmt: skip


def build(base: Path, rows: int, subjects: int, dim: int) -> float:
    t0 = time.perf_counter()
    settings = load_settings(home=base, embed={"model": "hash", "dim": dim})
    stores = open_stores(settings)
    stores.lance.ensure_tables(dim, embedder="hash-384")
    table = stores.lance.table("episodes")
    rng = np.random.default_rng(0)
    for start in range(0, rows, FRAGMENT):
        table.add(_batch(start, min(FRAGMENT, rows - start), subjects, dim, rng))
    # A table in service has the read path's full-text index (nightly maintenance builds it
    # once); build it here so the timed runs refresh it rather than build it.
    if "episodes" in FTS_TABLES:
        ensure_fts(table)
    ds = table.to_lance()
    ds.optimize.optimize_indices()
    lance.dataset(ds.uri).cleanup_old_versions(older_than=timedelta(0))
    return time.perf_counter() - t0


def _copy(base: Path, work: Path, name: str) -> Path:
    target = work / name
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(base, target)
    return target


def floor(home: Path) -> float:
    uri = str(home / "lance" / "episodes.lance")
    t0 = time.perf_counter()
    ds = lance.dataset(uri)
    ds.delete(f"occurred_at < TIMESTAMP '{(NOW - timedelta(days=37)):%Y-%m-%d %H:%M:%S}'")
    lance.dataset(uri).optimize.compact_files(materialize_deletions_threshold=0.0)
    lance.dataset(uri).cleanup_old_versions(older_than=timedelta(0))
    return time.perf_counter() - t0


def floor_forget(home: Path, subject: str) -> float:
    """The bare Lance floor of (b): delete the subject's rows, materialize, clean up; with
    the table's own fragment target when it has one (a regrouped table, (c))."""
    uri = str(home / "lance" / "episodes.lance")
    t0 = time.perf_counter()
    lance.dataset(uri).delete(f"subject_id = '{subject}'")
    ds = lance.dataset(uri)
    ds.optimize.compact_files(**compaction_options(ds, {"materialize_deletions_threshold": 0.0}))
    lance.dataset(uri).cleanup_old_versions(older_than=timedelta(0))
    return time.perf_counter() - t0


def ours_expire(home: Path, dim: int) -> tuple[float, dict]:
    settings = _settings(home, dim)
    t0 = time.perf_counter()
    stores = open_stores(settings)
    receipt = run_forgetting(stores, settings, RunContext(now=NOW))
    return time.perf_counter() - t0, receipt


def ours_forget(home: Path, dim: int, subject: str) -> tuple[float, dict]:
    settings = _settings(home, dim)
    t0 = time.perf_counter()
    stores = open_stores(settings)
    receipt = forget_subject(stores, settings, RunContext(now=NOW), subject)
    return time.perf_counter() - t0, receipt


def grouped_base(base: Path, work: Path, rows: int) -> tuple[Path, dict]:
    """A copy of ``base`` regrouped as nightly maintenance does (timed, with the spread)."""
    target = _copy(base, work, "base-grouped")
    uri = str(target / "lance" / "episodes.lance")
    before = subject_share(lance.dataset(uri)).as_dict()
    done = regroup(lance.dataset(uri), rows)
    lance.dataset(uri).cleanup_old_versions(older_than=timedelta(0))
    after = subject_share(lance.dataset(uri)).as_dict()
    return target, {"regroup": done, "spread_before": before, "spread_after": after}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--subjects", type=int, default=10_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--no-fts", action="store_true",
        help="episodes without the full-text index (forget.fts_tables without episodes)",
    )  # fmt: skip
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--layout-rows", type=int, default=100_000, help="0 = skip (c)")
    parser.add_argument("--only-forget", action="store_true", help="skip (a), the TTL pass")
    parser.add_argument("--tool-calls", action="store_true", help="steps with per-subject ids")
    args = parser.parse_args()
    global TOOL_CALLS
    TOOL_CALLS = args.tool_calls
    if args.no_fts:
        FTS_TABLES.remove("episodes")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-forget-"))
    work.mkdir(parents=True, exist_ok=True)
    base = work / "base"
    shutil.rmtree(base, ignore_errors=True)
    built = build(base, args.rows, args.subjects, args.dim)
    floors, expires, forgets, forget_floors, receipts = [], [], [], [], {}
    grouped, grouped_floors, layout = [], [], {}
    if args.layout_rows:
        grouped_home, layout = grouped_base(base, work, args.layout_rows)
    for trial in range(args.repeat):
        if not args.only_forget:
            floors.append(floor(_copy(base, work, "floor")))
            seconds, receipts["expire"] = ours_expire(_copy(base, work, "ours"), args.dim)
            expires.append(seconds)
        subject = f"s{(42 + trial) % args.subjects:05d}"
        forget_floors.append(floor_forget(_copy(base, work, "forget-floor"), subject))
        seconds, receipts["forget"] = ours_forget(_copy(base, work, "forget"), args.dim, subject)
        forgets.append(seconds)
        if args.layout_rows:
            home = _copy(grouped_home, work, "grouped-floor")
            grouped_floors.append(floor_forget(home, subject))
            seconds, receipts["grouped"] = ours_forget(
                _copy(grouped_home, work, "grouped"), args.dim, subject
            )
            grouped.append(seconds)
    shutil.rmtree(work, ignore_errors=True) if args.workdir is None else None
    d = statistics.median(forgets)
    forget_receipt = receipts["forget"]
    import os

    if args.layout_rows:
        g = statistics.median(grouped)
        layout_out = {
            **layout, "layout_rows": args.layout_rows,
            "seconds": [round(x, 2) for x in grouped], "median_s": round(g, 2),
            "bare_floor_grouped_s": [round(x, 2) for x in grouped_floors],
            "ratio_to_todays_bare_floor": round(g / statistics.median(forget_floors), 3),
            "target_ratio": 0.3,
            "phases_s": receipts["grouped"]["seconds"],
            "fragments_rewritten": receipts["grouped"]["fragments_rewritten"],
            "rows_deleted": receipts["grouped"]["lance_rows_deleted"],
            "verified": receipts["grouped"]["verification"]["verified"],
        }  # fmt: skip
    else:
        layout_out = None
    if args.only_forget:
        ttl = None
    else:
        f, e = statistics.median(floors), statistics.median(expires)
        ttl = {
            "floor_s": [round(x, 2) for x in floors], "ours_s": [round(x, 2) for x in expires],
            "median_ratio": round(e / f, 3), "target_ratio": 1.3,
            "deleted": receipts["expire"]["deleted"],
            "ours_phases_s": receipts["expire"]["seconds"],
        }  # fmt: skip

    print(json.dumps({
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
        "episodes_fts_index": "episodes" in FTS_TABLES,
        "tool_calls": TOOL_CALLS,
        "rows": args.rows, "subjects": args.subjects, "dim": args.dim, "repeat": args.repeat,
        "build_s": round(built, 2),
        "ttl_expiry": ttl,
        "forget_subject": {
            "seconds": [round(x, 2) for x in forgets], "median_s": round(d, 2), "target_s": 15,
            "floor_s": [round(x, 2) for x in forget_floors],
            "phases_s": forget_receipt["seconds"],
            "rows_deleted": forget_receipt["lance_rows_deleted"],
            "fragments_rewritten": forget_receipt["fragments_rewritten"],
            "versions_purged": forget_receipt["versions_purged"],
            "verified": forget_receipt["verification"]["verified"],
            "values_checked": forget_receipt["verification"].get("values_checked", 0),
            "receipt_duration_s": forget_receipt["duration_s"],
        },
        "forget_subject_grouped": layout_out,
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
