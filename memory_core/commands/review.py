"""memctl review list | show | approve | reject | build | wait, and memctl facts | procedures.

Each command is an adapter over one stage call. ``approve`` and ``reject`` decide and commit
through ``stages.review.decide_batch`` (the Prefect form ends there too) and then resume a
promotion-review flow run waiting on the batch, if there is one (Prefect has no resume
command; ``prefect.flow_runs.resume_flow_run`` does it).
"""

from __future__ import annotations

import getpass
import json
from datetime import datetime
from typing import Annotated, Any

import typer

from memory_core.cli_context import command_context
from memory_core.cli_support import (
    ConfigOpt,
    FormatOpt,
    HomeOpt,
    NowOpt,
    OutputFormat,
    emit,
    parse_now,
)

__all__ = ["register"]

review_app = typer.Typer(
    help="Review batches of candidate memories: list, show, approve, reject.",
    no_args_is_help=True,
)

ItemsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--items", help="candidate ids (repeat or comma-separate); default: all undecided"
    ),
]
ReviewerOpt = Annotated[
    str | None, typer.Option("--reviewer", help="who decides (default: the OS user)")
]
TenantOpt = Annotated[str | None, typer.Option("--tenant", help="only this tenant")]


def _reviewer(value: str | None) -> str:
    if value:
        return value
    try:
        return getpass.getuser()
    except (KeyError, OSError) as exc:
        msg = "cannot tell who you are: pass --reviewer NAME"
        raise typer.BadParameter(msg) from exc


def _items(values: list[str] | None) -> list[str]:
    return [v.strip() for raw in values or [] for v in raw.split(",") if v.strip()]


def _edits(values: list[str] | None) -> dict[str, Any]:
    from memory_core.stages.review import ItemEdit

    out: dict[str, Any] = {}
    for raw in values or []:
        cid, sep, body = raw.partition("=")
        if not sep or not cid.strip():
            msg = f'--edit {raw!r}: expected CANDIDATE_ID=JSON, e.g. c1=\'{{"object": "Mina"}}\''
            raise typer.BadParameter(msg)
        try:
            out[cid.strip()] = ItemEdit.model_validate(json.loads(body))
        except (json.JSONDecodeError, ValueError) as exc:
            msg = f"--edit for {cid.strip()}: {exc}".splitlines()[0]
            raise typer.BadParameter(msg) from exc
    return out


def _when(value: str | None, option: str) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_now(value)
    except typer.BadParameter as exc:
        raise typer.BadParameter(str(exc).replace("--now", option)) from exc


