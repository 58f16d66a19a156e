"""memctl recall (the read path agents embed) and memctl index (its indices).

``memctl recall QUERY --tenant T --format json`` prints a JSON array of records: the table's
columns without the vector, plus ``score`` and ``reason`` (interface contract v1). With
``--explain`` it prints one object instead, ``{"records": [...], "query_record": {...}}``, whose
query record lists every candidate, the selections and why each one left out was left out.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from memory_core.cli_context import command_context
from memory_core.cli_support import (
    ConfigOpt,
    FormatOpt,
    HomeOpt,
    NowOpt,
    OutputFormat,
    emit,
)
from memory_core.errors import InvalidRequest, MemoryUnavailable
from memory_core.read.filters import MemoryType


def _timestamp(option: str, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        msg = f"{option} {value!r} is not RFC3339 (e.g. 2026-07-01T00:00:00Z)"
        raise typer.BadParameter(msg) from exc
    if parsed.tzinfo is None:
        msg = f"{option} {value!r} has no timezone offset (add Z or +00:00)"
        raise typer.BadParameter(msg)
    return parsed.astimezone(UTC)


def _state(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            msg = f"--state {pair!r} must be key=value (e.g. --state os=win11)"
            raise typer.BadParameter(msg)
        out[key.strip()] = value.strip()
    return out


@contextmanager
def _bad_arguments() -> Iterator[None]:
    """The read path says ValueError for arguments it cannot answer: one line, no traceback."""
    try:
        yield
    except InvalidRequest:
        raise
    except ValueError as exc:
        raise InvalidRequest(argument="recall", reason=str(exc)) from exc


def recall_command(
    query: Annotated[str, typer.Argument(help="what the agent wants to remember")],
    tenant: Annotated[str, typer.Option("--tenant", help="the caller's tenant (required)")],
    subject: Annotated[
        str | None,
        typer.Option("--subject", help="the caller's subject; without it, tenant scope only"),
    ] = None,
    memory_type: Annotated[
        MemoryType | None, typer.Option("--type", help="episodic, semantic or procedural")
    ] = None,
    as_of: Annotated[
        str | None, typer.Option("--as-of", help="valid time to answer for, RFC3339")
    ] = None,
    known_at: Annotated[
        str | None,
        typer.Option("--known-at", help="transaction time: what was recorded then, RFC3339"),
    ] = None,
    k: Annotated[int | None, typer.Option("--k", min=1, help="at most this many records")] = None,
    state: Annotated[
        list[str] | None,
        typer.Option("--state", help="key=value the caller's environment (procedures, facts)"),
    ] = None,
    budget_tokens: Annotated[
        int | None, typer.Option("--budget-tokens", min=1, help="token budget of the results")
    ] = None,
    include_stale: Annotated[  # noqa: FBT002 (a typer flag)
        bool, typer.Option("--include-stale", help="also stale records, marked stale")
    ] = False,
    sensitivity: Annotated[
        list[str] | None,
        typer.Option("--sensitivity", help="allowed sensitivity (repeat); default from config"),
    ] = None,
    purpose: Annotated[
        str | None, typer.Option("--purpose", help="only records stored for no or this purpose")
    ] = None,
    namespace: Annotated[str | None, typer.Option("--namespace", help="only this one")] = None,
    explain: Annotated[  # noqa: FBT002 (a typer flag)
        bool, typer.Option("--explain", help="print {records, query_record} instead")
    ] = False,
    no_access_log: Annotated[  # noqa: FBT002 (a typer flag)
        bool, typer.Option("--no-access-log", help="do not record what was served")
    ] = False,
    now: NowOpt = None,
    home: HomeOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Recall memories for an agent: hard filters first, then hybrid search, ranking, packing."""
    from memory_core.recall import Recaller

    for level in sensitivity or []:
        if level not in ("low", "medium", "high"):
            msg = f"--sensitivity {level!r} must be low, medium or high"
            raise typer.BadParameter(msg)
    when = {"as_of": _timestamp("--as-of", as_of), "known_at": _timestamp("--known-at", known_at)}
    cmd = command_context(home, config, now)
    caller_state, clock = _state(state or []), cmd.clock
    settings = cmd.settings
    if not query.strip():  # before the store is opened or the embedder loaded
        raise InvalidRequest(
            argument="QUERY", reason="is empty; say what to remember (e.g. 'vpn error 720')"
        )
    if not tenant.strip():
        raise InvalidRequest(
            argument="--tenant", reason="is empty; recall never reads across tenants"
        )
    with (
        _bad_arguments(),
        Recaller.from_settings(settings, access_log=False if no_access_log else None) as memory,
    ):
        result = memory.recall(
            query,
            tenant_id=tenant,
            subject_id=subject,
            memory_type=memory_type,
            **when,
            now=clock,
            k=k,
            state=caller_state,
            budget_tokens=budget_tokens,
            include_stale=include_stale,
            sensitivity=sensitivity,
            purpose=purpose,
            namespace=namespace,
            explain=explain,
        )
    if explain:
        emit({"records": result.records, "query_record": result.query_record}, fmt)
    elif fmt is OutputFormat.json:
        emit(result.records, fmt)
    else:  # a readable summary; the JSON carries every column
        keys = ("record_id", "memory_type", "score", "text", "reason")
        emit([{k: r.get(k) for k in keys} for r in result.records], fmt, title="recall")


def index_command(
    vector: Annotated[  # noqa: FBT002 (a typer flag)
        bool, typer.Option("--vector", help="build a vector index even below the threshold")
    ] = False,
    home: HomeOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Create the read path's indices: full text on every table, vector where big enough."""
    from memory_core.read.indexes import ensure_read_indexes
    from memory_core.stores.lance import LanceStore

    settings = command_context(home, config).settings
    uri = settings.lance_uri
    if "://" not in uri and not Path(uri).is_dir():
        raise MemoryUnavailable(uri, "no Lance database here; run `memctl init` or check --home")
    store = LanceStore(uri, storage_options=settings.stores.storage_options)
    result = ensure_read_indexes(
        store,
        vector_min_rows=1 if vector else settings.recall.vector_index_min_rows,
        vector_partitions=settings.recall.vector_index_partitions,
    )
    emit(result, fmt)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the memctl app."""
    app.command(name="recall")(recall_command)
    app.command(name="index")(index_command)
