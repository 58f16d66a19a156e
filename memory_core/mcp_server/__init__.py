"""The memory server for agents over MCP (``memctl mcp``): recall, save, facts, procedures,
forget-me, scoped per tenant and never blocked by the pipeline.

Modules: ``auth`` (bindings, hashed bearer tokens), ``memory`` (the tools as library calls),
``save`` (one episode through ingest's gate into Lance, audit off the save's path), ``tools``
(MCP tool and resource definitions), ``server`` (stdio and Streamable HTTP).
"""

from memory_core.mcp_server.auth import ALL_TOOLS, Binding, TokenTable, hash_token, new_token
from memory_core.mcp_server.memory import MemoryService
from memory_core.mcp_server.server import (
    build_http_server,
    build_stdio_server,
    run_http,
    run_stdio,
)

__all__ = [
    "ALL_TOOLS",
    "Binding",
    "MemoryService",
    "TokenTable",
    "build_http_server",
    "build_stdio_server",
    "hash_token",
    "new_token",
    "run_http",
    "run_stdio",
]