@review_app.command("list")
def list_cmd(
    status: Annotated[
        str | None, typer.Option("--status", help="open, approved, rejected, mixed, expired")
    ] = None,
    tenant: TenantOpt = None,
    home: HomeOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """List review batches: id, scope, kind, status and item counts."""
    from memory_core.stores.review import BatchStatus, list_batches

    if status is not None and status not in BatchStatus.__members__:
        msg = f"--status must be one of {', '.join(BatchStatus.__members__)}"
        raise typer.BadParameter(msg)
    stores = command_context(home, config).stores
    rows = list_batches(stores.meta, status=status, tenant_id=tenant)
    emit([b.as_dict() for b in rows], fmt, title="review batches")


@review_app.command("show")
def show_cmd(
    batch_id: Annotated[str, typer.Argument(help="batch id (see `memctl review list`)")],
    now: NowOpt = None,
    home: HomeOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Show a batch as a reviewer reads it: evidence, scores, risks, what approval would do."""
    from memory_core.stages.review import batch_summary, summary_markdown

    cmd = command_context(home, config, now)
    summary = batch_summary(cmd.stores, cmd.settings, batch_id, now=cmd.clock)
    if fmt is OutputFormat.json:
        emit(summary, fmt)
    else:
        typer.echo(summary_markdown(summary))


def _decide(
    batch_id: str, *, decision: str, items: list[str], reason: str, reviewer: str,
    edits: dict[str, Any], now: str | None, home: Any, config: Any, fmt: OutputFormat,
) -> None:  # fmt: skip
    from memory_core.stages.review import ReviewRequest, decide_batch

    cmd = command_context(home, config, now)
    settings, stores = cmd.settings, cmd.stores
    request = ReviewRequest(
        decision=decision, reviewer=reviewer, items=items, reason=reason, edits=edits
    )
    result = decide_batch(stores, settings, cmd.run(actor=reviewer), batch_id, request).as_dict()
    if result.get("flow_run_id"):
        cmd.prefect()
        from memory_core.orchestration import orchestrator

        result["flow_run"] = orchestrator().resume_review_run(result["flow_run_id"], request)
    emit(result, fmt)


@review_app.command("approve")
def approve_cmd(
    batch_id: Annotated[str, typer.Argument(help="batch id (see `memctl review list`)")],
    items: ItemsOpt = None,
    edit: Annotated[
        list[str] | None,
        typer.Option(
            "--edit",
            help='CANDIDATE_ID=JSON edit, e.g. c1=\'{"object": "Mina"}\' or '
            'c2=\'{"preconditions": {"os": "win", "vpn": "x"}}\' (narrowing only)',
        ),
    ] = None,
    reason: Annotated[str, typer.Option("--reason", help="optional note")] = "",
    reviewer: ReviewerOpt = None,
    now: NowOpt = None,
    home: HomeOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Approve a batch (or --items of it) and commit: facts, procedures, lineage, receipt."""
    _decide(
        batch_id, decision="approve", items=_items(items), reason=reason,
        reviewer=_reviewer(reviewer), edits=_edits(edit), now=now, home=home, config=config,
        fmt=fmt,
    )  # fmt: skip


@review_app.command("reject")
def reject_cmd(
    batch_id: Annotated[str, typer.Argument(help="batch id (see `memctl review list`)")],
    reason: Annotated[str, typer.Option("--reason", help="why (required; kept queryable)")],
    items: ItemsOpt = None,
    reviewer: ReviewerOpt = None,
    now: NowOpt = None,
    home: HomeOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Reject a batch (or --items of it) with a reason; candidates keep it, nothing commits."""
    _decide(
        batch_id, decision="reject", items=_items(items), reason=reason,
        reviewer=_reviewer(reviewer), edits={}, now=now, home=home, config=config, fmt=fmt,
    )  # fmt: skip


@review_app.command("build")
def build_cmd(
    now: NowOpt = None,
    home: HomeOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Expire stale batches and batch the queue now (the nightly run does this after scoring)."""
    from memory_core.stages.review import build_review_batches

    cmd = command_context(home, config, now)
    settings, ctx = cmd.settings, cmd.run()
    emit(build_review_batches(cmd.stores, settings, ctx).as_dict(), fmt)


@review_app.command("wait")
def wait_cmd(
    batch_id: Annotated[str, typer.Argument(help="batch id (see `memctl review list`)")],
    home: HomeOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Run the promotion-review flow for a batch here: it waits for the Prefect UI form or
    `memctl review approve|reject` (review.pause_timeout_hours at most)."""
    settings = command_context(home, config).prefect()
    from memory_core.orchestration import orchestrator

    emit(orchestrator().run_promotion_review(settings, batch_id), fmt)


def _rows_cmd(table: str) -> Any:
    def command(
        as_of: Annotated[
            str | None, typer.Option("--as-of", help="valid time, RFC3339 (default: any)")
        ] = None,
        known_at: Annotated[
            str | None,
            typer.Option("--known-at", help="recorded time, RFC3339 (default: current knowledge)"),
        ] = None,
        tenant: TenantOpt = None,
        subject: Annotated[str | None, typer.Option("--subject", help="only this subject")] = None,
        status: Annotated[
            str | None, typer.Option("--status", help="active, superseded, ...")
        ] = None,
        home: HomeOpt = None,
        config: ConfigOpt = None,
        fmt: FormatOpt = OutputFormat.text,
    ) -> None:
        from memory_core.read.provenance import served_provenance
        from memory_core.stores.facts import list_rows

        stores = command_context(home, config).stores
        rows = list_rows(
            stores.lance, table,  # type: ignore[arg-type]
            as_of=_when(as_of, "--as-of"), known_at=_when(known_at, "--known-at"),
            tenant_id=tenant, subject_id=subject, status=status,
        )  # fmt: skip
        rows = [served_provenance(r) for r in rows]  # other subjects only as a count
        if fmt is OutputFormat.json:
            emit(rows, fmt)
            return
        keys = (
            ["fact_id", "subject_id", "predicate", "object", "status", "valid_from", "valid_to"]
            if table == "facts"
            else ["procedure_id", "name", "version", "status", "valid_from", "valid_to"]
        )
        emit([{k: r.get(k) for k in [*keys, "recorded_at"]} for r in rows], fmt, title=table)

    command.__doc__ = (
        f"List {table} as of a valid time (--as-of) and as known at a recorded time (--known-at)."
    )
    return command


def register(app: typer.Typer) -> None:
    """Add `memctl review ...`, `memctl facts` and `memctl procedures` to the memctl app."""
    app.add_typer(review_app, name="review")
    app.command("facts")(_rows_cmd("facts"))
    app.command("procedures")(_rows_cmd("procedures"))
