"""The MCP tools and resources: typed arguments in, ``MemoryService`` calls, errors as one line.

Each tool's input schema comes from its type hints (the SDK builds it); annotations say which
tools only read (``readOnlyHint``) and which destroy (``destructiveHint``). Expected failures
(bad arguments, a scope violation, the store missing) become ``ToolError`` with a one-line
message, so the caller gets ``is_error`` and a reason, never a traceback.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from memory_core.errors import MemoryCoreError
from memory_core.mcp_server.auth import Binding, ScopeRefused
from memory_core.mcp_server.memory import ArgumentError, MemoryService
from memory_core.read.filters import MemoryType

__all__ = ["register_tools"]

logger = logging.getLogger(__name__)

BindingResolver = Callable[[Context | None], Binding]

_READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
_APPEND = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
_DESTROY = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)

Subject = Annotated[
    str | None,
    Field(
        default=None,
        min_length=1,
        max_length=200,
        description="the user the memory is about; a caller bound to a subject may omit it",
    ),
]
Namespace = Annotated[
    str | None, Field(default=None, min_length=1, max_length=200, description="only this one")
]
AsOf = Annotated[
    datetime | None,
    Field(default=None, description="valid time to answer for, RFC3339 with offset"),
]
State = Annotated[
    dict[str, Annotated[str, Field(max_length=500)]] | None,
    Field(
        default=None,
        max_length=50,
        description='what the caller knows of its environment, e.g. {"os": "win11"}; '
        "procedures apply only when all their preconditions hold in it",
    ),
]


def _guard(tool: str, resolve: BindingResolver, ctx: Context | None) -> Binding:
    binding = resolve(ctx)
    try:
        binding.allow(tool)
    except ScopeRefused as exc:
        raise ToolError(str(exc)) from exc
    return binding


def _result(payload: dict[str, Any]) -> CallToolResult:
    """Structured content: everything (query record included), for the calling program; the
    text a model reads: the same without the query record, compact, so the record of how
    every candidate was decided does not spend the agent's context."""
    text = {k: v for k, v in payload.items() if k != "query_record"}
    return CallToolResult(
        content=[
            TextContent(type="text", text=json.dumps(text, separators=(",", ":"), default=str))
        ],
        structured_content=payload,
    )


def _call(tool: str, fn: Callable[[], dict[str, Any]]) -> CallToolResult:
    try:
        return _result(fn())
    except (ArgumentError, ScopeRefused, MemoryCoreError) as exc:
        msg = str(exc)
        raise ToolError(msg) from exc
    except ValueError as exc:  # a bad value the read path refused (it names the argument)
        msg = str(exc)
        raise ToolError(msg) from exc


