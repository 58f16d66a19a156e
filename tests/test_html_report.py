"""The HTML report: run history from DuckDB and Lance, rendered to one self-contained page."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import sys
from datetime import timedelta
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from memory_core.config import load_settings
from memory_core.context import RunContext
from memory_core.embed import HashEmbedder
from memory_core.report import collect_report, report_path, rows_by_status, write_report
from memory_core.report.render import render_html
from memory_core.report.svg import stacked_bars
from memory_core.stages.cluster import cluster_partition
from memory_core.stages.embed import embed_episodes
from memory_core.stages.forget import run_forgetting
from memory_core.stages.ingest import ingest_records
from memory_core.stages.mine import mine_partition
from memory_core.stages.partitions import plan_partitions
from memory_core.stores import open_stores
from memory_core.stores.candidates import list_candidates
from memory_core.stores.ledger import finish_run, start_run
from memory_core.stores.llm import LedgerEntry, record_ledger
from tests.conftest import NOW, episode, lines_of
from tests.kit import forkserver


class _Checker(HTMLParser):
    """Collects SVG titles (tooltips) and checks tags balance enough to be one document."""

    def __init__(self) -> None:
        super().__init__()
        self.titles: list[str] = []
        self.svgs = 0
        self._in_title = False
        self.h2: list[str] = []
        self._in_h2 = False

    def handle_starttag(self, tag, attrs):
        self.svgs += tag == "svg"
        self._in_title = tag == "title"
        self._in_h2 = tag == "h2"

    def handle_endtag(self, tag):
        self._in_title = self._in_h2 = False

    def handle_data(self, data):
        if self._in_title:
            self.titles.append(data)
        if self._in_h2:
            self.h2.append(data)


def _nightly(stores, settings, run_id, now, embedder):
    """What the nightly flow records, without Prefect: stages, then the run's summary."""
    start_run(stores.meta, run_id=run_id, flow="nightly-consolidation", started_at=now,
              clock=now, params={})  # fmt: skip
    ctx = RunContext(now=now, run_id=run_id)
    embed_episodes(stores, settings, ctx, embedder=embedder)  # the nightly's first task
    results = []
    for work in plan_partitions(stores):
        c = cluster_partition(stores, settings.cluster, ctx, work.partition)
        m = mine_partition(stores, settings, ctx, work.partition)
        results.append({"partition": work.partition.key, "cluster": c.as_dict(),
                        "mine": m.as_dict(), "seconds": {"cluster": 0.5, "mine": 0.25}})  # fmt: skip
    by_status: dict[str, int] = {}
    for cand in list_candidates(stores.meta):
        by_status[cand.status.value] = by_status.get(cand.status.value, 0) + 1
    summary = {"run_id": run_id, "partitions": len(results), "skipped": 0, "results": results,
               "candidates_by_status": by_status, "rows_by_status": rows_by_status(stores)}  # fmt: skip
    finish_run(stores.meta, run_id=run_id, finished_at=now + timedelta(seconds=2),
               status="completed", summary=summary)  # fmt: skip
    return summary


@pytest.fixture(scope="module")
def history_home(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple]:
    """Two nightly runs and a forgetting pass, recorded once for the module: (home, results).

    Built in the environment every test gets (conftest ``clean_environ``: no MEMCTL_* but the
    hash embedder); each test works on its own copy (``history``)."""
    home = tmp_path_factory.mktemp("report-history") / "home"
    with pytest.MonkeyPatch.context() as mp:
        for key in list(os.environ):
            if key.startswith("MEMCTL_") or key == "ANTHROPIC_API_KEY":
                mp.delenv(key)
        mp.setenv("MEMCTL_EMBED__MODEL", "hash")
        settings = load_settings(home=home)
        stores = open_stores(settings)
        embedder = HashEmbedder(384)

        def ingest(lines: list[str]) -> None:
            ingest_records(stores, settings, RunContext(now=NOW), lines, embedder=embedder,
                           source="episodes.jsonl")  # fmt: skip

        ok = [
            episode(
                episode_id=f"ok{i}", subject_id=f"u{i}", occurred_at=f"2026-06-0{i + 1}T10:00:00Z"
            )
            for i in range(4)
        ]
        ingest(lines_of(*ok))
        first = _nightly(stores, settings, "run_aaaa1111", NOW, embedder)
        ingest(
            lines_of(
                episode(episode_id="late", subject_id="u9", occurred_at="2026-07-30T10:00:00Z")
            )
        )
        record_ledger(stores.meta, [LedgerEntry(run_id="run_bbbb2222", logged_at=NOW,
                                                mode="batch", requests=12, input_tokens=9000,
                                                output_tokens=1200, cache_read_tokens=4000,
                                                cost_usd=0.0123)])  # fmt: skip
        second = _nightly(stores, settings, "run_bbbb2222", NOW + timedelta(days=1), embedder)
        receipt = run_forgetting(stores, settings, RunContext(now=NOW + timedelta(days=40)))
    return home, (first, second, receipt)


@pytest.fixture
def history(history_home: tuple[Path, tuple], settings):
    """The recorded history in this test's home (``settings``), before its stores open."""
    home, results = history_home
    shutil.copytree(home, settings.home, dirs_exist_ok=True)
    return copy.deepcopy(results)


