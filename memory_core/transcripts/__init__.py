"""Transcript adapters: chat logs in a provider's own shape -> episodes of the v1 contract.

``memctl ingest FILE --from openai-chat | anthropic-messages`` reads one session per line;
:func:`adapt_line` turns a line into per-message episodes plus one trajectory episode when the
agent called tools (``session.py`` has the rules, ``openai_chat.py`` and
``anthropic_messages.py`` the provider shapes), and ``ingest.ingest_transcripts`` sends them
through the ordinary write path (validation, gate, redaction, idempotency, quarantine).
Adapters never write stores themselves.

Examples
--------
>>> line = {"session_id": "s1", "tenant_id": "acme", "subject_id": "ada",
...         "started_at": "2026-03-01T09:00:00Z", "outcome": "success", "messages": [
...     {"role": "user", "content": "Cancel order 42"},
...     {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
...         "function": {"name": "cancel_order", "arguments": "{\\"order_id\\": 42}"}}]},
...     {"role": "tool", "tool_call_id": "c1", "content": "cancelled"}]}
>>> import json
>>> adapted = adapt_line(1, json.dumps(line), TranscriptFormat.openai_chat)
>>> [e["source_role"] for e in adapted.episodes]
['user', 'agent', 'tool', 'agent']
>>> adapted.trajectory["goal"], adapted.trajectory["actions"], adapted.trajectory["outcome"]
('Cancel order 42', [{'tool': 'cancel_order', 'args': {'order_id': 42}}], 'success')
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any

from memory_core.errors import FieldError
from memory_core.transcripts.anthropic_messages import anthropic_parts
from memory_core.transcripts.openai_chat import openai_parts
from memory_core.transcripts.session import (
    Adapted,
    Bad,
    TranscriptError,
    build_episodes,
    parse_header,
    parse_json_line,
)

__all__ = ["Adapted", "TranscriptError", "TranscriptFormat", "adapt_line", "adapt_session"]


class TranscriptFormat(StrEnum):
    """What one input line is: an episode (contract v1) or a session in a provider's shape."""

    episodes = "episodes"
    openai_chat = "openai-chat"
    anthropic_messages = "anthropic-messages"


def adapt_session(
    number: int,
    line: Any,
    fmt: TranscriptFormat,
    *,
    enrich: Callable[[dict[str, Any]], None] | None = None,
) -> Adapted:
    """Episodes of one parsed session line (``number`` names it in errors).

    ``enrich`` may add fields (conditions, observations, text) to the trajectory episode
    before it is returned: the tau-bench evaluation's digests of tool results, for example.
    Raises :class:`TranscriptError` (line, field with the message index, reason).
    """
    try:
        if fmt is TranscriptFormat.openai_chat:
            header = parse_header(line)
            parts = openai_parts(line["messages"])
        elif fmt is TranscriptFormat.anthropic_messages:
            header = parse_header(line, extra_keys=frozenset({"system"}))
            parts = anthropic_parts(line["messages"], line.get("system"))
        else:
            msg = f"{fmt} is not a transcript format"
            raise ValueError(msg)
        return build_episodes(number, header, parts, enrich=enrich)
    except Bad as exc:
        raise TranscriptError(FieldError(number, exc.field, exc.reason)) from None


def adapt_line(number: int, raw: str, fmt: TranscriptFormat) -> Adapted:
    """Episodes of one raw JSONL line; see :func:`adapt_session`."""
    try:
        line = parse_json_line(raw)
    except Bad as exc:
        raise TranscriptError(FieldError(number, exc.field, exc.reason)) from None
    return adapt_session(number, line, fmt)
