# ruff: noqa: FBT002  (typer options are booleans by design, as in cli.py)
"""memctl forget / revoke / expire: adapters over ``memory_core.stages.forget``.

Each prints the receipt the stage stored (``--format json``: one JSON document). The receipt
names a forgotten subject or episode only by hash.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from memory_core.cli_context import CommandContext, command_context
from memory_core.cli_support import (
    ConfigOpt,
    FormatOpt,
    HomeOpt,
    NowOpt,
    OutputFormat,
    emit,
)


def forget(
    subject: Annotated[
        str | None, typer.Option("--subject", help="delete everything about this subject")
    ] = None,
    episode: Annotated[
        str | None, typer.Option("--episode", help="delete this one episode")
    ] = None,
    purpose: Annotated[
        str | None, typer.Option("--purpose", help="end a purpose: its records expire now")
    ] = None,
    tenant: Annotated[str | None, typer.Option("--tenant", help="only in this tenant")] = None,
    queue: Annotated[
        bool, typer.Option("--queue", help="only queue it for the deletion-requests flow")
    ] = False,
    now: NowOpt = None,
    home: HomeOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """User deletion (--subject/--episode) with version purge, verification and a receipt,
    or purpose expiry (--purpose)."""
    from memory_core.stages import forget as stage

    given = [name for name, v in (("--subject", subject), ("--episode", episode),
                                  ("--purpose", purpose)) if v is not None]  # fmt: skip
    if len(given) != 1:
        msg = "give exactly one of --subject S, --episode ID or --purpose P"
        raise typer.BadParameter(msg)
    cmd = command_context(home, config, now)
    settings, stores, ctx = cmd.settings, cmd.stores, cmd.run()
    if purpose is not None:
        emit(stage.end_purpose(stores, settings, ctx, purpose, tenant_id=tenant), fmt)
        return
    kind, target = ("subject", subject) if subject is not None else ("episode", episode)
    assert target is not None
    if queue:
        request_id = stage.request_deletion(stores, ctx, kind=kind, target=target, tenant_id=tenant)
        emit({"request_id": request_id, "status": "pending", "kind": kind}, fmt)
        return
    embedder = None  # built by the stage only if a digest must be re-embedded
    orchestrator = _orchestrator(cmd)
    if kind == "subject":
        receipt = stage.forget_subject(
            stores, settings, ctx, target, tenant_id=tenant, embedder=embedder,
            orchestrator=orchestrator,
        )  # fmt: skip
    else:
        receipt = stage.forget_episode(
            stores, settings, ctx, target, tenant_id=tenant, embedder=embedder,
            orchestrator=orchestrator,
        )  # fmt: skip
    emit(receipt, fmt)


def _orchestrator(cmd: CommandContext) -> Any:
    """Prefect's copies are forgotten too (flows/privacy.py): through its API when one is
    configured, and in the home's own Prefect database and result files."""
    settings = cmd.prefect()
    from memory_core.orchestration import orchestrator

    return orchestrator().prefect_store(settings.home)


def revoke(
    source: Annotated[str, typer.Option("--source", help="episode, fact, procedure or corpus id")],
    reason: Annotated[str, typer.Option("--reason", help="why the source is wrong or poisoned")],
    now: NowOpt = None,
    home: HomeOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Revoke a source and every derived record that no longer meets its policy without it."""
    from memory_core.stages.forget import revoke_source

    if not reason.strip():
        msg = "--reason must not be empty"
        raise typer.BadParameter(msg)
    cmd = command_context(home, config, now)
    settings, stores, ctx = cmd.settings, cmd.stores, cmd.run()
    result = revoke_source(stores, settings, ctx, source, reason=reason)
    emit(result.as_dict(), fmt)


def expire(
    now: NowOpt = None,
    no_maintenance: Annotated[
        bool, typer.Option("--no-maintenance", help="skip Lance compaction and version pruning")
    ] = False,
    home: HomeOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """TTL, decay, caps and purpose expiry, hard delete after grace, compaction, maintenance."""
    from memory_core.stages.forget import run_forgetting

    cmd = command_context(home, config, now)
    settings, stores, ctx = cmd.settings, cmd.stores, cmd.run()
    from memory_core.cli_progress import steps

    with steps(fmt, "expire") as say:
        say("TTL, decay, compaction, hard delete, maintenance")
        receipt = run_forgetting(stores, settings, ctx, maintain=not no_maintenance)
    emit(receipt, fmt)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the memctl app."""
    app.command(name="forget")(forget)
    app.command(name="revoke")(revoke)
    app.command(name="expire")(expire)
