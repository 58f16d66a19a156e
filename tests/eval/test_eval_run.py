"""`memctl eval` end to end on small subsets (hash embedder): every data set runs on a fresh
home, the gates are computed (and 0), and the JSON has the figures the reports render."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from memory_core.cli import app
from memory_core.eval.runner import default_data_dir, run_eval

DATA = default_data_dir()


def _needs(name: str) -> Path:
    path = DATA / name
    if not path.is_file():
        pytest.skip(f"{path} absent (public data lives in ../shared/data)")
    return path


def gates_zero(result: dict[str, Any]) -> None:
    assert result["gates"]["ok"], result["gates"]
    for data in result["datasets"].values():
        assert data["write_quality"]["sensitive_false_writes"] == 0
        assert data["retrieval"]["wrong_scope_retrievals"] == 0
        assert data["update_forgetting"]["deletion_residue"] == 0


def test_tau_bench_subset_through_the_cli(tmp_path: Path) -> None:
    items = json.loads(_needs("tau_bench_airline_tasks_00_24.json").read_text())
    subset = [i for i in items if i["task_id"] in (0, 1)]
    path = tmp_path / "tau.json"
    path.write_text(json.dumps(subset))
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        ["eval", "--dataset", "tau-bench", "--path", str(path), "--embedder", "hash",
         "--out", str(out), "--format", "json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report == json.loads((out / "eval.json").read_text())
    assert report["embedder"].startswith("hash")
    assert "--path" in report["command"]
    tau = report["datasets"]["tau-bench"]
    assert tau["sessions"] == tau["trajectories"] == len(subset)
    assert tau["episodes"] > len(subset) and tau["planted_secrets"] >= 1  # + one per message
    assert tau["write_quality"]["planted"] == tau["planted_secrets"]
    assert tau["retrieval"]["queries"] == 2  # one per task
    assert tau["retrieval"]["ablation"]["no_memory"]["recall_at_k"] == 0.0
    assert tau["update_forgetting"]["revoked_served"] == 0
    assert tau["update_forgetting"]["pipeline_self_verified"]
    gates_zero(report)
    assert "<svg" in (out / "eval.html").read_text()


def test_locomo_subset(tmp_path: Path) -> None:
    conv = json.loads(_needs("locomo_5conv.json").read_text())[0]
    keep = {"session_1", "session_2"}
    conversation = {
        k: v
        for k, v in conv["conversation"].items()
        if not k.startswith("session_") or k in keep or k.removesuffix("_date_time") in keep
    }
    qa = [q for q in conv["qa"] if all(str(e).startswith(("D1:", "D2:")) for e in q["evidence"])]
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([{**conv, "conversation": conversation, "qa": qa}]))
    report = run_eval(["locomo"], embedder="hash", path=path, sample=6, work_dir=tmp_path)
    data = report["datasets"]["locomo"]
    retrieval = data["retrieval"]
    assert 0 < retrieval["queries"] <= 6 * len(retrieval["by_kind"])
    assert retrieval["queries_with_relevant"] == retrieval["queries"]
    arms = retrieval["ablation"]
    assert arms["no_memory"]["recall_at_k"] == 0.0
    assert arms["episodes"]["recall_at_k"] is not None
    assert arms["episodes"]["recall_at_k"] <= arms["episodes_facts_procedures"]["recall_at_k"]
    assert 0 < retrieval["context_budget_utilisation"] <= 1
    assert data["update_forgetting"]["subject_episodes"] > 0
    extraction = data["replayed_extraction"]
    after = extraction["after_compaction"]
    assert after["digests"] == 0  # both sessions lie within the 30 days before the clock
    assert after["rows"]["episodes"] == extraction["rows"]["episodes"]
    proposal = extraction["proposal"]
    assert proposal["proposed"] == proposal["objects"] - proposal["not_proposed"]
    assert "heuristic" in proposal["labels"]["by_heuristic_importance"]
    assert extraction["k"] == after["k"] and extraction["retrieval"]["episodes"]["recall_at_k"]
    gates_zero(report)
    assert not list(tmp_path.glob("memctl-eval-*"))  # the temporary homes are gone


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["eval", "--dataset", "nope"])
    assert result.exit_code != 0 and "--dataset" in result.output
    with pytest.raises(ValueError, match="--path evaluates one data set"):
        run_eval(["demo", "locomo"], embedder="hash", path=tmp_path / "x.json")
    with pytest.raises(FileNotFoundError, match="no such file"):
        run_eval(["locomo"], embedder="hash", path=tmp_path / "missing.json")


def test_absent_data_is_skipped_with_a_reason(tmp_path: Path) -> None:
    report = run_eval(["locomo"], embedder="hash", data_dir=tmp_path, work_dir=tmp_path)
    assert "not found" in report["datasets"]["locomo"]["skipped"]
    assert not report["gates"]["ok"]  # nothing measured proves nothing
