"""Screenshot the HTML report of a demo home (docs/report.png) with headless Chromium.

All offline, through the real CLI: ``memctl demo`` (generate, ingest, nightly flow), a
forgetting pass a day later (``memctl expire``: the older half of the episodes passes the TTL
and is folded into digests), a second nightly run, then ``memctl report``; Chromium renders
``<home>/reports/index.html`` to a PNG.

    apt-get install -y chromium
    MEMCTL_EMBED__MODEL=hash python scripts/screenshot_report.py [--out docs/report.png]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def memctl(home: Path, *args: str) -> dict:
    env = {**os.environ, "MEMCTL_EMBED__MODEL": os.environ.get("MEMCTL_EMBED__MODEL", "hash")}
    out = subprocess.run(
        [sys.executable, "-m", "memory_core.cli", *args, "--home", str(home), "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=900,
    )
    if out.returncode != 0:
        sys.exit(f"memctl {' '.join(args)} failed: {out.stderr.strip()}")
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "report.png")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=2200)
    parser.add_argument("--keep", action="store_true", help="keep the demo home")
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("chromium not found: apt-get install -y chromium")

    from memory_core.demo.generate import generate_demo

    last = max(
        datetime.fromisoformat(e["occurred_at"].replace("Z", "+00:00"))
        for e in generate_demo(seed=args.seed).episodes
    )
    clock = (last + timedelta(days=1)).astimezone(UTC)
    home = Path(tempfile.mkdtemp(prefix="memctl-report-"))
    try:
        memctl(home, "demo", "--seed", str(args.seed), "--now", clock.isoformat())
        memctl(home, "expire", "--now", (clock + timedelta(days=1)).isoformat())
        memctl(home, "consolidate", "--now", (clock + timedelta(days=2)).isoformat())
        report = Path(memctl(home, "report")["report"])
        args.out.parent.mkdir(parents=True, exist_ok=True)
        profile = tempfile.mkdtemp(prefix="chromium-")
        subprocess.run(
            [
                chromium,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                f"--window-size={args.width},{args.height}",
                f"--screenshot={args.out.resolve()}",
                report.as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        shutil.rmtree(profile, ignore_errors=True)
        print(f"wrote {args.out} from {report}")
    finally:
        if args.keep:
            print(f"demo home kept at {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
