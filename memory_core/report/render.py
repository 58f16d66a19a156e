"""The static HTML report: one self-contained page (inline CSS and SVG, no scripts)."""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape
from typing import Any

from memory_core.report.collect import ReportData
from memory_core.report.svg import stacked_bars
from memory_core.stores.schemas import TABLES

__all__ = ["render_html"]

_CLASS_OF = {
    "episodes": "episodic",
    "facts": "semantic",
    "procedures": "procedural",
    "digests": "digest",
}
_CANDIDATE_ORDER = [
    "pending_score",
    "pending_review",
    "approved",
    "promoted",
    "rejected",
    "auto_rejected",
]

_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;background:#fafafa}
h1{margin:0 0 4px;font-size:22px}h2{font-size:16px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.meta{color:#666;font-size:12px}.cards{display:flex;gap:12px;margin:16px 0;flex-wrap:wrap}
.card{background:#fff;border:1px solid #e2e2e2;border-radius:6px;padding:10px 16px;min-width:130px}
.card b{display:block;font-size:22px}.card span{color:#666;font-size:12px}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(570px,1fr));gap:12px;align-items:start}
.wide{grid-column:1/-1}
.panel{background:#fff;border:1px solid #e2e2e2;border-radius:6px;padding:8px}
table{border-collapse:collapse;font-size:12px;background:#fff}
td,th{border:1px solid #e2e2e2;padding:3px 8px;text-align:right}th{background:#f0f0f0}
td:first-child,th:first-child{text-align:left}
"""


def _table(header: list[str], rows: list[list[Any]]) -> str:
    if not rows:
        return '<p class="meta">nothing recorded yet</p>'
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(_cell(v))}</td>" for v in row) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.4f}".rstrip("0").rstrip(".") if value < 1 else f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _panel(svg: str, *, wide: bool = False) -> str:
    return f'<div class="panel{" wide" if wide else ""}">{svg}</div>'


def _rows_charts(data: ReportData) -> str:
    """Rows by memory class and status: one chart per table, one bar per run, then now."""
    points = [
        (r.label, r.summary["rows_by_status"]) for r in data.runs if "rows_by_status" in r.summary
    ]
    points.append(("now", data.rows_now))
    labels = [p[0] for p in points]
    panels = []
    for name in TABLES:
        statuses = sorted({s for _, rows in points for s in rows.get(name, {})})
        series = {s: [float(rows.get(name, {}).get(s, 0)) for _, rows in points] for s in statuses}
        title = f"{name} ({_CLASS_OF.get(name, name)}) rows by status"
        panels.append(_panel(stacked_bars(labels, series, title=title, unit="rows")))
    return '<div class="grid">' + "".join(panels) + "</div>"


def _candidates_chart(data: ReportData) -> str:
    labels = [r.label for r in data.runs]
    found = {s for r in data.runs for s in r.summary.get("candidates_by_status", {})}
    order = [s for s in _CANDIDATE_ORDER if s in found] + sorted(found - set(_CANDIDATE_ORDER))
    series = {
        s: [float(r.summary.get("candidates_by_status", {}).get(s, 0)) for r in data.runs]
        for s in order
    }
    return _panel(
        stacked_bars(labels, series, title="Candidates by status after each run", unit="candidates")
    )


def _forgetting_charts(data: ReportData) -> str:
    labels = [f["label"] for f in data.forgetting]
    volumes = {
        key: [float(f[key]) for f in data.forgetting] for key in ("expired", "deleted", "folded")
    }
    stages = sorted({k for f in data.forgetting for k in f["seconds"]})
    seconds = {k: [float(f["seconds"].get(k, 0)) for f in data.forgetting] for k in stages}
    return _panel(
        stacked_bars(labels, volumes, title="Forgetting volumes per pass", unit="rows")
    ) + _panel(stacked_bars(labels, seconds, title="Forgetting stage durations", unit="s"))


def _llm_charts(data: ReportData) -> str:
    labels = [row["label"] for row in data.llm]
    scored = {
        "Claude": [float(r["scored_llm"]) for r in data.llm],
        "score cache": [float(r["cache_hits"]) for r in data.llm],
        "heuristic (labelled)": [float(r["heuristic"]) for r in data.llm],
    }
    tokens = {
        key: [float(r[key]) for r in data.llm]
        for key in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
    }
    requests = {"requests": [float(r["requests"]) for r in data.llm]}
    cost = {"cost_usd": [r["cost_usd"] for r in data.llm]}
    charts = [
        stacked_bars(labels, scored, title="Candidates scored per run, by scorer", unit="cands"),
        stacked_bars(labels, requests, title="LLM requests per run", unit="requests"),
        stacked_bars(labels, tokens, title="LLM tokens per run", unit="tokens"),
        stacked_bars(labels, cost, title="LLM cost per run", unit="USD"),
    ]
    return "".join(_panel(c) for c in charts)


def _stage_seconds(summary: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in summary.get("results", []):
        for stage, secs in (part.get("seconds") or {}).items():
            out[stage] = out.get(stage, 0.0) + float(secs)
    return out


def _duration_chart(data: ReportData) -> str:
    labels = [r.label for r in data.runs]
    per_run = [_stage_seconds(r.summary) for r in data.runs]
    stages = sorted({s for d in per_run for s in d})
    series = {f"{s} (sum over partitions)": [d.get(s, 0.0) for d in per_run] for s in stages}
    accounted = [sum(d.values()) for d in per_run]
    series["rest of the run (wall)"] = [
        max(0.0, (r.wall_s or 0.0) - a) for r, a in zip(data.runs, accounted, strict=True)
    ]
    return _panel(stacked_bars(labels, series, title="Nightly stage durations", unit="s"))


def _runs_table(data: ReportData) -> str:
    rows = [
        [
            r.run_id,
            (r.clock or "")[:16].replace("T", " "),
            r.status,
            r.wall_s,
            r.summary.get("partitions"),
            r.summary.get("skipped"),
            r.summary.get("runner", ""),
        ]
        for r in reversed(data.runs)
    ]
    return _table(["run", "clock", "status", "wall s", "partitions", "skipped", "runner"], rows)


def render_html(data: ReportData, *, title: str = "memctl report") -> str:
    """The whole page as one string."""
    active = data.rows_now.get("episodes", {}).get("active", 0)
    promoted = data.candidates_now.get("promoted", 0)
    cost = sum(r["cost_usd"] for r in data.llm)
    cards = [
        (len(data.runs), "nightly runs"),
        (f"{active:,}", "active episodes"),
        (f"{sum(data.candidates_now.values()):,}", "candidates"),
        (f"{promoted:,}", "promoted"),
        (f"{len(data.forgetting)}", "forgetting passes"),
        (f"${cost:,.2f}", "LLM cost"),
    ]
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<div class="meta">generated {generated} · Lance {escape(data.lance_uri)} · '
        f"control plane {escape(data.meta_path)}</div>",
        '<div class="cards">'
        + "".join(f'<div class="card"><b>{v}</b><span>{escape(k)}</span></div>' for v, k in cards)
        + "</div>",
        "<h2>Memory rows by class and status</h2>",
        _rows_charts(data),
        "<h2>Promotion</h2>",
        '<div class="grid">',
        _candidates_chart(data),
        _panel(
            "<p><b>Candidates now</b></p>"
            + _table(["status", "candidates"], [[k, v] for k, v in data.candidates_now.items()])
        ),
        "</div>",
        "<h2>Forgetting</h2>",
        '<div class="grid">',
        _forgetting_charts(data),
        "</div>",
        "<h2>LLM use</h2>",
        '<div class="grid">',
        _llm_charts(data),
        _panel(
            _table(
                ["run", "requests", "input tok", "output tok", "cache read", "cost $", "heuristic"],
                [
                    [
                        r["run_id"],
                        r["requests"],
                        r["input_tokens"],
                        r["output_tokens"],
                        r["cache_read_tokens"],
                        r["cost_usd"],
                        r["heuristic"],
                    ]
                    for r in data.llm
                ],
            )
        ),
        "</div>",
        "<h2>Runs and stage durations</h2>",
        '<div class="grid">',
        _duration_chart(data),
        _panel(_runs_table(data), wide=True),
        "</div>",
        "<h2>Audit and receipts</h2>",
        '<div class="grid">',
        _panel(_table(["action", "events"], [[k, v] for k, v in data.audit_by_action.items()])),
        _panel(
            _table(["receipt kind", "count"], [[k, v] for k, v in data.receipts_by_kind.items()])
        ),
        "</div></body></html>",
    ]
    return "\n".join(parts)
