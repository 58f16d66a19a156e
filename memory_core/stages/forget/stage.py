"""Forgetting (invariant 7): the public entry points the CLI and the flows call.

* ``run_forgetting`` -- the nightly pass and ``memctl expire``: fold the access log into
  access statistics, compact clustered episodes past retention into digests, expire by TTL /
  ``expires_at`` / purpose / decay / cap, hard-delete past the grace period, then maintain the
  Lance tables that changed (compaction, version pruning, index refresh).
* ``end_purpose`` -- ``memctl forget --purpose P``: records stored for P stop being served
  now and follow the grace period to deletion; later rows with P expire on the next pass.
* ``forget_subject`` / ``forget_episode`` -- user deletion with version purge, verification
  and a receipt (``user_deletion.py``); ``request_deletion`` queues one for the
  ``deletion-requests`` flow, which calls ``process_deletion_requests``.
* ``revoke_source`` -- revocation through lineage (``revoke.py``).

Modules: ``expire.py`` (rules, access log), ``compact/stage.py`` (digests), ``revoke.py`` (lineage
walk and policy re-checks), ``user_deletion.py`` (user deletion), ``maintain.py`` (Lance).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from memory_core.config import Settings
from memory_core.context import RunContext
from memory_core.crash import crash_point
from memory_core.embed import Embedder
from memory_core.errors import NotFound
from memory_core.stages.compact.stage import compact_episodes
from memory_core.stages.forget.expire import expire_records, fold_access_log
from memory_core.stages.forget.maintain import maintain_tables
from memory_core.stages.forget.revoke import revoke_source
from memory_core.stages.forget.user_deletion import Target, forget
from memory_core.stores import Stores
from memory_core.stores import forgetting as fstore
from memory_core.stores.audit import receipt_id, record_audit, store_receipt
from memory_core.stores.lance import sql_quote
from memory_core.stores.residue import Orchestrator
from memory_core.stores.schemas import TABLES
from memory_core.stores.status_writes import InPlace, write_status

__all__ = [
    "carry_out_request",
    "end_purpose",
    "forget_episode",
    "forget_subject",
    "process_deletion_requests",
    "request_deletion",
    "revoke_source",
    "run_forgetting",
]

logger = logging.getLogger(__name__)

USER_DELETIONS = ("subject", "episode")  # request kinds the deletion loop carries out


def _store(stores: Stores, ctx: RunContext, kind: str, body: dict[str, Any], target: str | None,
           tenant_id: str | None = None) -> None:  # fmt: skip
    with stores.meta.transaction() as con:
        store_receipt(con, receipt_id=body["receipt_id"], kind=kind, at=ctx.now,
                      run_id=ctx.run_id, body=body)  # fmt: skip
        record_audit(con, at=ctx.now, action=kind, run_id=ctx.run_id, actor=ctx.actor,
                     target=target, tenant_id=tenant_id,
                     detail={"receipt_id": body["receipt_id"]})  # fmt: skip


def _pass_receipt_id(stores: Stores, ctx: RunContext, *, did_work: bool) -> str:
    """The id of a forgetting pass's receipt: its clock, so a rerun after a kill (the receipt
    is stored last) stores it once; a further pass at the same clock that did work is the
    clock's next pass, so its receipt is stored too instead of colliding with the first."""
    first = receipt_id("expire", ctx.now.isoformat())
    if not did_work:
        return first  # nothing to record beyond the first pass's receipt
    with stores.meta.connect() as con:
        (stored,) = con.execute(
            "SELECT count(*) FROM receipts WHERE kind = 'expire' AND issued_at = ?", [ctx.now]
        ).fetchone()
    return first if stored == 0 else receipt_id("expire", ctx.now.isoformat(), stored)


