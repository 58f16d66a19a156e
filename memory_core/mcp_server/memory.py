"""What the MCP tools do, as plain library calls over the stores (no MCP types here).

``MemoryService`` holds one long-lived ``Recaller`` (the read path agents embed), the Lance
store saves append to, and the DuckDB control plane that only deletion requests touch. Every
call takes the caller's ``Binding`` first: the tenant comes from it, never from an argument.

Reads never open DuckDB, so a running nightly flow never blocks them (invariant 9); saves do
not either (save.py). ``memory_forget_me`` and ``memory_deletion_status`` must read and write
deletion requests, which live in DuckDB: they wait up to ``stores.lock_timeout_s`` for the
file and then fail with a message saying to retry.

A store that cannot be read raises ``MemoryUnavailable`` ("memory unavailable at ..."), never
an empty answer: an agent must not take an outage for "nothing remembered".
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from memory_core.config import Settings
from memory_core.embed import Embedder, make_embedder
from memory_core.errors import MemoryUnavailable, StoreError
from memory_core.mcp_server.auth import Binding
from memory_core.mcp_server.save import AuditSpool, episode_id_for, save_episodes
from memory_core.read.canary import in_canary
from memory_core.read.filters import FilterSpec, MemoryType, compile_where
from memory_core.read.pack import apply_procedure_rules, display_text, estimate_tokens, to_record
from memory_core.read.rank import Candidate
from memory_core.recall import Recaller
from memory_core.stores.lance import LanceStore
from memory_core.stores.schemas import ID_COLUMN

__all__ = ["ArgumentError", "MemoryService"]

logger = logging.getLogger(__name__)


class ArgumentError(ValueError):
    """A tool argument out of range or malformed; the message names the argument."""


def _local_dir(uri: str) -> Path | None:
    if "://" not in uri:
        return Path(uri)
    return Path(uri[len("file://") :]) if uri.startswith("file://") else None


class MemoryService:
    """The memory tools over one home; thread-safe (tools run on worker threads)."""

    def __init__(
        self,
        settings: Settings,
        *,
        embedder: Embedder | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.settings = settings
        self.config = settings.mcp
        self.embedder = embedder or make_embedder(settings.embed)
        self.clock = clock or (lambda: datetime.now(UTC))
        self.audit = AuditSpool(settings.meta_path)
        self._recaller: Recaller | None = None
        self._lance: LanceStore | None = None
        self._guard = threading.Lock()
        self._save_lock = threading.Lock()  # check-then-append of episode ids, one at a time
        self._since_refresh = 0
        self._refresher: threading.Thread | None = None

    # -- stores, opened on first use so a missing store is an error per call -----------------

    def _check_home(self) -> None:
        local = _local_dir(self.settings.lance_uri)
        if local is not None and not local.is_dir():
            raise MemoryUnavailable(
                self.settings.lance_uri, "no Lance database here; run `memctl init` or check --home"
            )

    def recaller(self) -> Recaller:
        with self._guard:
            if self._recaller is None:
                self._check_home()
                self._recaller = Recaller.from_settings(self.settings, embedder=self.embedder)
            return self._recaller

    def lance(self) -> LanceStore:
        with self._guard:
            if self._lance is None:
                self._check_home()
                self._lance = LanceStore(
                    self.settings.lance_uri, storage_options=self.settings.stores.storage_options
                )
            return self._lance

    def close(self) -> None:
        if self._refresher is not None:
            self._refresher.join(timeout=30)
        self.audit.close()
        if self._recaller is not None:
            self._recaller.close()

    # -- argument checks ----------------------------------------------------------------------

    def _bounded(self, name: str, value: int | None, limit: int) -> int | None:
        if value is not None and not 1 <= value <= limit:
            msg = f"{name} must be between 1 and {limit}, got {value}"
            raise ArgumentError(msg)
        return value

    @staticmethod
    def _when(name: str, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            msg = f"{name} {value.isoformat()} has no timezone offset (add Z or +00:00)"
            raise ArgumentError(msg)
        return value.astimezone(UTC)

    def _spec(
        self,
        binding: Binding,
        subject_id: str | None,
        *,
        as_of: datetime | None = None,
        known_at: datetime | None = None,
        namespace: str | None = None,
    ) -> FilterSpec:
        return FilterSpec(
            tenant_id=binding.tenant_id,
            subject_id=binding.subject(subject_id),
            now=self.clock(),
            as_of=self._when("as_of", as_of),
            known_at=self._when("known_at", known_at),
            sensitivity=frozenset(self.settings.recall.allowed_sensitivity),
            namespace=namespace,
        )

    # -- tools --------------------------------------------------------------------------------

    def recall(
        self,
        binding: Binding,
        query: str,
        *,
        subject_id: str | None = None,
        memory_type: MemoryType | None = None,
        k: int | None = None,
        budget_tokens: int | None = None,
        as_of: datetime | None = None,
        state: Mapping[str, str] | None = None,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        """The read path as it is: hard filters, hybrid search, ranking, packing, access log."""
        self._bounded("k", k, self.config.max_k)
        self._bounded("budget_tokens", budget_tokens, self.config.max_budget_tokens)
        result = self.recaller().recall(
            query,
            tenant_id=binding.tenant_id,
            subject_id=binding.subject(subject_id),
            memory_type=memory_type,
            as_of=self._when("as_of", as_of),
            now=self.clock(),
            k=k,
            state=dict(state or {}),
            budget_tokens=budget_tokens,
            namespace=namespace,
        )
        qr = result.query_record
        return {
            "records": result.records,
            "count": len(result.records),
            "used_tokens": qr.get("used_tokens"),
            "budget_tokens": qr.get("budget_tokens"),
            "query_record": qr,
        }

    def _scan(self, table: str, where: str) -> list[dict[str, Any]]:
        store = self.lance()
        try:
            names = [n for n in store.table(table).schema.names if n != "vector"]
            return store.scan(table, where=where, columns=names).to_pylist()
        except MemoryUnavailable:
            raise
        except StoreError as exc:
            raise MemoryUnavailable(store.uri, str(exc)) from exc
        except (OSError, RuntimeError, pa.ArrowException) as exc:
            raise MemoryUnavailable(store.uri, f"reading {table} failed: {exc}") from exc

    def _records(self, table: str, rows: list[Candidate], reason: str) -> list[dict[str, Any]]:
        cpt = self.settings.recall.chars_per_token
        out = []
        for cand in rows:
            cand.reason = reason
            cand.row["_tokens"] = estimate_tokens(display_text(table, cand.row), cpt)
            out.append(to_record(cand, _TYPE[table]))
        return out

    def facts(
        self,
        binding: Binding,
        *,
        subject_id: str | None = None,
        as_of: datetime | None = None,
        known_at: datetime | None = None,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        """Current facts of the caller's scope (its subject's and the tenant's), as of a time."""
        spec = self._spec(binding, subject_id, as_of=as_of, known_at=known_at, namespace=namespace)
        where = compile_where(spec, "facts")
        rows = self._scan("facts", where)
        rows.sort(key=lambda r: (r.get("subject_id") or "", r["predicate"], r["fact_id"]))
        cands = [Candidate("facts", r["fact_id"], r) for r in rows]
        records = self._records("facts", cands, "fact in scope")
        return {
            "records": records,
            "count": len(records),
            "tokens": sum(r["tokens"] for r in records),
            "query_record": _query_record(spec, "facts", where, len(rows), []),
        }

    def procedures(
        self,
        binding: Binding,
        *,
        state: Mapping[str, str] | None = None,
        subject_id: str | None = None,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        """Approved procedures of the scope whose preconditions hold in ``state``, latest only."""
        spec = self._spec(binding, subject_id, namespace=namespace)
        where = compile_where(spec, "procedures")
        rows = self._scan("procedures", where)
        cands = [Candidate("procedures", r[ID_COLUMN["procedures"]], r) for r in rows]
        cohort = in_canary(spec.tenant_id, spec.subject_id, self.settings.staleness.canary_fraction)
        kept, dropped = apply_procedure_rules(cands, dict(state or {}), canary=cohort)
        kept.sort(key=lambda c: (c.row["name"], c.record_id))
        records = self._records("procedures", kept, "preconditions hold in the stated state")
        left_out = [{"record_id": c.record_id, "reason": why} for c, why in dropped]
        return {
            "records": records,
            "count": len(records),
            "tokens": sum(r["tokens"] for r in records),
            "query_record": _query_record(spec, "procedures", where, len(rows), left_out),
        }

    def save(
        self,
        binding: Binding,
        fields: dict[str, Any],
        *,
        key: str | None = None,
        source_role: str = "agent",
        messages: list[dict[str, Any]] | None = None,
        message_format: str = "openai-chat",
    ) -> dict[str, Any]:
        """Append tentative experience: one episode from text, or a conversation's episodes
        (the transcript adapters: one per message plus the trajectory of its tool calls).

        The caller's scope and allowed roles decide who it is: a message whose role the
        caller may not save as (a user's words relayed by an agent) is stored as the
        caller's own report (``agent``), without the user's authority.
        """
        if source_role not in binding.save_roles:
            allowed = ", ".join(sorted(binding.save_roles))
            msg = f"source_role {source_role!r} is not allowed for this caller (allowed: {allowed})"
            raise ArgumentError(msg)
        subject = binding.subject(fields.pop("subject_id", None), required=True)
        assert subject is not None
        now = self.clock()
        record = {k: v for k, v in fields.items() if v not in (None, [], {})}
        record.setdefault("occurred_at", now.isoformat())
        record.update(tenant_id=binding.tenant_id, subject_id=subject, source_role=source_role)
        downgraded = 0
        if messages is None:
            record["episode_id"] = episode_id_for(binding.tenant_id, subject, key, record)
            records = [record]
        else:
            records, downgraded = self._conversation(binding, record, messages, message_format, key)
        lance = self.lance()
        with self._save_lock:
            result = save_episodes(
                lance, self.embedder, records, now=now, client=binding.client,
                retries=self.config.save_retries, embed_now=self.settings.embed.at_ingest,
            )  # fmt: skip
            self._since_refresh += result.inserted > 0
            refresh = 0 < self.config.index_every <= self._since_refresh
            if refresh and (self._refresher is None or not self._refresher.is_alive()):
                self._since_refresh = 0
                self._refresher = threading.Thread(
                    target=self._refresh_indices, name="memctl-mcp-index", daemon=True
                )
                self._refresher.start()
        self.audit.add(client=binding.client, tenant_id=binding.tenant_id, result=result, at=now)
        roles = sorted({r["source_role"] for r in records})
        return {
            **result.as_dict(), "source_roles": roles, "roles_downgraded": downgraded,
            "written_via": "mcp",
        }  # fmt: skip

    def _conversation(
        self,
        binding: Binding,
        record: dict[str, Any],
        messages: list[dict[str, Any]],
        message_format: str,
        key: str | None,
    ) -> tuple[list[dict[str, Any]], int]:
        from memory_core.models import stable_id
        from memory_core.transcripts import TranscriptError, TranscriptFormat, adapt_session

        try:
            fmt = TranscriptFormat(message_format)
        except ValueError:
            fmt = None
        if fmt is None or fmt is TranscriptFormat.episodes:
            msg = f"format {message_format!r} must be openai-chat or anthropic-messages"
            raise ArgumentError(msg)
        tenant, subject = record["tenant_id"], record["subject_id"]
        session = record.get("session_id") or stable_id(
            "mcps", tenant, subject, key if key is not None else messages
        )
        line: dict[str, Any] = {
            "session_id": session, "tenant_id": tenant, "subject_id": subject,
            "namespace": record.get("namespace", "default"),
            "started_at": record["occurred_at"], "messages": messages,
        }  # fmt: skip
        for name in ("outcome", "conditions", "sensitivity", "purpose", "expires_at"):
            if record.get(name) not in (None, {}, "unknown"):
                line[name] = record[name]
        try:
            adapted = adapt_session(1, line, fmt)
        except TranscriptError as exc:
            msg = f"messages: {exc.error.field}: {exc.error.reason}"
            raise ArgumentError(msg) from exc
        out, downgraded = [], 0
        for episode in adapted.episodes:
            if episode["source_role"] not in binding.save_roles:
                episode["source_role"] = record["source_role"]
                downgraded += 1
            # the adapter's ids are per (tenant, session): scope them to the caller's subject
            episode["episode_id"] = stable_id("mcp", tenant, subject, episode["episode_id"])
            for name in ("goal", "actions", "observations", "feedback"):
                if record.get(name) and episode is adapted.trajectory:
                    episode[name] = record[name]
            out.append(episode)
        return out, downgraded

    def _refresh_indices(self) -> None:
        """Fold appended episodes into the table's indices, off every save's path.

        Each save is one small fragment; without an index over it, every id check (and every
        episodic recall) scans it: bench/mcp.py measured the check growing from 14 to 75 ms
        over 500 saves, and to 17 ms with a refresh every 50 (~60 ms each, no data rewritten).
        A failure (a conflicting commit of the pipeline, say) is logged and retried later.
        """
        from memory_core.read.indexes import refresh_indices

        try:
            refresh_indices(self.lance().table("episodes"))
        except Exception as exc:  # background upkeep: never the caller's error
            logger.warning("mcp: index refresh of episodes failed (retried later): %s", exc)

    def _meta(self) -> Any:
        from memory_core.stores import open_stores

        if not self.settings.meta_path.exists():
            raise MemoryUnavailable(
                str(self.settings.meta_path), "no control plane here; run `memctl init`"
            )
        return open_stores(self.settings)

    def forget_me(self, binding: Binding, *, subject_id: str | None = None) -> dict[str, Any]:
        """File a deletion request for the subject; the deletion schedule carries it out."""
        from memory_core.context import RunContext
        from memory_core.stages.forget import request_deletion

        subject = binding.subject(subject_id, required=True)
        assert subject is not None
        stores = self._meta()
        ctx = RunContext(now=self.clock(), actor=f"mcp:{binding.client}")
        request_id = request_deletion(
            stores, ctx, kind="subject", target=subject, tenant_id=binding.tenant_id
        )
        return {
            "request_id": request_id,
            "status": "pending",
            "kind": "subject",
            "note": "the deletion-requests schedule carries it out; ask memory_deletion_status",
        }

    def deletion_status(self, binding: Binding, request_id: str) -> dict[str, Any]:
        """A deletion request of the caller's scope, with its receipt once done."""
        from memory_core.stores.forgetting import get_request, subject_hash

        stores = self._meta()
        request = get_request(stores.meta, request_id)
        mine = request is not None and request.tenant_id == binding.tenant_id
        if mine and binding.subject_id is not None:
            names = {binding.subject_id, subject_hash(binding.tenant_id, binding.subject_id)}
            mine = request.kind == "subject" and request.target in names
        if request is None or not mine:
            msg = f"request_id {request_id!r}: no such deletion request in this caller's scope"
            raise ArgumentError(msg)
        receipt = None
        if request.receipt_id:
            with stores.meta.connect() as con:
                row = con.execute(
                    "SELECT body FROM receipts WHERE receipt_id = ?", [request.receipt_id]
                ).fetchall()
            receipt = json.loads(row[0][0]) if row else None
        return {
            "request_id": request.request_id,
            "kind": request.kind,
            "status": request.status,
            "requested_at": request.requested_at.isoformat(),
            "receipt_id": request.receipt_id,
            "receipt": receipt,
        }


_TYPE = {"facts": MemoryType.semantic.value, "procedures": MemoryType.procedural.value}


def _query_record(
    spec: FilterSpec, table: str, where: str, matched: int, left_out: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "tenant_id": spec.tenant_id,
        "subject_id": spec.subject_id,
        "table": table,
        "now": spec.now.isoformat(),
        "as_of": spec.as_of.isoformat() if spec.as_of else None,
        "known_at": spec.known_at.isoformat() if spec.known_at else None,
        "statuses": list(spec.statuses()),
        "where": where,
        "matched": matched,
        "left_out": left_out,
    }
