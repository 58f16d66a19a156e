"""Render the eval JSON as markdown (also EVALUATION.md) and as a static HTML page with plots.

Why generated: published memory benchmarks drift from the code that produced them. Here the
doc is a pure function of the JSON (``render_markdown``); the committed JSON
(``docs/eval/eval.json``) and EVALUATION.md are checked against each other by a test, so a
figure cannot change in one place only. Plots are inline SVG written here: no plotting
dependency, and the page opens offline.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from memory_core.eval.retrieval import ARMS

__all__ = ["DOC_JSON", "fmt", "render_html", "render_markdown"]

DOC_JSON = "docs/eval/eval.json"

_ROWS: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    "Write quality": [
        ("promoted rows (facts + procedures)", ("write_quality", "promoted_rows")),
        ("useful-memory precision", ("write_quality", "useful_memory_precision")),
        ("candidate precision (all proposed)", ("write_quality", "candidate_precision")),
        ("candidate recall", ("write_quality", "candidate_recall")),
        ("unsupported-memory rate", ("write_quality", "unsupported_memory_rate")),
        ("wrong-type rate", ("write_quality", "wrong_type_rate")),
        ("tool/agent claims stored as facts", ("write_quality", "tool_or_agent_claims_as_facts")),
        ("provenance completeness", ("write_quality", "provenance_completeness")),
        ("duplicate current rows", ("write_quality", "duplicate_current_rows")),
        ("conflicts held on commit", ("write_quality", "conflicts_held")),
        ("superseded on commit", ("write_quality", "superseded_on_commit")),
        ("secrets planted", ("write_quality", "planted")),
        ("sensitive false writes", ("write_quality", "sensitive_false_writes")),
        ("cluster ARI vs gold intents", ("write_quality", "cluster_ari")),
        ("cluster NMI vs gold intents", ("write_quality", "cluster_nmi")),
        ("learnable gold intents", ("write_quality", "learnable_intents")),
        (
            "… with a procedure of their world-changing steps",
            ("write_quality", "learnable_intents_with_procedure"),
        ),
        (
            "procedure precision (passing candidates)",
            ("write_quality", "procedure_precision_passing"),
        ),
        ("procedure precision (all candidates)", ("write_quality", "procedure_precision_all")),
        (
            "failed runs linked (counterexample or pitfall)",
            ("write_quality", "failed_runs_linked_rate"),
        ),
        (
            "promoted procedures on one gold intent label (stricter)",
            ("write_quality", "one_label_precision"),
        ),
    ],
    "Retrieval": [
        ("queries", ("retrieval", "queries")),
        ("recall@k (all memory classes)", ("retrieval", "recall_at_k")),
        ("answer in context", ("retrieval", "answer_in_context")),
        ("records served", ("retrieval", "served_records")),
        ("stale/expired retrieval rate", ("retrieval", "stale_retrieval_rate")),
        ("expired/superseded probes", ("retrieval", "forbidden_probes")),
        ("… of which served a forbidden record", ("retrieval", "forbidden_served")),
        ("wrong subject/tenant retrieval rate", ("retrieval", "wrong_scope_retrieval_rate")),
        ("wrong subject/tenant retrievals", ("retrieval", "wrong_scope_retrievals")),
        ("context-budget utilisation", ("retrieval", "context_budget_utilisation")),
    ],
    "Update and forgetting": [
        ("supersession accuracy", ("update_forgetting", "supersession_accuracy")),
        ("as-of correctness", ("update_forgetting", "as_of_correctness")),
        ("as-of probes", ("update_forgetting", "as_of_probes")),
        ("records probed for revocation", ("update_forgetting", "records_probed")),
        ("revoked-source propagation", ("update_forgetting", "revoked_source_propagation")),
        (
            "current rows citing only revoked sources",
            ("update_forgetting", "current_rows_citing_only_revoked_sources"),
        ),
        ("revoked records served by recall", ("update_forgetting", "revoked_served")),
        ("deleted subject's episodes", ("update_forgetting", "subject_episodes")),
        ("deletion residue", ("update_forgetting", "deletion_residue")),
        (
            "identifying values only the subject gave, looked for",
            ("update_forgetting", "subject_values_checked"),
        ),
        ("pipeline's own deletion check passed", ("update_forgetting", "pipeline_self_verified")),
    ],
    "Cost (dry run: what Claude would be sent)": [
        ("requests", ("cost", "requests")),
        ("input tokens (estimate)", ("cost", "input_tokens")),
        ("output tokens (max_tokens)", ("cost", "output_tokens")),
        ("cost, USD (estimate)", ("cost", "cost_usd")),
        ("requests per 1,000 episodes", ("cost", "requests_per_1000_episodes")),
    ],
}

_SOURCES = """\
| data set | source | licence |
| --- | --- | --- |
| demo | generated here (`memory_core/demo`, seed 7): multi-tenant episodes with a ground truth \
(procedures, traps, preferences and their changes, planted secrets, expiring grants) | this \
project's |
| tau-bench | sierra-research/tau-bench `historical_trajectories/gpt-4o-airline.json` (commit \
59a200c), tasks 0-24 x 4 trials | MIT (`../shared/data/LICENSE-tau-bench.txt`) |
| locomo | snap-research/LoCoMo `data/locomo10.json` (commit 3eb6f2c), conversations conv-26, \
conv-30, conv-41, conv-42, conv-43 | CC BY-NC 4.0 (`../shared/data/LICENSE-locomo.txt`): \
attribution, non-commercial use |