def run_forgetting(
    stores: Stores,
    settings: Settings,
    ctx: RunContext,
    *,
    embedder: Embedder | None = None,
    maintain: bool = True,
) -> dict[str, Any]:
    """One forgetting pass at ``ctx.now``; returns (and stores) its receipt."""
    t0 = time.perf_counter()
    folded = fold_access_log(stores, settings, ctx)
    t1 = time.perf_counter()
    compacted = compact_episodes(stores, settings, ctx, embedder=embedder)
    crash_point("forget.compacted")
    # imported here, not with this module: digest summaries go through the score stage's
    # Claude client, whose SDK import costs ~2.2 CPU s, and the deletion-request path
    # (`deletion-requests` flow runs, `memctl forget`) imports this module but never summarizes
    from memory_core.stages.compact.digest_summary import summarize_digests

    summaries = summarize_digests(stores, settings, ctx)
    t2 = time.perf_counter()
    expired = expire_records(stores, settings, ctx)
    crash_point("forget.expired")
    t3 = time.perf_counter()
    changed = set(expired.changed_tables)
    if compacted.digests or compacted.deleted_ids:
        changed |= {"episodes", "digests"}
    if summaries.applied:
        changed.add("digests")
    maintenance = maintain_tables(stores, settings, sorted(changed)) if maintain else []
    # hard-deleted control-plane rows stay in DuckDB's freed blocks until the file is rewritten
    rewrite_s = stores.meta.rewrite() if expired.deleted or compacted.deleted_ids else None
    t4 = time.perf_counter()
    did_work = bool(
        changed or any(folded.values()) or any(expired.deleted.values())
        or any(expired.control_plane.values())
    )  # fmt: skip
    receipt = {
        "receipt_id": _pass_receipt_id(stores, ctx, did_work=did_work),
        "kind": "expire",
        "at": ctx.now.isoformat(),
        "run_id": ctx.run_id,
        "access_log": folded,
        "compaction": compacted.as_dict(),
        "digest_summaries": summaries.as_dict(),
        **expired.as_dict(),
        "maintenance": maintenance,
        "meta_file_rewrite_s": None if rewrite_s is None else round(rewrite_s, 3),
        "changed_tables": sorted(changed),
        "seconds": {
            "access_log": round(t1 - t0, 3),
            "compaction": round(t2 - t1, 3),
            "expiry": round(t3 - t2, 3),
            "maintenance": round(t4 - t3, 3),
        },
        "duration_s": round(t4 - t0, 3),
    }
    _store(stores, ctx, "expire", receipt, None)
    logger.info(
        "forgetting run=%s expired=%s deleted=%s digests=%d", ctx.run_id, expired.expired,
        expired.deleted, compacted.digests,
    )  # fmt: skip
    return receipt


def end_purpose(
    stores: Stores, settings: Settings, ctx: RunContext, purpose: str, *, tenant_id: str | None
) -> dict[str, Any]:
    """End a purpose: its records stop being served now and are deleted after the grace."""
    t0 = time.perf_counter()
    request_id = fstore.enqueue_request(
        stores.meta, kind="purpose", target=purpose, tenant_id=tenant_id, now=ctx.now
    )
    expired: dict[str, int] = {}
    existing = set(stores.lance.table_names())
    where = f"status = 'active' AND recorded_to IS NULL AND purpose = {sql_quote(purpose)}"
    if tenant_id is not None:
        where += f" AND tenant_id = {sql_quote(tenant_id)}"
    for name in TABLES:
        if name not in existing:
            continue
        change = InPlace(name, where, was=("active",), to="expired", values={"expires_at": ctx.now})
        count = write_status(stores, change, at=ctx.now, run_id=ctx.run_id, actor=ctx.actor).rows
        if count:
            expired[name] = count
    receipt = {
        "receipt_id": receipt_id("end_purpose", request_id),
        "kind": "end_purpose",
        "purpose": purpose,
        "tenant_id": tenant_id,
        "request_id": request_id,
        "at": ctx.now.isoformat(),
        "run_id": ctx.run_id,
        "expired": expired,
        "hard_delete_after_days": settings.forget.grace_days,
        "duration_s": round(time.perf_counter() - t0, 3),
    }
    _store(stores, ctx, "end_purpose", receipt, purpose, tenant_id)
    with stores.meta.transaction() as con:
        fstore.finish_request(
            con, request_id, status="done", done_at=ctx.now, receipt_id=receipt["receipt_id"]
        )
    return receipt


