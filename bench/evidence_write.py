"""One partition's candidate write on the 1M shape, through the store's own upsert.

    python bench/evidence_write.py [--candidates 15000] [--cited 80] [--partitions 100]
        [--samples 8] [--home DIR]

Why: at 1M episodes the nightly holds ~15k candidates citing ~1.2M (candidate, episode)
evidence rows; a 1% night rewrites every touched candidate of a partition (~150) with ~1 new
cited episode each. How long that write takes once the table is big is what BENCHMARKS.md's
s28/s29 evidence-write figures are about; earlier sessions measured it with scratch scripts on
a copy of the table's SQL, this measures ``stores.candidates.upsert_candidates`` itself (body
upsert, evidence difference, status audit), each sample in its own ``MetaStore.session`` as a
flow's partition batch holds one, closed (and checkpointed) outside the timing.

Builds a store of ``--candidates`` procedural candidates in ``--partitions`` namespaces, each
citing ``--cited`` episodes whose pins live in ``candidate_evidence`` (as the miner writes
them), then for ``--samples`` partitions, spread over the store, rewrites its candidates with
one more supporting episode each and prints process CPU and wall seconds of the write and of
the session's close; medians at the end. Synthetic ids and bodies: only the shape is the 1M
bench's (bench/consolidate.py), not its content.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

from memory_core.config import load_settings
from memory_core.models import Candidate, CandidateKind, CandidateStatus, ProcedureSpec
from memory_core.stores import open_stores
from memory_core.stores.candidates import upsert_candidates
from memory_core.stores.meta import MetaStore


def _candidates(
    partition: int, per: int, cited: int, extra: int
) -> tuple[list[Candidate], dict[str, tuple[str | None, str | None]]]:
    """A partition's candidates citing ``cited + extra`` episodes each, and their pins."""
    cands, pins = [], {}
    for i in range(per):
        ids = [f"ep-{partition}-{(i * 37 + k) % (per * 10)}" for k in range(cited + extra)]
        for eid in ids:
            pins[eid] = (f"hash-{eid}", f"subject-{zlib.crc32(eid.encode()) % 500}")
        cands.append(
            Candidate(
                candidate_id=f"cand-{partition}-{i}",
                kind=CandidateKind.procedural,
                tenant_id="bench",
                subject_id=None,
                namespace=f"ns-{partition}",
                procedure=ProcedureSpec(name=f"procedure {i}", steps=["check", "reset"]),
                support_ids=ids,
                confidence=0.5,
                status=CandidateStatus.pending_score,
                text=f"procedure {i} of partition {partition}",
                stats={"support": len(ids)},
            )
        )
    return cands, pins


def _cpu() -> float:
    return time.process_time()


def build(meta: MetaStore, partitions: int, per: int, cited: int, now: datetime) -> None:
    for p in range(partitions):
        cands, pins = _candidates(p, per, cited, 0)
        with meta.session():
            upsert_candidates(meta, cands, run_id="night-1", now=now, pins=pins)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--candidates", type=int, default=15_000)
    parser.add_argument("--cited", type=int, default=80)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--home", type=Path)
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="evidence-write-"))
    meta = open_stores(load_settings(home=home, embed={"model": "hash"})).meta
    per = args.candidates // args.partitions
    now = datetime(2026, 12, 1, tzinfo=UTC)
    t0, c0 = time.perf_counter(), _cpu()
    build(meta, args.partitions, per, args.cited, now)
    print(f"built {args.partitions} x {per} candidates x {args.cited} cited in "
          f"{time.perf_counter() - t0:.1f} s / {_cpu() - c0:.1f} CPU s, home {home}")  # fmt: skip
    step = max(1, args.partitions // args.samples)
    writes, closes = [], []
    for n, p in enumerate(range(step // 2, args.partitions, step)[: args.samples]):
        cands, pins = _candidates(p, per, args.cited, 1)
        later = now + timedelta(days=1 + n)
        w0, c0 = time.perf_counter(), _cpu()
        with meta.session():
            counts = upsert_candidates(meta, cands, run_id=f"night-{n + 2}", now=later,
                                       pins=pins)  # fmt: skip
            w1, c1 = time.perf_counter(), _cpu()
        w2, c2 = time.perf_counter(), _cpu()
        writes.append((w1 - w0, c1 - c0))
        closes.append((w2 - w1, c2 - c1))
        print(f"partition {p:3d}: write {w1 - w0:.3f} s / {c1 - c0:.3f} CPU s, close "
              f"{w2 - w1:.3f} s / {c2 - c1:.3f} CPU s, {counts}", flush=True)  # fmt: skip
    print(f"median write {statistics.median(w for w, _ in writes):.3f} s / "
          f"{statistics.median(c for _, c in writes):.3f} CPU s; median close "
          f"{statistics.median(w for w, _ in closes):.3f} s / "
          f"{statistics.median(c for _, c in closes):.3f} CPU s")  # fmt: skip


if __name__ == "__main__":
    main()
