"""Peak resident memory of a command's whole process tree, sampled from /proc.

    python bench/tree_rss.py [--every 0.5] -- python bench/scale.py --sizes 1000000 ...

Why: ``/usr/bin/time``'s maximum RSS (and ``ru_maxrss``) is one process's, the largest, so it
does not see a night whose partitions are computed in worker processes
(stages/consolidate_pool.py) beside the process that writes DuckDB, nor the ephemeral Prefect
server. This runs the command, sums the RSS (``VmRSS``) of every live descendant every
``--every`` seconds, and prints, on stderr after the command ends, the peak of that sum and
what each kind of process held at that moment: the pool's workers (``spawn_main`` in their
command line), the Prefect server, everything else. Linux only; a sample costs a walk of
/proc. The command's own exit code is returned.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _kind(pid: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "other"
    if "spawn_main" in cmd:
        return "pool workers"
    if ("prefect" in cmd and "server" in cmd) or "uvicorn" in cmd:
        return "prefect server"
    return "other"


def sample(root: int) -> dict[str, int]:
    """KB of RSS by kind of process, over ``root`` and its descendants."""
    kids = _children()
    out: dict[str, int] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        todo.extend(kids.get(pid, []))
        kind = _kind(pid)
        out[kind] = out.get(kind, 0) + _rss_kb(pid)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--every", type=float, default=0.5)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    proc = subprocess.Popen(command)
    peak: dict[str, int] = {}
    peak_workers = 0
    while proc.poll() is None:
        now = sample(proc.pid)
        if sum(now.values()) > sum(peak.values()):
            peak = now
        peak_workers = max(peak_workers, now.get("pool workers", 0))
        time.sleep(args.every)
    report = {
        "tree_peak_rss_mb": round(sum(peak.values()) / 1024),
        "at_peak_mb": {k: round(v / 1024) for k, v in sorted(peak.items())},
        "pool_workers_peak_mb": round(peak_workers / 1024),
    }
    print(json.dumps(report), file=sys.stderr)
    sys.exit(proc.returncode)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