def request_deletion(
    stores: Stores, ctx: RunContext, *, kind: str, target: str, tenant_id: str | None = None
) -> str:
    """Queue a user deletion (kind ``subject`` or ``episode``) for the deletion-requests flow."""
    if kind not in USER_DELETIONS:
        msg = f"deletion kind must be subject or episode, not {kind!r}"
        raise ValueError(msg)
    return fstore.enqueue_request(
        stores.meta, kind=kind, target=target, tenant_id=tenant_id, now=ctx.now
    )


def _target(request: fstore.DeletionRequest) -> Target:
    if request.kind == "subject":
        return Target(subject_id=request.target, tenant_id=request.tenant_id)
    return Target(episode_id=request.target, tenant_id=request.tenant_id)


def carry_out_request(
    stores: Stores,
    settings: Settings,
    ctx: RunContext,
    request_id: str,
    *,
    embedder: Embedder | None = None,
    orchestrator: Orchestrator | None = None,
) -> dict[str, Any]:
    """Carry out one queued user deletion; its receipt, or ``{"request_id", "skipped": True}``
    when the request is gone, done or not a user deletion (a retried or rerun step after the
    receipt was written does nothing)."""
    request = fstore.get_request(stores.meta, request_id)
    if request is None or request.status != "pending" or request.kind not in USER_DELETIONS:
        return {"request_id": request_id, "skipped": True}
    return forget(stores, settings, ctx, _target(request), embedder=embedder,
                  request_id=request_id, orchestrator=orchestrator)  # fmt: skip


def process_deletion_requests(
    stores: Stores,
    settings: Settings,
    ctx: RunContext,
    *,
    embedder: Embedder | None = None,
    limit: int = 100,
    orchestrator: Orchestrator | None = None,
    carry_out: Callable[[str], dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Carry out queued user deletions, oldest first, one at a time; one receipt each.

    The one deletion loop: ``carry_out(request_id)`` does one request (default
    :func:`carry_out_request` here; the ``deletion-requests`` flow passes a Prefect task that
    calls it). One at a time because each deletion purges old Lance versions, which must not
    race another purge."""
    if carry_out is None:

        def carry_out(request_id: str) -> dict[str, Any]:
            return carry_out_request(stores, settings, ctx, request_id, embedder=embedder,
                                     orchestrator=orchestrator)  # fmt: skip

    return [
        carry_out(request.request_id)
        for request in fstore.pending_requests(stores.meta, limit=limit)
        if request.kind in USER_DELETIONS
    ]


def forget_subject(
    stores: Stores,
    settings: Settings,
    ctx: RunContext,
    subject_id: str,
    *,
    tenant_id: str | None = None,
    embedder: Embedder | None = None,
    orchestrator: Orchestrator | None = None,
) -> dict[str, Any]:
    """Delete a subject everywhere now (queued and carried out at once); the receipt."""
    request_id = request_deletion(
        stores, ctx, kind="subject", target=subject_id, tenant_id=tenant_id
    )
    target = Target(subject_id=subject_id, tenant_id=tenant_id)
    return forget(stores, settings, ctx, target, embedder=embedder, request_id=request_id,
                  orchestrator=orchestrator)  # fmt: skip


def forget_episode(
    stores: Stores,
    settings: Settings,
    ctx: RunContext,
    episode_id: str,
    *,
    tenant_id: str | None = None,
    embedder: Embedder | None = None,
    orchestrator: Orchestrator | None = None,
) -> dict[str, Any]:
    """Delete one episode everywhere (and take it out of what was derived from it)."""
    where = f"episode_id = {sql_quote(episode_id)}"
    if "episodes" not in stores.lance.table_names() or not stores.lance.count("episodes", where):
        what = "episode"
        raise NotFound(what, episode_id, "list episodes with `memctl status`")
    request_id = request_deletion(
        stores, ctx, kind="episode", target=episode_id, tenant_id=tenant_id
    )
    target = Target(episode_id=episode_id, tenant_id=tenant_id)
    return forget(stores, settings, ctx, target, embedder=embedder, request_id=request_id,
                  orchestrator=orchestrator)  # fmt: skip
