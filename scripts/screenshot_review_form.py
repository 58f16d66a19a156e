"""Screenshot the Prefect UI review form of a paused promotion-review run (docs/review-form.png).

What it does, all on this machine and offline:

1. starts a real Prefect server (``prefect server start``) with a throwaway PREFECT_HOME;
2. builds a memctl home from the seeded demo (generate, ingest, cluster, mine, score with the
   heuristic, build review batches of at most two items) and picks a procedural batch;
3. runs the ``promotion-review`` flow for it in a thread: it publishes the batch and pauses,
   waiting for a ``ReviewDecision``;
4. drives headless Chromium (Debian ``chromium``) through Playwright (``scripts/browser.py``):
   opens the flow run page, clicks "Resume" to open the form, and saves a screenshot;
5. approves the batch with ``memctl review approve`` (which resumes the run) and stops.

    apt-get install -y chromium
    MEMCTL_EMBED__MODEL=hash python scripts/screenshot_review_form.py [--out docs/review-form.png]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

from browser import chromium_page  # noqa: E402


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # localhost only
        return json.loads(resp.read())


def _wait(what: str, check: Any, timeout: float = 180.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception:  # not up yet
            pass
        time.sleep(0.5)
    msg = f"timed out waiting for {what}"
    raise SystemExit(msg)


def start_server(prefect_home: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(prefect_home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "PREFECT_UI_API_URL": f"http://127.0.0.1:{port}/api",
    }
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
         "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    _wait("the Prefect server", lambda: _get(f"{base}/api/health") is True)
    return proc, base


def build_home(home: Path) -> tuple[Any, str]:
    """The seeded demo, consolidated and scored, with small review batches; a batch id."""
    from memory_core.config import load_settings
    from memory_core.context import RunContext
    from memory_core.demo.generate import generate_demo, write_demo
    from memory_core.embed import make_embedder
    from memory_core.stages.cluster import cluster_partition
    from memory_core.stages.ingest import ingest_file
    from memory_core.stages.mine import mine_partition
    from memory_core.stages.partitions import plan_partitions
    from memory_core.stages.review import build_review_batches
    from memory_core.stages.score import score_candidates
    from memory_core.stores import open_stores
    from memory_core.stores.review import list_batches

    settings = load_settings(
        home=home, embed={"model": "hash"}, review={"max_batch_items": 2, "poll_interval_s": 2}
    )
    data = generate_demo(seed=7)
    episodes, _ = write_demo(data, home / "demo")
    last = max(datetime.fromisoformat(e["occurred_at"]) for e in data.episodes)
    ctx = RunContext(now=(last + timedelta(days=1)).astimezone(UTC))
    stores = open_stores(settings)
    embedder = make_embedder(settings.embed)
    stores.lance.ensure_tables(embedder.dim, embedder=embedder.version)
    ingest_file(stores, settings, ctx, episodes, embedder=embedder)
    for work in plan_partitions(stores):
        cluster_partition(stores, settings.cluster, ctx, work.partition)
        mine_partition(stores, settings, ctx, work.partition)
    score_candidates(stores, settings.score, ctx, sync=True)
    build_review_batches(stores, settings, ctx)
    batches = [
        b for b in list_batches(stores.meta, status="open", tenant_id="acme-it")
        if b.kind == "procedural"
    ]  # fmt: skip
    return settings, batches[0].batch_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "review-form.png")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=1600)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="review-shot-"))
    server, base = start_server(work / "prefect")
    os.environ.update(
        PREFECT_API_URL=f"{base}/api", PREFECT_HOME=str(work / "prefect"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1",
        PREFECT_LOGGING_LEVEL="WARNING",
    )  # fmt: skip
    try:
        settings, batch_id = build_home(work / "home")
        from flows.review import run_promotion_review
        from memory_core.stores import open_stores
        from memory_core.stores.review import get_batch

        result: dict[str, Any] = {}
        thread = threading.Thread(
            target=lambda: result.update(run=run_promotion_review(settings, batch_id)),
            daemon=True,
        )
        thread.start()
        stores = open_stores(settings)
        run_id = _wait(
            "the flow run to pause",
            lambda: (
                (r := get_batch(stores.meta, batch_id).flow_run_id)
                and _get(f"{base}/api/flow_runs/{r}", timeout=5)
                and _paused(base, r)
                and r
            ),
        )
        with chromium_page(args.width, args.height) as page:
            page.goto(f"{base}/runs/flow-run/{run_id}", wait_until="domcontentloaded")
            page.get_by_role("button", name="Resume").click()
            form = page.get_by_role("dialog")
            form.get_by_role("button", name="Submit").wait_for()
            form.get_by_text("memctl review show").first.wait_for()
            page.wait_for_load_state("networkidle")  # fonts, markdown
            args.out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(args.out))
        env = {**os.environ, "MEMCTL_EMBED__MODEL": "hash"}
        approve = subprocess.run(
            [sys.executable, "-m", "memory_core.cli", "review", "approve", batch_id,
             "--reviewer", "screenshot-script", "--home", str(settings.home), "--format", "json"],
            env=env, capture_output=True, text=True, check=True, timeout=300,
        )  # fmt: skip
        thread.join(timeout=120)
        print(
            json.dumps(
                {
                    "screenshot": str(args.out),
                    "flow_run_id": run_id,
                    "batch_id": batch_id,
                    "resume": json.loads(approve.stdout).get("flow_run"),
                    "flow_result_status": (result.get("run") or {}).get("status"),
                },
                indent=2,
            )
        )
    finally:
        server.terminate()
        server.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)


def _paused(base: str, run_id: str) -> bool:
    state = _get(f"{base}/api/flow_runs/{run_id}")["state"]
    return bool(state) and state["type"] == "PAUSED"


if __name__ == "__main__":
    main()
