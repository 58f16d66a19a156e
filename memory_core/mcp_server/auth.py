"""Who is calling: a server bound to one tenant (stdio) or bearer tokens mapped to a scope (HTTP).

A caller's scope is a ``Binding``: the tenant it reaches, the subject it is bound to (if any),
the tools it may call and the roles its saves may carry. Tool arguments never widen it: a
tenant is never an argument at all, and a subject argument must be the bound subject.

Tokens live in config as the hex SHA-256 of the token (``[[mcp.tokens]]``), never the token
itself; ``TokenTable.verify_token`` hashes what a caller presents and compares in constant time,
so a leaked config file does not leak a working token.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from mcp.server.auth.provider import AccessToken

from memory_core.config import McpConfig, McpToken

__all__ = [
    "ALL_TOOLS",
    "Binding",
    "ScopeRefused",
    "TokenTable",
    "hash_token",
    "new_token",
]

ALL_TOOLS = (
    "memory_recall",
    "memory_save",
    "memory_facts",
    "memory_procedures",
    "memory_forget_me",
    "memory_deletion_status",
)


class ScopeRefused(Exception):
    """A call outside the caller's scope (another subject, a tool it may not use)."""


@dataclass(frozen=True)
class Binding:
    """The scope one caller acts in; every tool call is checked against it."""

    tenant_id: str
    subject_id: str | None = None
    tools: frozenset[str] = frozenset(ALL_TOOLS)
    save_roles: frozenset[str] = frozenset({"agent", "tool"})
    client: str = "stdio"

    def __post_init__(self) -> None:
        if not self.tenant_id:
            msg = "an MCP server is bound to one tenant: pass --tenant T or set mcp.tenant"
            raise ValueError(msg)
        unknown = sorted(self.tools - set(ALL_TOOLS))
        if unknown:
            msg = f"unknown tool(s) {', '.join(unknown)}; tools are {', '.join(ALL_TOOLS)}"
            raise ValueError(msg)

    @classmethod
    def from_token(cls, token: McpToken) -> Binding:
        return cls(
            tenant_id=token.tenant,
            subject_id=token.subject,
            tools=frozenset(token.tools or ALL_TOOLS),
            save_roles=frozenset(token.save_roles),
            client=token.name,
        )

    def allow(self, tool: str) -> None:
        if tool not in self.tools:
            msg = f"tool {tool} is not allowed for this caller ({self.client})"
            raise ScopeRefused(msg)

    def subject(self, asked: str | None, *, required: bool = False) -> str | None:
        """The subject a call acts for: the bound one, or the one asked when unbound."""
        if self.subject_id is not None:
            if asked is not None and asked != self.subject_id:
                msg = "subject_id: this caller is bound to another subject"
                raise ScopeRefused(msg)
            return self.subject_id
        if required and not asked:
            msg = "subject_id is required"
            raise ScopeRefused(msg)
        return asked


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> tuple[str, str]:
    """A fresh random bearer token and its hash (the hash goes into config)."""
    token = "mcm_" + secrets.token_urlsafe(32)
    return token, hash_token(token)


class TokenTable:
    """The SDK's ``TokenVerifier``: a presented token -> an ``AccessToken`` naming its binding."""

    def __init__(self, tokens: Iterable[McpToken]) -> None:
        self._tokens = list(tokens)
        self.bindings = {t.sha256: Binding.from_token(t) for t in self._tokens}

    @classmethod
    def from_config(cls, config: McpConfig) -> TokenTable:
        return cls(config.tokens)

    def lookup(self, token: str) -> tuple[str, Binding] | None:
        digest = hash_token(token)
        for known, binding in self.bindings.items():
            if hmac.compare_digest(known, digest):
                return known, binding
        return None

    async def verify_token(self, token: str) -> AccessToken | None:
        found = self.lookup(token)
        if found is None:
            return None
        digest, binding = found
        # client_id carries the hash, not the token: it is what ``binding_for`` looks up.
        return AccessToken(
            token="", client_id=digest, scopes=["memory"], subject=binding.subject_id
        )
