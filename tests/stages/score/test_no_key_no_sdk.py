"""A night without ``ANTHROPIC_API_KEY`` never imports the Anthropic SDK: importing it costs
~1.3 CPU s in a fresh process (pydantic models for every API type), and without a key extract
skips, score uses the labelled heuristic and workflow text keeps the rule-made text, none of
which needs it.

Run in a fresh interpreter that refuses to import ``anthropic``: the nightly flow's own task
bodies (``flows/nightly.py``, called directly, without a Prefect server) on the nightly test's
scenario, so any import of the SDK on that path fails the run by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.flows.crash_kit import scenario_lines

NIGHT = "2026-08-01T03:00:00+00:00"

SCRIPT = r"""
import importlib.abc, json, sys

class NoSdk(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "anthropic" or name.startswith("anthropic."):
            raise ImportError(f"{name} imported on a night without a key")

sys.meta_path.insert(0, NoSdk())

from datetime import datetime
from pathlib import Path

import flows.nightly as nightly
from memory_core.config import load_settings
from memory_core.context import RunContext
from memory_core.embed import HashEmbedder
from memory_core.stages.consolidate import consolidation_plan
from memory_core.stages.ingest import ingest_records
from memory_core.stores import open_stores

home, episodes, now = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
settings = load_settings(home=home, embed={"model": "hash"})
stores, ctx = open_stores(settings), RunContext(now=datetime.fromisoformat(now), run_id="run-1")
lines = episodes.read_text().splitlines()
ingest_records(stores, settings, ctx, lines, embedder=HashEmbedder(384), source="e.jsonl")
data, common = settings.model_dump(mode="json"), {"run_id": "run-1", "now_iso": now}
out = {"embed": nightly.embed_task.fn(settings_data=data, **common)}
out["extract"] = nightly.extract_task.fn(settings_data=data, **common)
plan = consolidation_plan(stores, settings, recluster=False)
units = [{"tenant_id": p.unit.partition.tenant_id, "namespace": p.unit.partition.namespace,
          "input_hash": p.unit.input_hash, "max_recorded_iso": None} for p in plan]
out["partitions"] = nightly.consolidate_partitions.fn(
    settings_data=data, units=units, recluster=False, **common)
out["score"] = nightly.score_task.fn(settings_data=data, sync=False, **common)
out["workflow"] = nightly.workflow_task.fn(settings_data=data, **common)
out["review"] = nightly.review_task.fn(settings_data=data, **common)
out["sdk_loaded"] = "anthropic" in sys.modules
print(json.dumps(out, default=str))
"""


@pytest.mark.slow
def test_a_night_without_a_key_never_imports_the_sdk(tmp_path: Path) -> None:
    episodes = tmp_path / "episodes.jsonl"
    episodes.write_text("\n".join(scenario_lines()) + "\n")
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[3])
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "home"), str(episodes), NIGHT],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["sdk_loaded"] is False
    assert out["extract"]["skipped"]  # said so, not silently nothing
    assert any(not r.get("skipped") for r in out["partitions"])  # the night had work
    assert out["score"]["heuristic"] > 0 and out["score"]["scored_llm"] == 0  # the heuristic scored
