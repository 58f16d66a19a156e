"""Do two checkouts mine the same candidates? Builds one bench home per checkout, runs cluster and
mine on it, dumps the candidates table and their evidence, and diffs the dumps.

    python bench/candidates_diff.py /path/to/before /path/to/after [--episodes 24000]
        [--incremental 0.01] [--after-processes 2]

Why: a speed change in the cluster or mine stage must not change what is mined. Each checkout
runs in its own process with ``PYTHONPATH`` set to it, on a home built by that checkout from
``bench/consolidate.py``'s generator (the same seed, so the same episodes). Compared: every
candidate's id, kind, status, reason, content hash and body as the store's readers return it
(what ``memctl candidates`` shows: texts, steps, conditions, statistics, evidence pins) and
every evidence row (candidate, episode, role, subject); the run's id and
times are left out. Prints the counts and the first differences; exits 1 when they differ.
``--incremental F``: after the first night, ``F`` x episodes more arrive (``build``'s later
ids and times) and a second night clusters and mines them; the dump is taken after it.
``--after-processes N``: the after checkout goes through the nightly flow's process path
(``stages/consolidate_pool.py``, N worker processes, under the stage ledger) instead of calling
the stages in-thread, so the path big nights take is compared with the in-thread one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def dump(home: Path, episodes: int, partitions: int, out: Path, incremental: float,
         processes: int = 0) -> None:  # fmt: skip
    """Build, cluster, mine and dump (runs inside the checkout under test)."""
    sys.path.insert(0, str(_HERE))
    from consolidate import build, run_stages

    from memory_core.config import load_settings
    from memory_core.stores import open_stores

    extra = {"processes": processes} if processes else {}
    build(home, episodes, partitions)
    run_stages(home, workers=1, **extra)
    if incremental > 0:
        build(home, max(partitions, round(episodes * incremental)), partitions,
              first=episodes // partitions)  # fmt: skip
        run_stages(home, workers=1, **extra)
    from memory_core.stores.candidates import get_candidates

    meta = open_stores(load_settings(home=home, embed={"model": "hash"})).meta
    with meta.connect() as con:
        cands = con.execute(
            "SELECT candidate_id, kind, tenant_id, subject_id, namespace, status, body, "
            "content_hash, confidence, reason FROM candidates ORDER BY candidate_id"
        ).fetchall()
        evidence = con.execute(
            "SELECT candidate_id, episode_id, role, subject_id FROM candidate_evidence "
            "ORDER BY candidate_id, episode_id, role"
        ).fetchall()
    # bodies as every reader sees them (the store may keep a body's evidence pins beside it:
    # stores/candidates.PINS_IN_EVIDENCE), so checkouts that store them differently compare
    read = {c.candidate_id: c for c in get_candidates(meta, [row[0] for row in cands])}
    with out.open("w") as fh:
        for row in cands:
            body = read[row[0]].model_dump(mode="json")
            for volatile in ("created_at", "updated_at", "run_id"):
                body.pop(volatile, None)
            fh.write(json.dumps(["candidate", *row[:6], body, *row[7:]], sort_keys=True) + "\n")
        for row in evidence:
            fh.write(json.dumps(["evidence", *row]) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("before", type=Path, nargs="?")
    parser.add_argument("after", type=Path, nargs="?")
    parser.add_argument("--episodes", type=int, default=24_000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--incremental", type=float, default=0.0)
    parser.add_argument(
        "--after-processes",
        type=int,
        default=0,
        help="the after checkout clusters and mines through the nightly flow's process path "
        "(stages/consolidate_pool.py) with this many workers; the before one in-thread",
    )
    parser.add_argument("--processes", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--child", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        dump(args.child[0], args.episodes, args.partitions, args.child[1], args.incremental,
             args.processes)  # fmt: skip
        return
    with tempfile.TemporaryDirectory() as tmp:
        dumps = []
        for name, checkout in (("before", args.before), ("after", args.after)):
            home, out = Path(tmp) / name, Path(tmp) / f"{name}.jsonl"
            env = {**os.environ, "PYTHONPATH": str(checkout.resolve())}
            processes = args.after_processes if name == "after" else 0
            subprocess.run(
                [sys.executable, __file__, "--episodes", str(args.episodes), "--partitions",
                 str(args.partitions), "--incremental", str(args.incremental), "--processes",
                 str(processes), "--child", str(home), str(out)],
                check=True, env=env, cwd=checkout,
            )  # fmt: skip
            dumps.append(out.read_text().splitlines())
    before, after = dumps
    kinds = {
        n: sum(line.startswith(f'["{n}"') for line in before) for n in ("candidate", "evidence")
    }
    print(f"before: {kinds['candidate']} candidates, {kinds['evidence']} evidence rows")
    if before == after:
        print("after: identical")
        return
    only_before = sorted(set(before) - set(after))
    only_after = sorted(set(after) - set(before))
    print(f"DIFFERENT: {len(only_before)} lines only before, {len(only_after)} only after")
    for line in [*only_before[:3], *only_after[:3]]:
        print(line[:400])
    sys.exit(1)


if __name__ == "__main__":
    main()