def test_collect_reads_runs_forgetting_and_spend(history, stores):
    _first, second, receipt = history
    data = collect_report(stores)
    assert [r.run_id for r in data.runs] == ["run_aaaa1111", "run_bbbb2222"]  # oldest first
    assert data.runs[0].summary["rows_by_status"]["episodes"] == {"active": 4}
    assert data.runs[1].summary["rows_by_status"]["episodes"] == {"active": 5}
    assert data.runs[1].wall_s == pytest.approx(2.0)
    (spend,) = data.llm
    assert spend["run_id"] == "run_bbbb2222" and spend["requests"] == 12
    assert spend["cost_usd"] == pytest.approx(0.0123)
    (forgot,) = data.forgetting
    folded = receipt["compaction"]["episodes_folded"]
    assert forgot["expired"] == sum(receipt["expired"].values())
    assert forgot["folded"] == folded and folded >= 4  # the cluster of old episodes
    assert data.receipts_by_kind == {"expire": 1}
    # the Lance state now reflects the pass: old episodes folded away
    assert data.rows_now["episodes"].get("active", 0) == 5 - folded - forgot["expired"]
    assert sum(data.candidates_now.values()) == sum(second["candidates_by_status"].values())


def test_rows_by_status_counts_every_status_of_every_table(stores, ingest):
    """Counted in Arrow (``pc.value_counts``): the same counts, keys in order, plain ints (the
    run's summary is JSON) and tables without rows empty."""
    ingest(lines_of(*[episode(episode_id=f"e{i}") for i in range(5)]))
    stores.lance.update("episodes", "episode_id IN ('e1', 'e3')", {"status": "forgotten"})
    stores.lance.update("episodes", "episode_id = 'e4'", {"status": "folded"})
    rows = rows_by_status(stores)
    assert rows["episodes"] == {"active": 2, "folded": 1, "forgotten": 2}
    assert list(rows["episodes"]) == ["active", "folded", "forgotten"]
    assert all(type(n) is int for n in rows["episodes"].values())
    assert rows["facts"] == {} and json.loads(json.dumps(rows)) == rows


def test_collect_takes_the_rows_its_caller_just_counted(stores, ingest):
    """A night counts the rows for its summary and hands them to the report (one scan of every
    table, not two); without them the report counts for itself."""
    ingest(lines_of(*[episode(episode_id=f"e{i}") for i in range(3)]))
    counted = rows_by_status(stores)
    stores.lance.update("episodes", "episode_id = 'e1'", {"status": "forgotten"})
    assert collect_report(stores, rows_now=counted).rows_now == {**counted}
    assert collect_report(stores).rows_now["episodes"] == {"active": 2, "forgotten": 1}


def test_report_page_has_every_section_and_the_numbers(history, stores, settings):
    path = write_report(stores, settings.home)
    assert path == report_path(settings.home) and path.exists()
    assert not [p for p in path.parent.iterdir() if p.name != "index.html"]  # no temp left
    page = path.read_text()
    checker = _Checker()
    checker.feed(page)
    assert checker.h2 == [
        "Memory rows by class and status",
        "Promotion",
        "Forgetting",
        "LLM use",
        "Runs and stage durations",
        "Audit and receipts",
    ]
    # rows per table, candidates, forgetting (2), LLM (4), durations
    assert checker.svgs == 4 + 1 + 2 + 4 + 1
    # tooltips carry the plotted values: episodes active per run, spend, durations
    assert "08-01 12:00 aaaa · active: 4" in checker.titles
    assert any(t.endswith("requests: 12") for t in checker.titles)
    assert any("cluster (sum over partitions): 0.5" in t for t in checker.titles)
    assert "run_bbbb2222" in page and "$0.01" in page
    assert "<script" not in page  # static, opens offline


def test_empty_home_renders_placeholders(stores, settings):
    stores.lance.ensure_tables(384)
    page = write_report(stores, settings.home).read_text()
    assert page.count("no data yet") >= 5
    assert "nothing recorded yet" in page


@hsettings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.text(min_size=1, max_size=12), st.integers(0, 10**7), st.integers(0, 10**7)),
        min_size=1,
        max_size=30,
    )
)
def test_bars_never_leave_the_plot(points):
    labels = [p[0] for p in points]
    svg = stacked_bars(labels, {"a<&": [p[1] for p in points], "b": [p[2] for p in points]},
                       title="t <x>")  # fmt: skip
    top, bottom = 28, 260 - 58
    for y, h in re.findall(r'<rect x="[^"]+" y="([^"]+)" width="[^"]+" height="([^"]+)"', svg):
        if float(h) == 10:  # legend swatch
            continue
        assert float(y) >= top - 0.11 and float(y) + float(h) <= bottom + 0.11
    assert "<x>" not in svg and "a<&" not in svg  # text is escaped


def test_memctl_report_cli(history, settings):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    env["MEMCTL_EMBED__MODEL"] = "hash"
    out = forkserver.run(
        [sys.executable, "-m", "memory_core.cli", "report", "--home", str(settings.home),
         "--format", "json"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert Path(doc["report"]) == report_path(settings.home).resolve()
    assert doc["nightly_runs"] == 2 and doc["forgetting_passes"] == 1 and doc["llm_runs"] == 1


def test_render_is_deterministic_but_for_the_timestamp(history, stores):
    data = collect_report(stores)
    strip = re.compile(r"generated [^·]+·")
    assert strip.sub("", render_html(data)) == strip.sub("", render_html(data))
