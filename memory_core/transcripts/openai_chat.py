"""OpenAI Chat Completions messages -> parts (``--from openai-chat``).

The shapes are the provider's own, as a request's ``messages`` or a logged conversation holds
them:

- ``system`` / ``developer``: the system prompt (role ``system``);
- ``user``: role ``user``;
- ``assistant``: role ``agent``; ``content`` may be null when it only calls tools;
  ``tool_calls``: ``[{id, type: "function", function: {name, arguments}}]`` with
  ``arguments`` a JSON string (an object is taken as is); the legacy ``function_call``
  (``{name, arguments}``) too; ``refusal`` counts as text;
- ``tool``: role ``tool``, ``tool_call_id`` must name a call made earlier in the session;
  the legacy ``function`` role must name (``name``) a function called earlier. A result that
  reports an error (:func:`result_is_error`) marks its call ``failed`` in the trajectory.

``content`` is a string, null, or a list of parts: ``text`` (and ``refusal``) parts are kept,
joined by newlines; image, audio and file parts carry no text and are left out. Keys the
adapter does not use (``name`` on a user message, ``annotations``, ``audio`` ...) are ignored,
so logged responses pass as they are. A message may carry ``timestamp`` (RFC3339), which
becomes its valid time (see ``session.build_episodes``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from memory_core.models import SourceRole
from memory_core.steps import ToolCall
from memory_core.transcripts.session import Part, fail, kind_of, parse_arguments, parse_time

__all__ = ["openai_parts"]

_ROLES = {
    "system": SourceRole.system,
    "developer": SourceRole.system,
    "user": SourceRole.user,
    "assistant": SourceRole.agent,
    "tool": SourceRole.tool,
    "function": SourceRole.tool,
}


def content_text(content: Any, where: str) -> str:
    """The text of an OpenAI ``content``: a string, null, or a list of typed parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        fail(where, f"must be a string, null or a list of parts, got {kind_of(content)}")
    texts = []
    for k, part in enumerate(content):
        if isinstance(part, str):  # some loggers flatten parts to strings
            texts.append(part)
            continue
        if not isinstance(part, dict):
            fail(f"{where}[{k}]", f"must be a content part object, got {kind_of(part)}")
        kind = part.get("type")
        if kind in ("text", "refusal"):
            text = part.get(kind)
            if not isinstance(text, str):
                fail(f"{where}[{k}].{kind}", f"must be a string, got {kind_of(text)}")
            texts.append(text)
        elif not isinstance(kind, str):
            fail(f"{where}[{k}].type", f"must be a string, got {kind_of(kind)}")
    return "\n".join(t for t in texts if t)


def _tool_name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        fail(where, f"must be the tool's name (a non-empty string), got {kind_of(value)}")
    if len(value) > 200:
        fail(where, "longer than 200 characters")
    return value


def _calls(
    message: dict[str, Any], where: str, names: dict[str, str]
) -> list[tuple[ToolCall, str | None]]:
    """The calls an assistant message makes, with their ids; records ``call id -> tool name``
    in ``names``."""
    calls: list[tuple[ToolCall, str | None]] = []
    raw = message.get("tool_calls")
    if raw is not None:
        if not isinstance(raw, list):
            fail(f"{where}.tool_calls", f"must be a list, got {kind_of(raw)}")
        for k, call in enumerate(raw):
            at = f"{where}.tool_calls[{k}]"
            if not isinstance(call, dict):
                fail(at, f"must be an object, got {kind_of(call)}")
            if call.get("type", "function") != "function":
                fail(f"{at}.type", f"only function calls are read, got {call['type']!r}")
            function = call.get("function")
            if not isinstance(function, dict):
                fail(f"{at}.function", f"must be an object, got {kind_of(function)}")
            name = _tool_name(function.get("name"), f"{at}.function.name")
            args = parse_arguments(function.get("arguments"), f"{at}.function.arguments")
            call_id = call.get("id")
            if call_id is not None and not isinstance(call_id, str):
                fail(f"{at}.id", f"must be a string, got {kind_of(call_id)}")
            if call_id:
                names[call_id] = name
            calls.append((ToolCall(tool=name, args=args), call_id or None))
    legacy = message.get("function_call")
    if legacy is not None:
        at = f"{where}.function_call"
        if not isinstance(legacy, dict):
            fail(at, f"must be an object, got {kind_of(legacy)}")
        name = _tool_name(legacy.get("name"), f"{at}.name")
        call = ToolCall(tool=name, args=parse_arguments(legacy.get("arguments"), at))
        calls.append((call, f"function:{name}"))
        names[f"function:{name}"] = name
    return calls


def openai_parts(messages: list[Any]) -> list[Part]:
    """One part per message, in order; raises ``Bad`` naming the message index and field."""
    parts: list[Part] = []
    names: dict[str, str] = {}  # call id -> tool name, for the results that follow
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            fail(where, f"must be a message object, got {kind_of(message)}")
        role_name = message.get("role")
        role = _ROLES.get(role_name) if isinstance(role_name, str) else None
        if role is None:
            choices = ", ".join(_ROLES)
            fail(f"{where}.role", f"must be one of {choices}, got {role_name!r}")
        stamp = message.get("timestamp")
        timestamp = None if stamp is None else parse_time(stamp, f"{where}.timestamp")
        text = content_text(message.get("content"), f"{where}.content")
        tool = None
        call_id: str | None = None
        made: list[tuple[ToolCall, str | None]] = []
        if role_name == "assistant":
            made = _calls(message, where, names)
            refusal = message.get("refusal")
            if isinstance(refusal, str) and refusal and not text:
                text = refusal
        elif role_name == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                fail(f"{where}.tool_call_id", f"required (a string), got {kind_of(call_id)}")
            if call_id not in names:
                fail(
                    f"{where}.tool_call_id",
                    f"tool result without a call: no earlier tool call has id {call_id!r}",
                )
            tool = names[call_id]
        elif role_name == "function":
            name = _tool_name(message.get("name"), f"{where}.name")
            if f"function:{name}" not in names:
                reason = f"function result without a call: no earlier function_call of {name!r}"
                fail(f"{where}.name", reason)
            tool, call_id = name, f"function:{name}"
        is_error = tool is not None and result_is_error(message, text)
        parts.append(
            Part(index, role, text, calls=tuple(c for c, _ in made), tool=tool,
                 is_error=is_error, timestamp=timestamp, call_ids=tuple(i for _, i in made),
                 call_id=call_id)
        )  # fmt: skip
    return parts


_ERROR_TEXT = re.compile(r"\s*(?:error|exception)\b\s*[:\-]", re.IGNORECASE)


def result_is_error(message: dict[str, Any], text: str) -> bool:
    """Whether a tool result reports a failure.

    OpenAI's format has no error flag, so logs say it in one of three common ways: an
    ``is_error: true`` or ``status: "error"`` key beside the content (LangChain's
    ``ToolMessage.status``), or a text that starts with ``Error:`` / ``Exception:`` (what most
    tool runners return). A JSON object with a top-level ``"error"`` key counts too.
    """
    if message.get("is_error") is True or message.get("status") == "error":
        return True
    if _ERROR_TEXT.match(text):
        return True
    stripped = text.lstrip()
    if stripped.startswith("{") and '"error"' in stripped[:200]:
        try:
            parsed = json.loads(stripped)
        except ValueError:
            return False
        return isinstance(parsed, dict) and bool(parsed.get("error"))
    return False