The public files are read from `../shared/data/` (see its README), never copied into this \
repository; a held-out part of each source exists elsewhere to check that these figures carry \
over. Gold labels (demo truth, tau-bench gold actions, LoCoMo answers and evidence) only \
score; the pipeline never sees them. tau-bench and LoCoMo episodes get credentials planted in \
a deterministic sample of their texts (`memory_core/eval/plant.py`) so that sensitive false \
writes are measured on every data set."""

_NOT_MEASURED = """\
- **Real Claude answers.** No API call is made: the score stage runs its labelled heuristic \
fallback, and the cost rows are the requests, input tokens (characters / 4 of the exact \
request bodies) and worst-case output tokens the scorer *would* send. How Claude's scores \
would change promotion is not measured here.
- **Answer quality.** "Answer in context" checks that the gold answer appears verbatim in the \
packed context; no model reads the context, so end-to-end QA accuracy is not measured.
- **Human review.** Every review batch is approved as `memctl review approve` would; what \
reviewers would reject is not simulated.
- **LoCoMo and tau-bench updates.** They carry no preference changes and promote few or no \
facts, so supersession and as-of figures come from the demo only (n/a elsewhere)."""

_DEFINITIONS = """\
- *useful-memory precision*: promoted rows that are true. Demo: matched against the ground \
truth (procedure steps and separating preconditions; preference objects the user stated). \
tau-bench: promoted procedures whose world-changing steps (tool names) equal the gold \
intent's world-changing actions for every supporting run (lookups and hand-offs are no \
changes: `memory_core/eval/tau_checks.py`, the same check `bench/tau_cluster.py` prints).
- *tau-bench procedure checks*: a gold intent is learnable with >= 3 successful runs from >= 2 \
users; it has a procedure when a procedural candidate supported by one of its runs shows its \
world-changing steps; procedure precision is that check over candidates (those that passed \
the policy; all); failed runs linked are failed runs of learnable intents that are \
counterexamples of, or pitfall evidence for, their intent's procedure. *On one gold intent \
label* is the older, stricter reading: every supporting run carries the same gold label, \
which counts a procedure wrong when two intents differ only by a step that changes nothing.
- *unsupported-memory rate*: promoted rows citing fewer stored episodes than their policy \
needs (`policy.min_support`, one for a subject's preference).
- *wrong-type rate*: facts with user-statement authority resting on a non-user episode, or \
procedures not human-approved.
- *provenance completeness*: promoted rows whose provenance names sources that exist with the \
same content hash.
- *sensitive false writes*: rows in any Lance table version or DuckDB table holding a planted \
secret value (scan independent of the redactor).
- *recall@k*: questions with an evidence record (or a record whose provenance names one) among \
the packed top k. *answer in context*: the gold answer appears in the packed text.
- *stale/expired retrieval rate*: served records not current (status, expiry, valid or \
transaction time); *forbidden probes* ask for expired episodes and superseded facts by \
their own words.
- *wrong subject/tenant retrieval rate*: served records of another tenant or subject.
- *supersession accuracy*: changed preferences (both versions stored) whose only current row \
holds the new object. *as-of correctness*: `facts --as-of T` answers the object true at T.
- *revoked-source propagation*: records whose every episode source was revoked that end \
revoked; *deletion residue*: rows of the forgotten subject, or cells holding its episode ids, \
its texts or the identifying values of its tool calls and conditions that no one else gave \
(ids such as a reservation or device: 6+ characters with a letter and a digit; e-mail \
addresses), in any Lance version or DuckDB table after `forget --subject`.
- *ablation arms*: the agent may read nothing, episodes (and digests), + facts, + procedures; \
each class recalled with the same call, merged by score into the same budget."""


def _get(data: dict[str, Any], path: Sequence[str]) -> Any:
    value: Any = data
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def fmt(value: Any) -> str:
    """How a figure is printed: n/a for unmeasured, 3 decimals for rates, ints as they are."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 100 else f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


_ORDER = ("demo", "tau-bench", "locomo")


def _datasets(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Data sets in a fixed order, whatever the JSON's key order (eval.json is written with
    sorted keys): the rendering must depend on the figures only."""
    found = result["datasets"]
    names = [n for n in _ORDER if n in found] + sorted(n for n in found if n not in _ORDER)
    return {n: found[n] for n in names}


def _ran(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: d for n, d in _datasets(result).items() if not d.get("skipped")}


REPLAYED = "replayed dataset annotations, not Claude"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def _replayed_extraction_v1(name: str, x: dict[str, Any]) -> list[str]:
    """The arm as the first eval JSON recorded it (every fact proposed, k = 10 only)."""
    out: list[str] = []
    after = x["after_compaction"]
    cost = x["cost"]
    rows = []
    for arm, label in (("episodes", "episodes only"), ("facts_only", "facts only"),
                       ("episodes_facts", "facts + episodes")):  # fmt: skip
        rows.append([
            label, fmt(x["retrieval"][arm]["recall_at_k"]),
            fmt(x["retrieval"][arm]["answer_in_context"]),
            fmt(after["retrieval"][arm]["recall_at_k"]),
            fmt(after["retrieval"][arm]["answer_in_context"]),
        ])  # fmt: skip
    out += [
        "", f"## Extraction on {name}: {x['replay']}", "",
        f"Facts extracted {fmt(x['facts_extracted'])}, promoted {fmt(x['facts_promoted'])} "
        f"(proposal rule: min_sessions {x['proposal_rule']['min_sessions']}, min_episodes "
        f"{x['proposal_rule']['min_episodes']}, as {x['proposal_rule']['why']}; under the "
        "default rule "
        f"{fmt(x['proposed_under_default_rule'])}). Rows kept: {fmt(x['rows']['total'])} "
        f"before, {fmt(after['rows']['total'])} after compaction of episodes older than "
        f"{fmt(after['retention_days'])} days ({fmt(after['rows_ratio_to_episodes_only'])} "
        f"of the episodes). Requests {fmt(cost['requests'])} "
        f"({fmt(cost['requests_per_episode'])} per episode, "
        f"{fmt(cost['requests_on_unchanged_rerun'])} on an unchanged rerun), input tokens "
        f"{fmt(cost['input_tokens'])} ({fmt(cost['input_tokens_per_episode'])} per episode), "
        "counted from the request bodies the replay would have sent.", "",
    ]  # fmt: skip
    out += _table(
        ["arm", "recall@k", "answer in context", "after compaction: recall@k",
         "after compaction: answer in context"],
        rows,
    )  # fmt: skip
    return out


def _replayed_extraction(ran: dict[str, dict[str, Any]]) -> list[str]:
    """LoCoMo's arm with extraction replayed from the dataset's own annotations."""
    out: list[str] = []
    for name, d in ran.items():
        x = d.get("replayed_extraction")
        if not x:
            continue
        after = x["after_compaction"]
        cost = x["cost"]
        if "proposal" not in x:  # a JSON written before the proposal routes were reported
            out += _replayed_extraction_v1(name, x)
            continue
        prop = x["proposal"]
        rule = prop.get("rule") or {}
        k10 = next((key for key in x if key.startswith("retrieval_k")), None)
        rows = []
        for arm, label in (("episodes", "episodes only"), ("facts_only", "facts only"),
                           ("episodes_facts", "facts + episodes")):  # fmt: skip
            row = [
                label, fmt(x["retrieval"][arm]["recall_at_k"]),
                fmt(x["retrieval"][arm]["answer_in_context"]),
                fmt(after["retrieval"][arm]["recall_at_k"]),
                fmt(after["retrieval"][arm]["answer_in_context"]),
            ]  # fmt: skip
            if k10:
                row += [fmt(x[k10][arm]["recall_at_k"]), fmt(after[k10][arm]["recall_at_k"])]
            rows.append(row)
        out += [
            "", f"## Extraction on {name}: {x['replay']}", "",
            (f"Embedder for this section: `{x['embedder']}`. " if x.get("embedder") else "")
            + f"Facts extracted {fmt(x['facts_extracted'])}, promoted "
            f"{fmt(x['facts_promoted'])}. "
            f"Proposal rule (min_sessions {rule.get('min_sessions')}, min_episodes "
            f"{rule.get('min_episodes')}, or one self-statement scored >= "
            f"{rule.get('single_statement_min_importance')}): {fmt(prop.get('proposed'))} of "
            f"{fmt(prop.get('objects'))} objects proposed, {fmt(prop.get('by_evidence'))} by "
            f"distinct evidence ({REPLAYED}), {fmt(prop.get('by_answer_importance'))} by the "
            f"answer's importance, {fmt(prop.get('by_heuristic_importance'))} by importance from "
            "heuristic scores, not Claude (the annotations carry no importance). "
            f"Rows kept: {fmt(x['rows']['total'])} "
            f"before, {fmt(after['rows']['total'])} after compaction of episodes older than "
            f"{fmt(after['retention_days'])} days into {fmt(after.get('digests'))} digests "
            f"({fmt(after['rows_ratio_to_episodes_only'])} of the episodes). "
            f"Requests {fmt(cost['requests'])} "
            f"({fmt(cost['requests_per_episode'])} per episode, "
            f"{fmt(cost['requests_on_unchanged_rerun'])} on an unchanged rerun), input tokens "
            f"{fmt(cost['input_tokens'])} ({fmt(cost['input_tokens_per_episode'])} per episode), "
            "counted from the request bodies the replay would have sent.", "",
            f"Counting rule: every arm is packed into the same 2,000-token budget and the same "
            f"limit of {x.get('k', '?')} records, which a ~30-token turn reaches only after the "
            "budget (like-for-like: no arm reads more text than another); a question is "
            "recalled when one of its evidence turns is in the packed context (the turn, a "
            "digest holding its line, or a fact citing it). The earlier k = 10 rule let ten "
            "digests of up to eight turns stand against ten turns.", "",
        ]  # fmt: skip
        header = ["arm", "recall", "answer in context", "after compaction: recall",
                  "after compaction: answer in context"]  # fmt: skip
        if k10:
            header += ["recall k=10", "after compaction: recall k=10"]
        out += _table(header, rows)
    return out


def render_markdown(result: dict[str, Any]) -> str:
    """EVALUATION.md (and ``--out DIR/eval.md``) from the eval JSON; nothing else."""
    ran = _ran(result)
    names = list(ran)
    gates = result["gates"]
    lines = [
        "# Evaluation",
        "",
        f"<!-- Generated from {DOC_JSON} by `memctl eval --render {DOC_JSON} --write-doc "
        "EVALUATION.md`; do not edit by hand (tests/eval/test_report.py checks it). -->",
        "",
        "What the pipeline does to memory quality, measured on generated and public data with "
        "one command. Every figure below is in the JSON the command wrote "
        f"(`{DOC_JSON}`); a figure is n/a where it does not apply to a data set.",
        "",
        "## Reproduce",
        "",
        f"    {result['command'] or 'memctl eval --dataset all'}",
        "",
        f"- embedder: `{result['embedder']}`",
        f"- scorer: {result['scorer']}",
        f"- review: {result['review']}",
        f"- query sample per kind: {result['sample'] or 'all'}; k = {result['k']}",
        f"- wall time: {fmt(result['wall_seconds'])} s on {result['machine']['cpus']} CPUs "
        f"(1-minute load average at the end: {result['machine']['load_average_1m_at_end']})",
    ]
    for name, data in _datasets(result).items():
        if data.get("skipped"):
            lines.append(f"- {name}: skipped, {data['skipped']}")
        if data.get("run_note"):  # a data set measured in a run of its own, and how
            lines.append(f"- {name}: {data['run_note']}")
    lines += [
        "",
        "## Gates (must be 0 on every data set)",
        "",
        *_table(
            [
                "data set",
                "sensitive false writes",
                "wrong subject/tenant retrievals",
                "deletion residue",
            ],
            [
                [
                    n,
                    fmt(_get(d, ("write_quality", "sensitive_false_writes"))),
                    fmt(_get(d, ("retrieval", "wrong_scope_retrievals"))),
                    fmt(_get(d, ("update_forgetting", "deletion_residue"))),
                ]
                for n, d in ran.items()
            ],
        ),
        "",
        f"All gates at 0: **{fmt(gates['ok'])}**.",
        "",
        "## Data",
        "",
        *_table(
            ["", *names],
            [
                ["episodes", *[fmt(d.get("episodes")) for d in ran.values()]],
                ["nights (consolidation runs)", *[fmt(d.get("nights")) for d in ran.values()]],
                ["wall seconds", *[f"{d.get('wall_seconds', 0):.1f}" for d in ran.values()]],
                [
                    "deleted subject (probe)",
                    *[fmt(_get(d, ("update_forgetting", "deleted_subject"))) for d in ran.values()],
                ],
            ],
        ),
    ]
    for section, rows in _ROWS.items():
        lines += ["", f"## {section}", ""]
        lines += _table(
            ["metric", *names],
            [[label, *[fmt(_get(d, path)) for d in ran.values()]] for label, path in rows],
        )
    lines += ["", "## Ablation at retrieval level", ""]
    lines += _table(
        ["arm", *[f"{n} recall@k" for n in names], *[f"{n} answer in context" for n in names]],
        [
            [arm]
            + [fmt(_get(d, ("retrieval", "ablation", arm, "recall_at_k"))) for d in ran.values()]
            + [
                fmt(_get(d, ("retrieval", "ablation", arm, "answer_in_context")))
                for d in ran.values()
            ]
            for arm in ARMS
        ],
    )
    idle = [n for n, d in ran.items() if not _get(d, ("write_quality", "promoted_rows"))]
    if idle:
        lines += [
            "",
            f"Nothing was promoted on {', '.join(idle)}: the arms after `episodes` read the "
            "same records there.",
        ]
    lines += _replayed_extraction(ran)
    lines += ["", "Recall by kind of question (all memory classes):", ""]
    kinds = [
        [n, kind, fmt(v["queries"]), fmt(v["hits"]), fmt(v["answered"])]
        for n, d in ran.items()
        for kind, v in sorted(d["retrieval"].get("by_kind", {}).items())
    ]
    lines += _table(["data set", "kind", "queries", "recalled", "answer in context"], kinds)
    lines += [
        "",
        "## Data sources and licences",
        "",
        _SOURCES,
        "",
        "## Your own data",
        "",
        "`--path FILE` evaluates another file of the named data set's shape: a tau-bench "
        "trajectory list (`--dataset tau-bench`), a LoCoMo conversation list (`--dataset "
        "locomo`), or demo-format `episodes.jsonl` with its `truth.json` beside it "
        "(`--dataset demo`). `--sample N` asks at most N questions of each kind, spread evenly "
        "(deterministic); `--embedder hash` is the fast deterministic embedder the tests use.",
        "",
        "## What could not be measured here",
        "",
        _NOT_MEASURED,
        "",
        "## Definitions",
        "",
        _DEFINITIONS,
        "",
    ]
    return "\n".join(lines)


def _bars(title: str, groups: dict[str, dict[str, float | None]], *, width: int = 640) -> str:
    """A grouped horizontal bar chart (values 0-1) as inline SVG; n/a bars are labelled."""
    bar, gap, left = 14, 10, 230
    rows = [(g, s, v) for g, series in groups.items() for s, v in series.items()]
    height = 30 + len(rows) * (bar + 4) + gap * len(groups)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'role="img" aria-label="{html.escape(title)}">',
        f'<text x="0" y="16" font-weight="bold">{html.escape(title)}</text>',
    ]
    y = 28
    span = width - left - 60
    for group, series in groups.items():
        for name, value in series.items():
            label = html.escape(f"{group} · {name}")
            parts.append(f'<text x="0" y="{y + bar - 3}" font-size="12">{label}</text>')
            if value is None:
                parts.append(f'<text x="{left}" y="{y + bar - 3}" font-size="12">n/a</text>')
            else:
                w = max(1, round(span * max(0.0, min(1.0, value))))
                parts.append(
                    f'<rect x="{left}" y="{y}" width="{w}" height="{bar}" fill="#4c78a8"/>'
                    f'<text x="{left + w + 4}" y="{y + bar - 3}" font-size="12">'
                    f"{value:.3f}</text>"
                )
            y += bar + 4
        y += gap
    parts.append("</svg>")
    return "".join(parts)


def render_html(result: dict[str, Any]) -> str:
    """A static page: the markdown's tables as HTML plus ablation and rate plots (SVG)."""
    ran = _ran(result)
    charts = [
        _bars(
            "Ablation: recall@k per arm",
            {
                n: {arm: _get(d, ("retrieval", "ablation", arm, "recall_at_k")) for arm in ARMS}
                for n, d in ran.items()
            },
        ),
        _bars(
            "Ablation: answer in context per arm",
            {
                n: {
                    arm: _get(d, ("retrieval", "ablation", arm, "answer_in_context"))
                    for arm in ARMS
                }
                for n, d in ran.items()
            },
        ),
        _bars(
            "Write quality and forgetting (rates)",
            {
                n: {
                    "useful-memory precision": _get(
                        d, ("write_quality", "useful_memory_precision")
                    ),
                    "provenance completeness": _get(
                        d, ("write_quality", "provenance_completeness")
                    ),
                    "unsupported rate": _get(d, ("write_quality", "unsupported_memory_rate")),
                    "supersession accuracy": _get(
                        d, ("update_forgetting", "supersession_accuracy")
                    ),
                    "as-of correctness": _get(d, ("update_forgetting", "as_of_correctness")),
                    "revocation propagation": _get(
                        d, ("update_forgetting", "revoked_source_propagation")
                    ),
                }
                for n, d in ran.items()
            },
        ),
    ]
    body: list[str] = []
    in_table = False
    for line in render_markdown(result).splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if all(set(c) <= {"-", " "} for c in cells):
                continue
            tag = "th" if not in_table else "td"
            if not in_table:
                body.append("<table>")
                in_table = True
            body.append(
                "<tr>" + "".join(f"<{tag}>{html.escape(c)}</{tag}>" for c in cells) + "</tr>"
            )
            continue
        if in_table:
            body.append("</table>")
            in_table = False
        if line.startswith("## "):
            body.append(f"<h2>{html.escape(line[3:])}</h2>")
        elif line.startswith("# "):
            body.append(f"<h1>{html.escape(line[2:])}</h1>")
            body.append("".join(f"<figure>{c}</figure>" for c in charts))
        elif line.startswith("    "):
            body.append(f"<pre>{html.escape(line.strip())}</pre>")
        elif line.strip() and not line.startswith("<!--"):
            body.append(f"<p>{html.escape(line)}</p>")
    if in_table:
        body.append("</table>")
    style = (
        "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;"
        "padding:3px 8px;text-align:left}th{background:#eee}figure{margin:1em 0}"
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>memory-core evaluation</title><style>{style}</style></head><body>"
        + "\n".join(body)
        + "</body></html>\n"
    )
