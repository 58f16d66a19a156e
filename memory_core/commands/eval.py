"""memctl eval: run the evaluation suite (memory_core.eval) and write its reports.

    memctl eval [--dataset demo|tau-bench|locomo|all] [--path FILE] [--embedder hash|minilm]
                [--sample N] [--out DIR] [--write-doc EVALUATION.md] --format json
    memctl eval --render docs/eval/eval.json --write-doc EVALUATION.md   # no run: re-render

Writes ``DIR/eval.json``, ``DIR/eval.md`` and ``DIR/eval.html``; prints the JSON with
``--format json``. Exits 1 (after writing) when a gate is not 0: sensitive false writes,
wrong subject/tenant retrievals or deletion residue.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from memory_core.cli_context import command_context
from memory_core.cli_support import ConfigOpt, FormatOpt, OutputFormat, emit

__all__ = ["register"]


def _write(result: dict[str, Any], out: Path | None, doc: Path | None) -> None:
    from memory_core.eval.report import render_html, render_markdown

    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "eval.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        (out / "eval.md").write_text(render_markdown(result))
        (out / "eval.html").write_text(render_html(result))
    if doc is not None:
        doc.write_text(render_markdown(result))


def _command(dataset: str, path: Path | None, embedder: str, sample: int | None, k: int,
             out: Path | None, doc: Path | None) -> str:  # fmt: skip
    parts = ["memctl eval", f"--dataset {dataset}", f"--embedder {embedder}"]
    if path is not None:
        parts.append(f"--path {path}")
    if sample is not None:
        parts.append(f"--sample {sample}")
    if k != 10:
        parts.append(f"--k {k}")
    if out is not None:
        parts.append(f"--out {out}")
    if doc is not None:
        parts.append(f"--write-doc {doc}")
    return " ".join(parts)


def eval_cmd(
    dataset: Annotated[
        str, typer.Option("--dataset", help="demo, tau-bench, locomo or all")
    ] = "all",
    path: Annotated[
        Path | None,
        typer.Option("--path", help="evaluate this file instead (same shape as --dataset's)"),
    ] = None,
    embedder: Annotated[
        str | None,
        typer.Option("--embedder", help="hash or minilm (default: the configured embed.model)"),
    ] = None,
    sample: Annotated[
        int | None,
        typer.Option("--sample", min=1, help="at most N questions per kind, spread evenly"),
    ] = None,
    k: Annotated[int, typer.Option("--k", min=1, help="records served per question")] = 10,
    out: Annotated[
        Path | None, typer.Option("--out", help="write eval.json, eval.md, eval.html here")
    ] = None,
    write_doc: Annotated[
        Path | None, typer.Option("--write-doc", help="also write the markdown here")
    ] = None,
    render: Annotated[
        Path | None,
        typer.Option("--render", help="do not run: render this eval JSON to --out/--write-doc"),
    ] = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Evaluate memory quality on fresh temporary homes: write quality, retrieval, updates
    and forgetting, ablation and LLM cost; gold labels only score."""
    from memory_core.eval.runner import DATASETS, run_eval

    if render is not None:
        result = json.loads(render.read_text())
    else:
        names = list(DATASETS) if dataset == "all" else [dataset]
        if any(n not in DATASETS for n in names):
            msg = f"--dataset must be one of {', '.join(DATASETS)} or all, not {dataset!r}"
            raise typer.BadParameter(msg)
        model = embedder or command_context(config=config).settings.embed.model
        if model not in ("hash", "minilm"):
            msg = f"--embedder must be hash or minilm, not {model!r}"
            raise typer.BadParameter(msg)
        from memory_core.cli_progress import steps

        with steps(fmt, "eval", plain=True) as say:
            result = run_eval(
                names, embedder=model, path=path, sample=sample, k=k,
                command=_command(dataset, path, model, sample, k, out, write_doc),
                progress=say,
            )  # fmt: skip
    _write(result, out, write_doc)
    if fmt is OutputFormat.json:
        emit(result, fmt)
    else:
        emit(
            {
                "embedder": result["embedder"],
                "wall_seconds": result["wall_seconds"],
                "gates": result["gates"],
                **{
                    name: {k: v for k, v in data.items() if k in ("episodes", "skipped")}
                    for name, data in result["datasets"].items()
                },
            },
            fmt,
        )
    if not result["gates"]["ok"]:
        print(f"eval: a gate is not 0: {result['gates']}", file=sys.stderr)
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add `memctl eval` to the memctl app."""
    app.command("eval")(eval_cmd)
