"""`memctl eval` on one tenant of the demo over two nights (hash embedder): write quality
against the truth, updates, revocation, deletion and the dry-run cost are all measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_core.demo.generate import generate_demo, write_demo
from memory_core.eval.runner import run_eval
from tests.eval.test_eval_run import gates_zero


@pytest.mark.slow
def test_demo_subset_over_two_nights(tmp_path: Path) -> None:
    data = generate_demo(seed=7)
    one_tenant = [e for e in data.episodes if e["tenant_id"] == "globex-dev"]
    path, _ = write_demo(type(data)(one_tenant, data.truth), tmp_path / "demo")
    report = run_eval(["demo"], embedder="hash", path=path, sample=3, work_dir=tmp_path)
    demo = report["datasets"]["demo"]
    assert demo["nights"] == 2
    quality = demo["write_quality"]
    assert quality["promoted_rows"] > 0
    assert quality["provenance_completeness"] == 1.0
    assert quality["wrong_type_rate"] == 0.0
    assert quality["tool_or_agent_claims_as_facts"] == 0
    assert quality["planted"] == len({s["needle"] for s in data.truth["secrets"]})
    assert 0 < quality["useful_memory_precision"] <= 1
    assert demo["retrieval"]["queries"] <= 9
    assert demo["retrieval"]["forbidden_served"] == 0
    updates = demo["update_forgetting"]
    assert updates["as_of_probes"] > 0
    assert updates["records_probed"] > 0
    assert updates["revoked_source_propagation"] == 1.0
    assert demo["cost"]["requests"] > 0 and demo["cost"]["input_tokens"] > 0
    gates_zero(report)
