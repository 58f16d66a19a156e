"""Anthropic Messages -> parts (``--from anthropic-messages``).

The shapes are the provider's own: a top-level ``system`` (a string or a list of text blocks)
and ``messages`` of role ``user`` or ``assistant`` whose ``content`` is a string or a list of
blocks:

- ``text``: what the user (role ``user``) or the agent (role ``agent``) said;
- ``tool_use`` / ``server_tool_use`` ``{id, name, input}`` in an assistant message: a tool
  call (``input`` is the arguments object);
- ``tool_result`` ``{tool_use_id, content, is_error?}``: it arrives inside a *user* message,
  but it is tool output, so it becomes its own episode of role ``tool`` (``.r0``, ``.r1`` ...
  in the message) and never gets the user's authority; ``tool_use_id`` must name a call made
  earlier. Other ``*_tool_result`` blocks (web search, code execution) are tool output too;
- ``thinking`` / ``redacted_thinking`` (the model's private reasoning), ``image``,
  ``document`` and block types this adapter does not know carry no statement and are left out.

Keys the adapter does not use (``cache_control``, ``citations``, a logged response's ``id``,
``model``, ``stop_reason`` ...) are ignored. A message may carry ``timestamp`` (RFC3339).
"""

from __future__ import annotations

import json
from typing import Any

from memory_core.models import SourceRole
from memory_core.steps import ToolCall
from memory_core.transcripts.session import Part, fail, kind_of, parse_arguments, parse_time

__all__ = ["anthropic_parts"]

_CALLS = frozenset({"tool_use", "server_tool_use"})


def _text_of_blocks(value: Any, where: str) -> str:
    """Text of a string or a list of blocks whose ``text`` blocks count (system, results)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        fail(where, f"must be a string or a list of blocks, got {kind_of(value)}")
    texts = []
    for k, block in enumerate(value):
        if not isinstance(block, dict):
            fail(f"{where}[{k}]", f"must be a block object, got {kind_of(block)}")
        if block.get("type") == "text":
            text = block.get("text")
            if not isinstance(text, str):
                fail(f"{where}[{k}].text", f"must be a string, got {kind_of(text)}")
            texts.append(text)
    return "\n".join(t for t in texts if t)


def _result_text(block: dict[str, Any], where: str) -> str:
    content = block.get("content")
    if block.get("type") == "tool_result" or isinstance(content, str | None):
        return _text_of_blocks(content, f"{where}.content")
    # other server tool results hold structured objects: keep them as compact JSON
    return json.dumps(content, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _call(block: dict[str, Any], where: str, names: dict[str, str]) -> ToolCall:
    name = block.get("name")
    if not isinstance(name, str) or not name.strip():
        fail(f"{where}.name", f"must be the tool's name, got {kind_of(name)}")
    if len(name) > 200:
        fail(f"{where}.name", "longer than 200 characters")
    call_id = block.get("id")
    if not isinstance(call_id, str) or not call_id:
        fail(f"{where}.id", f"required (a string), got {kind_of(call_id)}")
    names[call_id] = name
    return ToolCall(tool=name, args=parse_arguments(block.get("input"), f"{where}.input"))


def anthropic_parts(messages: list[Any], system: Any = None) -> list[Part]:
    """Parts in order: the system prompt, then each message (tool results split out)."""
    parts: list[Part] = []
    system_text = _text_of_blocks(system, "system")
    if system_text:
        parts.append(Part(None, SourceRole.system, system_text))
    names: dict[str, str] = {}  # tool_use id -> tool name
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            fail(where, f"must be a message object, got {kind_of(message)}")
        role = message.get("role")
        if role not in ("user", "assistant"):
            fail(f"{where}.role", f"must be user or assistant, got {role!r}")
        stamp = message.get("timestamp")
        timestamp = None if stamp is None else parse_time(stamp, f"{where}.timestamp")
        content = message.get("content")
        if isinstance(content, str):
            blocks: list[Any] = [{"type": "text", "text": content}]
        elif isinstance(content, list):
            blocks = content
        else:
            got = kind_of(content)
            fail(f"{where}.content", f"must be a string or a list of blocks, got {got}")
        texts: list[str] = []
        calls: list[ToolCall] = []
        call_ids: list[str | None] = []
        results: list[Part] = []
        text_slot: int | None = None  # where the message's own text goes among its results
        for k, block in enumerate(blocks):
            at = f"{where}.content[{k}]"
            if not isinstance(block, dict):
                fail(at, f"must be a block object, got {kind_of(block)}")
            kind = block.get("type")
            if not isinstance(kind, str):
                fail(f"{at}.type", f"must be a string, got {kind_of(kind)}")
            if kind == "text":
                text = block.get("text")
                if not isinstance(text, str):
                    fail(f"{at}.text", f"must be a string, got {kind_of(text)}")
                texts.append(text)
                text_slot = len(results) if text_slot is None else text_slot
            elif kind in _CALLS:
                if role != "assistant":
                    fail(f"{at}.type", f"{kind} belongs in an assistant message")
                calls.append(_call(block, at, names))
                call_ids.append(block.get("id"))
            elif kind == "tool_result" or kind.endswith("_tool_result"):
                if role != "user" and kind == "tool_result":
                    fail(f"{at}.type", "tool_result belongs in a user message")
                use_id = block.get("tool_use_id")
                if not isinstance(use_id, str) or not use_id:
                    fail(f"{at}.tool_use_id", f"required (a string), got {kind_of(use_id)}")
                if use_id not in names:
                    reason = f"tool result without a call: no earlier tool_use has id {use_id!r}"
                    fail(f"{at}.tool_use_id", reason)
                is_error = block.get("is_error") is True
                results.append(
                    Part(
                        index, SourceRole.tool, _result_text(block, at), sub=len(results),
                        tool=names[use_id], is_error=is_error, timestamp=timestamp,
                        call_id=use_id,
                    )
                )  # fmt: skip
            # thinking, images, documents and unknown block types carry no statement
        own_role = SourceRole.user if role == "user" else SourceRole.agent
        own = Part(index, own_role, "\n".join(t for t in texts if t), calls=tuple(calls),
                   timestamp=timestamp, call_ids=tuple(call_ids))  # fmt: skip
        slot = len(results) if text_slot is None else text_slot
        parts += [*results[:slot], own, *results[slot:]]
    return parts
