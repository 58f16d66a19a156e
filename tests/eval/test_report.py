"""The reports are pure renderings of the eval JSON, and EVALUATION.md is the committed one's.

The doc check compares the whole file with the rendering of ``docs/eval/eval.json``: any
figure edited by hand, or a JSON regenerated without the doc (or the reverse), fails here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from memory_core.cli import app
from memory_core.eval.report import fmt, render_html, render_markdown

ROOT = Path(__file__).resolve().parents[2]


def _tiny() -> dict[str, Any]:
    dataset = {
        "episodes": 12,
        "nights": 2,
        "wall_seconds": 3.25,
        "write_quality": {
            "promoted_rows": 4,
            "useful_memory_precision": 0.75,
            "sensitive_false_writes": 0,
            "unsupported_memory_rate": None,
        },
        "retrieval": {
            "queries": 3,
            "recall_at_k": 0.6667,
            "wrong_scope_retrievals": 0,
            "ablation": {
                "no_memory": {"recall_at_k": 0.0, "answer_in_context": 0.0},
                "episodes": {"recall_at_k": 0.3333, "answer_in_context": None},
                "episodes_facts": {"recall_at_k": 0.6667, "answer_in_context": None},
                "episodes_facts_procedures": {"recall_at_k": 0.6667, "answer_in_context": None},
            },
            "by_kind": {"preference": {"queries": 3, "hits": 2, "answered": 1}},
        },
        "update_forgetting": {"deletion_residue": 0, "deleted_subject": "t/u"},
        "cost": {"requests": 1234, "cost_usd": 0.051399},
    }
    return {
        "schema": 1,
        "command": "memctl eval --dataset demo --embedder hash",
        "embedder": "hash-v1-384",
        "scorer": "heuristic",
        "review": "all approved",
        "sample": None,
        "k": 10,
        "datasets": {"demo": dataset, "locomo": {"dataset": "locomo", "skipped": "absent"}},
        "gates": {"ok": True},
        "wall_seconds": 3.5,
        "machine": {"cpus": 2, "load_average_1m_at_end": 1.5},
    }


def test_fmt() -> None:
    assert [fmt(None), fmt(True), fmt(0.5), fmt(1234), fmt(1234.56), fmt("x")] == [
        "n/a", "yes", "0.500", "1,234", "1,234.6", "x",
    ]  # fmt: skip


def test_markdown_renders_the_given_figures() -> None:
    doc = render_markdown(_tiny())
    lines = doc.splitlines()
    assert lines[0] == "# Evaluation"
    assert "    memctl eval --dataset demo --embedder hash" in lines
    assert "- embedder: `hash-v1-384`" in lines
    assert "- locomo: skipped, absent" in lines
    assert "| demo | 0 | 0 | 0 |" in lines  # gates table
    assert "All gates at 0: **yes**." in lines
    assert "| useful-memory precision | 0.750 |" in lines
    assert "| unsupported-memory rate | n/a |" in lines
    assert "| wrong-type rate | n/a |" in lines  # absent from the JSON: n/a, never 0
    assert "| requests | 1,234 |" in lines
    assert "| episodes | 0.333 | n/a |" in lines  # ablation arm row
    assert "| demo | preference | 3 | 2 | 1 |" in lines
    assert "CC BY-NC 4.0" in doc and "Real Claude answers" in doc
    assert render_markdown(_tiny()) == doc  # a pure function of its input
    reordered = _tiny()
    reordered["datasets"] = dict(reversed(list(reordered["datasets"].items())))
    assert render_markdown(reordered) == doc  # key order (sorted in eval.json) does not matter


def test_html_has_tables_and_svg_plots() -> None:
    page = render_html(_tiny())
    assert page.startswith("<!doctype html>")
    assert page.count("<svg") == 3
    assert "<th>metric</th><th>demo</th>" in page
    assert "<td>useful-memory precision</td><td>0.750</td>" in page
    assert "n/a" in page


def test_evaluation_md_is_the_rendering_of_the_committed_json() -> None:
    committed = json.loads((ROOT / "docs" / "eval" / "eval.json").read_text())
    assert (ROOT / "EVALUATION.md").read_text() == render_markdown(committed)
    assert committed["gates"]["ok"], committed["gates"]


def test_cli_render_writes_doc_and_reports(tmp_path: Path) -> None:
    source = tmp_path / "in.json"
    source.write_text(json.dumps(_tiny()))
    doc, out = tmp_path / "EVAL.md", tmp_path / "out"
    result = CliRunner().invoke(
        app,
        ["eval", "--render", str(source), "--write-doc", str(doc), "--out", str(out),
         "--format", "json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert doc.read_text() == render_markdown(_tiny())
    assert json.loads((out / "eval.json").read_text()) == _tiny()
    assert (out / "eval.md").read_text() == doc.read_text()
    assert "<svg" in (out / "eval.html").read_text()
    assert json.loads(result.stdout)["gates"] == {"ok": True}


def test_cli_exits_non_zero_when_a_gate_fails(tmp_path: Path) -> None:
    bad = _tiny()
    bad["gates"] = {"ok": False, "deletion_residue": 1}
    source = tmp_path / "bad.json"
    source.write_text(json.dumps(bad))
    result = CliRunner().invoke(app, ["eval", "--render", str(source)])
    assert result.exit_code == 1
