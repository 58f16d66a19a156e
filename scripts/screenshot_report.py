"""Screenshot the HTML report of a demo home (docs/report.png) with headless Chromium.

All offline, through the real CLI: ``memctl demo`` (generate, ingest, nightly flow), a
forgetting pass a day later (``memctl expire``: the older half of the episodes passes the TTL
and is folded into digests), a second nightly run, then ``memctl report``; headless Chromium
(the system one, through Playwright: ``scripts/browser.py``) renders
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

from browser import chromium_page, chromium_path  # noqa: E402


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
    chromium_path()  # fail early, before the demo runs

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
        with chromium_page(args.width, args.height) as page:
            page.goto(report.as_uri(), wait_until="load")
            page.screenshot(path=str(args.out.resolve()))
        print(f"wrote {args.out} from {report}")
    finally:
        if args.keep:
            print(f"demo home kept at {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
