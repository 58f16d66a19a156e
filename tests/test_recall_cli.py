"""`memctl recall` and `memctl index` through the real entry point, ``main()``.

In-process (a subprocess per call costs seconds of imports); ``main()`` is what the
``memctl`` script runs, so exit codes and the one-line errors are the ones users see.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memory_core.embed import HashEmbedder
from memory_core.stores.lance import LanceStore
from tests.recall_rows import make_row, write_rows


@pytest.fixture
def memctl(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    from memory_core.cli import main

    def run(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
        monkeypatch.setattr(sys, "argv", ["memctl", *args, "--home", str(home)])
        code = 0
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out.out, out.err)

    return run


NOW = "2026-08-01T00:00:00Z"
ASK = ("--tenant", "acme", "--subject", "u1", "--now", NOW, "--format", "json")


@pytest.fixture
def home(tmp_path: Path, memctl) -> Path:
    home = tmp_path / "home"
    emb = HashEmbedder(384)
    store = LanceStore(str(home / "lance"))
    store.ensure_tables(emb.dim)
    write_rows(
        store,
        "facts",
        [
            make_row("facts", emb, "f1", text="vpn error 720 means an adapter mismatch"),
            make_row("facts", emb, "f2", subject_id="u2", text="vpn error 720 for u2"),
        ],
    )
    write_rows(
        store,
        "procedures",
        [
            make_row(
                "procedures", emb, "p1", text="fix vpn error 720", preconditions={"os": "win11"}
            )
        ],
    )
    index = memctl("index", "--format", "json", home=home)
    assert index.returncode == 0, index.stderr
    assert json.loads(index.stdout)["facts"]["indices"]["text"] == "FTS"
    return home


def test_recall_prints_a_json_array_with_score_and_reason(home, memctl):
    out = memctl("recall", "vpn error 720", *ASK, "--state", "os=win11", home=home)
    assert out.returncode == 0, out.stderr
    records = json.loads(out.stdout)
    assert isinstance(records, list)
    assert sorted(r["record_id"] for r in records) == ["f1", "p1"]
    for record in records:
        assert "vector" not in record
        assert {"score", "reason", "tenant_id", "status", "valid_from"} <= set(record)
    assert list((home / "access_log").glob("*.jsonl"))


def test_explain_prints_records_and_the_query_record(home, memctl):
    args = ("--type", "procedural", "--explain", "--no-access-log")
    out = memctl("recall", "vpn", *ASK, *args, home=home)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["records"] == []
    (left,) = doc["query_record"]["left_out"]
    assert left["record_id"] == "p1"
    assert left["reason"] == "precondition not met: os=win11 (state: -)"


def test_usage_and_availability_errors(home, tmp_path, memctl):
    bad_state = memctl("recall", "x", "--tenant", "acme", "--state", "win11", home=home)
    assert bad_state.returncode == 2
    assert "--state 'win11' must be key=value" in bad_state.stderr
    bad_as_of = memctl("recall", "x", "--tenant", "acme", "--as-of", "2026-07-01", home=home)
    assert bad_as_of.returncode == 2 and "has no timezone offset" in bad_as_of.stderr
    missing = memctl("recall", "x", "--tenant", "acme", home=tmp_path / "nowhere")
    assert missing.returncode == 1
    assert missing.stderr.startswith("Error: memory unavailable at ")
    assert missing.stdout == ""
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("vpn", "--tenant", ""), "Error: --tenant: is empty; recall never reads across tenants\n"),
        (("", "--tenant", "acme"), "Error: QUERY: is empty; say what to remember "),
        (("  ", "--tenant", "acme"), "Error: QUERY: is empty; say what to remember "),
    ],
)
def test_empty_tenant_or_query_is_one_line(home, memctl, args, message):
    out = memctl("recall", *args, "--format", "json", home=home)
    assert out.returncode == 1
    assert out.stderr.startswith(message)
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert out.stdout == ""


def test_state_filters_facts_through_the_cli(home, memctl):
    store = LanceStore(str(home / "lance"))
    emb = HashEmbedder(384)
    row = make_row("facts", emb, "f-mac", text="vpn error 720 on mac", conditions={"os": "macos"})
    write_rows(store, "facts", [row])
    both = memctl("recall", "vpn error 720", *ASK, "--no-access-log", home=home)
    assert "f-mac" in [r["record_id"] for r in json.loads(both.stdout)]
    win = memctl("recall", "vpn error 720", *ASK, "--state", "os=win11", home=home)
    assert win.returncode == 0, win.stderr
    assert sorted(r["record_id"] for r in json.loads(win.stdout)) == ["f1", "p1"]