def register_tools(server: MCPServer, service: MemoryService, resolve: BindingResolver) -> None:
    """Add the six memory tools and the facts/procedures resources to ``server``."""

    @server.tool(name="memory_recall", annotations=_READ)
    def memory_recall(
        query: Annotated[str, Field(max_length=4000, description="what to remember")],
        subject_id: Subject = None,
        type: Annotated[
            Literal["episodic", "semantic", "procedural"] | None,
            Field(default=None, description="one memory class; all when absent"),
        ] = None,
        k: Annotated[int | None, Field(default=None, description="at most this many")] = None,
        budget_tokens: Annotated[
            int | None, Field(default=None, description="token budget of the results")
        ] = None,
        as_of: AsOf = None,
        state: State = None,
        namespace: Namespace = None,
        ctx: Context | None = None,
    ) -> CallToolResult:
        """Recall memories for the caller's tenant (and subject): hard filters first, then
        hybrid search, ranking and packing into the token budget. Each record has a score,
        a reason and its token count; query_record says how every candidate was decided."""
        binding = _guard("memory_recall", resolve, ctx)
        return _call(
            "memory_recall",
            lambda: service.recall(
                binding, query, subject_id=subject_id,
                memory_type=MemoryType(type) if type else None, k=k,
                budget_tokens=budget_tokens, as_of=as_of, state=state, namespace=namespace,
            ),
        )  # fmt: skip

    @server.tool(name="memory_save", annotations=_APPEND)
    def memory_save(
        text: Annotated[
            str | None, Field(default=None, max_length=100_000, description="what happened")
        ] = None,
        messages: Annotated[
            list[dict[str, Any]] | None,
            Field(
                default=None,
                max_length=500,
                description="a conversation instead of text, in the provider's own message "
                "shape (see format); tool calls included",
            ),
        ] = None,
        format: Annotated[  # the contract's word for the transcript shape
            Literal["openai-chat", "anthropic-messages"],
            Field(description="shape of messages"),
        ] = "openai-chat",
        subject_id: Subject = None,
        goal: Annotated[str | None, Field(default=None, max_length=4000)] = None,
        actions: Annotated[
            list[str | dict[str, Any]] | None,
            Field(default=None, max_length=200, description='steps: text or {"tool", "args"}'),
        ] = None,
        outcome: Literal["success", "failure", "partial", "unknown"] = "unknown",
        conditions: Annotated[
            dict[str, str] | None, Field(default=None, description="environment facts")
        ] = None,
        observations: Annotated[list[str] | None, Field(default=None, max_length=500)] = None,
        feedback: Annotated[str | None, Field(default=None, max_length=4000)] = None,
        occurred_at: Annotated[
            datetime | None, Field(default=None, description="when it happened; now if absent")
        ] = None,
        session_id: Annotated[str | None, Field(default=None, max_length=200)] = None,
        namespace: Annotated[str, Field(min_length=1, max_length=200)] = "default",
        source_role: Annotated[
            Literal["agent", "tool", "user"],
            Field(description="who is speaking; 'user' only if this caller may relay users"),
        ] = "agent",
        sensitivity: Literal["low", "medium", "high"] = "low",
        purpose: Annotated[str | None, Field(default=None, max_length=200)] = None,
        key: Annotated[
            str | None,
            Field(
                default=None,
                min_length=1,
                max_length=200,
                description="your idempotency key: the same key saves once",
            ),
        ] = None,
        ctx: Context | None = None,
    ) -> CallToolResult:
        """Save one episode of experience. It is tentative: the nightly run may learn from it,
        it never becomes a fact by being saved. Validated, redacted and gated like
        `memctl ingest`; an agent's words never carry the user's authority."""
        binding = _guard("memory_save", resolve, ctx)

        def run() -> dict[str, Any]:
            if (text is None) == (messages is None):
                msg = "give exactly one of text or messages"
                raise ArgumentError(msg)
            fields: dict[str, Any] = {
                "text": text, "subject_id": subject_id, "goal": goal,
                "actions": actions or [], "outcome": outcome, "conditions": conditions or {},
                "observations": observations or [], "feedback": feedback,
                "occurred_at": occurred_at.isoformat() if occurred_at else None,
                "session_id": session_id, "namespace": namespace, "sensitivity": sensitivity,
                "purpose": purpose,
            }  # fmt: skip
            return service.save(
                binding, fields, key=key, source_role=source_role, messages=messages,
                message_format=format,
            )  # fmt: skip

        return _call("memory_save", run)

    @server.tool(name="memory_facts", annotations=_READ)
    def memory_facts(
        subject_id: Subject = None,
        as_of: AsOf = None,
        known_at: Annotated[
            datetime | None,
            Field(default=None, description="what was recorded then (transaction time)"),
        ] = None,
        namespace: Namespace = None,
        ctx: Context | None = None,
    ) -> CallToolResult:
        """Current facts of the caller's subject and tenant, valid at as_of, known at known_at."""
        binding = _guard("memory_facts", resolve, ctx)
        return _call(
            "memory_facts",
            lambda: service.facts(
                binding, subject_id=subject_id, as_of=as_of, known_at=known_at,
                namespace=namespace,
            ),
        )  # fmt: skip

    @server.tool(name="memory_procedures", annotations=_READ)
    def memory_procedures(
        state: State = None,
        subject_id: Subject = None,
        namespace: Namespace = None,
        ctx: Context | None = None,
    ) -> CallToolResult:
        """Human-approved procedures whose preconditions all hold in the stated state, each in
        its latest version; query_record.left_out says why the others are not served."""
        binding = _guard("memory_procedures", resolve, ctx)
        return _call(
            "memory_procedures",
            lambda: service.procedures(
                binding, state=state, subject_id=subject_id, namespace=namespace
            ),
        )

    @server.tool(name="memory_forget_me", annotations=_DESTROY)
    def memory_forget_me(subject_id: Subject = None, ctx: Context | None = None) -> CallToolResult:
        """Ask that everything about the subject be deleted: files a deletion request that the
        deletion schedule carries out, with a receipt. Returns the request id."""
        binding = _guard("memory_forget_me", resolve, ctx)
        return _call("memory_forget_me", lambda: service.forget_me(binding, subject_id=subject_id))

    @server.tool(name="memory_deletion_status", annotations=_READ)
    def memory_deletion_status(
        request_id: Annotated[str, Field(min_length=1, max_length=200)],
        ctx: Context | None = None,
    ) -> CallToolResult:
        """Where a deletion request stands (pending, done, unverified) and its receipt."""
        binding = _guard("memory_deletion_status", resolve, ctx)
        return _call("memory_deletion_status", lambda: service.deletion_status(binding, request_id))

    @server.resource(
        "memory://facts/{namespace}", name="facts", mime_type="application/json",
        description="current facts of the caller's scope in a namespace",
    )  # fmt: skip
    def facts_resource(namespace: str, ctx: Context | None = None) -> str:
        binding = _guard("memory_facts", resolve, ctx)
        try:
            return json.dumps(service.facts(binding, namespace=namespace)["records"], default=str)
        except (ArgumentError, ScopeRefused, MemoryCoreError, ValueError) as exc:
            raise ResourceError(str(exc)) from exc

    @server.resource(
        "memory://procedures/{namespace}", name="procedures", mime_type="application/json",
        description="approved procedures of the caller's scope in a namespace (no state)",
    )  # fmt: skip
    def procedures_resource(namespace: str, ctx: Context | None = None) -> str:
        binding = _guard("memory_procedures", resolve, ctx)
        try:
            result = service.procedures(binding, namespace=namespace)
            return json.dumps(result["records"], default=str)
        except (ArgumentError, ScopeRefused, MemoryCoreError, ValueError) as exc:
            raise ResourceError(str(exc)) from exc
