"""Schedules: prefect.yaml and `memctl serve` come from one table, and a schedule really fires.

The firing test starts a real local Prefect server (the ephemeral one never runs the
scheduler), runs `memctl serve --only deletion-requests --interval 5` in a subprocess against
a home with a queued deletion, and waits (bounded) until a scheduled run has carried it out.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from flows.deployments import DEPLOYMENTS, build_deployments, render_prefect_yaml
from memory_core.config import load_settings
from memory_core.context import RunContext
from memory_core.errors import MetaLocked
from memory_core.stages import forget as forget_stage
from memory_core.stores import forgetting as fstore
from memory_core.stores import open_stores
from tests.conftest import episode, lines_of
from tests.kit import forkserver
from tests.kit.prefect import local_prefect
from tests.kit.schedule import LOCAL_PREFECT

# no DuckDB instance kept open by the test process (tests/kit/duckdb_instances.py):
# `memctl serve`'s runs open the home while the test polls it
KEEP_DUCKDB_INSTANCES = False

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 8, 1, tzinfo=UTC)


def test_checked_in_prefect_yaml_is_the_default_config_rendered() -> None:
    settings = load_settings(config_file=ROOT / "configs" / "default.toml")
    assert (ROOT / "prefect.yaml").read_text() == render_prefect_yaml(settings)


def test_prefect_yaml_declares_every_deployment_with_cron_timezone_and_one_at_a_time() -> None:
    doc = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    by_name = {d["name"]: d for d in doc["deployments"]}
    assert set(by_name) == {d.name for d in DEPLOYMENTS}
    assert by_name["deletion-requests"]["schedules"] == [
        {"cron": "*/15 * * * *", "timezone": "UTC"}
    ]
    for name in ("nightly-consolidation", "forgetting", "deletion-requests", "review-dispatch"):
        assert by_name[name]["concurrency_limit"] == {"limit": 1, "collision_strategy": "ENQUEUE"}
    assert by_name["promotion-review"]["schedules"] == []
    for spec in DEPLOYMENTS:  # every entrypoint resolves to a Prefect flow
        path, func = by_name[spec.name]["entrypoint"].split(":")
        assert (ROOT / path).exists() and spec.flow.fn.__name__ == func


def test_timezone_and_crons_come_from_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMCTL_TIMEZONE", "Europe/Berlin")
    monkeypatch.setenv("MEMCTL_SCHEDULE__NIGHTLY_CRON", "15 1 * * *")
    settings = load_settings()
    nightly = build_deployments(settings, names=["nightly-consolidation"])[0]
    schedule = nightly.schedules[0].schedule
    assert (schedule.cron, schedule.timezone) == ("15 1 * * *", "Europe/Berlin")
    assert "timezone: Europe/Berlin" in render_prefect_yaml(settings)
    with pytest.raises(ValueError, match="unknown deployment"):
        build_deployments(settings, names=["nightly"])


def test_serve_without_api_url_and_without_starting_a_server_says_what_to_start(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env["MEMCTL_EMBED__MODEL"] = "hash"
    env["PREFECT_HOME"] = str(tmp_path / "prefect")
    proc = forkserver.run(
        [str(Path(sys.executable).with_name("memctl")), "serve", "--home", str(tmp_path),
         "--no-start-server", "--port", "4301"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "prefect server start --host 127.0.0.1 --port 4301" in proc.stderr
    assert "PREFECT_API_URL=http://127.0.0.1:4301/api" in proc.stderr


def _request_status(home: Path, request_id: str) -> str | None:
    try:
        request = fstore.get_request(open_stores(load_settings(home=home)).meta, request_id)
    except MetaLocked:  # the served run has the file open this moment
        return None
    return request.status if request else None


def _completed_runs(api_url: str, deployment_name: str) -> list[dict]:
    body = json.dumps(
        {
            "flow_runs": {"state": {"type": {"any_": ["COMPLETED"]}}},
            "deployments": {"name": {"any_": [deployment_name]}},
        }
    ).encode()
    request = urllib.request.Request(
        f"{api_url}/flow_runs/filter",
        data=body,
        headers={"content-type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read())


@pytest.mark.slow
@pytest.mark.xdist_group(LOCAL_PREFECT)  # with review_served's: one local server started
def test_a_served_schedule_fires_and_runs_the_flow(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    server = local_prefect(tmp_path_factory.getbasetemp())
    home = tmp_path / "home"
    settings = load_settings(home=home)
    stores = open_stores(settings)
    from memory_core.embed import HashEmbedder
    from memory_core.stages.ingest import ingest_records

    ingest_records(
        stores, settings, RunContext(now=NOW), lines_of(episode(), episode(episode_id="e2")),
        embedder=HashEmbedder(384), source="episodes.jsonl",
    )  # fmt: skip
    request_id = forget_stage.request_deletion(
        stores, RunContext(now=NOW), kind="episode", target="e1", tenant_id="acme"
    )
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("memctl")), "serve", "--home", str(home),
         "--only", "deletion-requests", "--interval", "5"],
        # the runner looks for due runs every 2 s instead of Prefect's 10 (as review_served)
        env=server.env(PREFECT_RUNNER_POLL_FREQUENCY="2"), stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 150
        status = None
        while time.monotonic() < deadline and proc.poll() is None:
            status = _request_status(home, request_id)
            if status == "done":
                break
            time.sleep(1)
        served = (tmp_path / "serve.log").read_text(errors="replace")[-3000:]
        assert status == "done", f"no scheduled run carried out the deletion:\n{served}"
        runs: list[dict] = []
        while time.monotonic() < deadline and not runs:  # the run finishes after the delete
            runs = _completed_runs(server.api_url, "deletion-requests")
            time.sleep(0 if runs else 1)
        assert runs, "the deletion ran, but no scheduled flow run completed"
        assert all(r["deployment_id"] for r in runs)
        assert any(r["auto_scheduled"] for r in runs)  # fired by the schedule, not by hand
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
    assert open_stores(settings).lance.count("episodes", "episode_id = 'e1'") == 0
