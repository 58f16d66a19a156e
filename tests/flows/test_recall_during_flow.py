"""A reader that recalls in a loop while the nightly flow and a promoter commit.

The reader must see no errors and no half-finished change: for every (subject, predicate) it
sees exactly one active object, never two (new row visible, old one not yet closed) and never
none (old closed, new not yet visible). The promoter supersedes facts the way promotion does,
one merge_insert per supersession that closes the old row, adds its superseded version and the
new row (schemas.py), while the real nightly flow runs through Prefect and holds the DuckDB
file: the reader never needs it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

from flows.nightly import run_nightly
from memory_core.read.indexes import ensure_fts
from memory_core.recall import Recaller, RecallResult
from tests.conftest import episode, lines_of
from tests.recall_rows import T0, make_row, write_rows

NOW = datetime(2026, 8, 1, tzinfo=UTC)
READ_AT = NOW + timedelta(days=365)
SUBJECTS = ["ana", "ben", None]  # None: tenant-scope facts every subject also sees
PREDICATES = ["editor", "shell"]


def _episodes() -> list[str]:
    records = [
        episode(
            episode_id=f"ok{i}",
            subject_id=subject,
            session_id=f"s{i}",
            occurred_at=f"2026-07-0{i + 1}T10:00:00Z",
        )
        for i, subject in enumerate(["ana", "ben", "cho", "dev"])
    ]
    return lines_of(*records)


def _fact(embedder, subject, predicate, n, **kw):
    fields = {
        "subject_id": subject,
        "predicate": predicate,
        "object": f"choice {n}",
        "text": f"preferred {predicate} is choice {n}",
        "valid_from": T0 + timedelta(hours=n),
        "recorded_at": T0 + timedelta(hours=n),
        **kw,
    }
    return make_row("facts", embedder, f"f-{subject}-{predicate}-{n}", **fields)


def _supersede(embedder, subject, predicate, n) -> list[dict]:
    """Rows of ONE commit: close version n, keep its superseded copy, add version n + 1."""
    at = T0 + timedelta(hours=n + 1)
    old = _fact(embedder, subject, predicate, n, recorded_to=at)
    copy = _fact(embedder, subject, predicate, n, status="superseded", valid_to=at, recorded_at=at)
    copy["fact_id"] += "-v"
    new = _fact(embedder, subject, predicate, n + 1, supersedes=old["fact_id"])
    return [old, copy, new]


def _half_states(result: RecallResult, subject: str) -> list[str]:
    seen = Counter(
        (r["subject_id"], r["predicate"]) for r in result.records if r["status"] == "active"
    )
    problems = [f"{key}: {count} active" for key, count in seen.items() if count != 1]
    for owner in (subject, None):
        problems += [f"{(owner, p)}: none active" for p in PREDICATES if (owner, p) not in seen]
    return problems


def _recall(memory: Recaller, subject: str) -> RecallResult:
    return memory.recall(
        "preferred editor shell",
        tenant_id="acme",
        subject_id=subject,
        memory_type="semantic",
        k=100,
        budget_tokens=100_000,
        now=READ_AT,
    )


def test_the_checker_sees_a_two_commit_supersession(stores, embedder, settings):
    """The check has teeth: a supersession split over two commits is caught in between."""
    lance = stores.lance
    lance.ensure_tables(embedder.dim)
    write_rows(lance, "facts", [_fact(embedder, s, p, 0) for s in SUBJECTS for p in PREDICATES])
    with Recaller.from_settings(settings, embedder=embedder, access_log=False) as memory:
        assert _half_states(_recall(memory, "ana"), "ana") == []
        rows = _supersede(embedder, "ana", "editor", 0)
        write_rows(lance, "facts", rows[2:])  # the new version first ...
        assert _half_states(_recall(memory, "ana"), "ana") == ["('ana', 'editor'): 2 active"]
        write_rows(lance, "facts", rows[:2])  # ... then closing the old one
        assert _half_states(_recall(memory, "ana"), "ana") == []


def test_reader_loop_during_the_nightly_flow_and_promotion(ingest, stores, embedder, settings):
    ingest(_episodes())
    lance = stores.lance
    write_rows(lance, "facts", [_fact(embedder, s, p, 0) for s in SUBJECTS for p in PREDICATES])
    ensure_fts(lance.table("facts"))
    stop_reader, stop_promoter = threading.Event(), threading.Event()
    errors: list[str] = []
    half: list[str] = []
    reads = [0]
    commits = [0]

    def reader() -> None:
        with Recaller.from_settings(settings, embedder=embedder, access_log=False) as memory:
            while not stop_reader.is_set():
                for subject in ("ana", "ben"):
                    try:
                        half.extend(_half_states(_recall(memory, subject), subject))
                    except Exception as exc:  # any error at all fails the test
                        errors.append(repr(exc))
                    reads[0] += 1

    def promoter() -> None:
        n = 0
        try:
            while not stop_promoter.is_set() or n < 4:
                for subject in SUBJECTS:
                    for predicate in PREDICATES:
                        write_rows(lance, "facts", _supersede(embedder, subject, predicate, n))
                        commits[0] += 1
                n += 1
        except Exception as exc:
            errors.append(f"promoter: {exc!r}")

    threads = [threading.Thread(target=reader), threading.Thread(target=promoter)]
    for thread in threads:
        thread.start()
    try:
        t0 = time.perf_counter()
        summary = run_nightly(settings, now=NOW)
        flow_s = time.perf_counter() - t0
    finally:
        stop_promoter.set()
        threads[1].join(120)
        stop_reader.set()
        threads[0].join(120)
    print(f"reader: {reads[0]} recalls, promoter: {commits[0]} commits, flow: {flow_s:.1f} s")
    assert summary["partitions"] == 1
    assert errors == []
    assert half == []
    assert reads[0] >= 10 and commits[0] >= 24, (reads, commits, flow_s)
    with Recaller.from_settings(settings, embedder=embedder, access_log=False) as memory:
        final = _recall(memory, "ana")
    assert _half_states(final, "ana") == []
    assert len(final) == 2 * len(PREDICATES)
