"""Real-shaped sessions for the transcript tests: what the providers' APIs send and return.

The OpenAI session is a Chat Completions conversation as a request's ``messages`` holds it
(assistant ``tool_calls`` with ``arguments`` as a JSON string, ``tool`` results by
``tool_call_id``, content as a string or a list of parts); the Anthropic one is a Messages
conversation (top-level ``system``, content blocks ``text`` / ``tool_use`` / ``tool_result``,
tool results inside user messages). Both plant a credential in a tool argument and in a tool
result, and a tool result that says something about the user.
"""

from __future__ import annotations

import copy
import json
from typing import Any

API_KEY = "sk-ant-api03-" + "Q" * 40  # a credential the agent passes to a tool
DB_PASSWORD = "Pw-Hunter2Hunter2"  # a credential a tool echoes back
TOOL_SAYS = "The customer prefers window seats and is a vegetarian."  # tool output, not the user


def openai_session(**overrides: Any) -> dict[str, Any]:
    line: dict[str, Any] = {
        "session_id": "chatcmpl-session-0001",
        "tenant_id": "acme",
        "subject_id": "ada",
        "namespace": "support",
        "started_at": "2026-03-01T09:00:00Z",
        "outcome": "success",
        "messages": [
            {"role": "system", "content": "You are Acme's support agent. Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Please cancel my order 8812, it arrived broken."},
                    {"type": "image_url", "image_url": {"url": "https://example.com/x.png"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_a1",
                        "type": "function",
                        "function": {
                            "name": "get_order",
                            "arguments": json.dumps({"order_id": "8812", "api_key": API_KEY}),
                        },
                    },
                    {
                        "id": "call_a2",
                        "type": "function",
                        "function": {"name": "get_customer", "arguments": '{"customer": "ada"}'},
                    },
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "call_a1",
                "content": json.dumps({"order_id": "8812", "status": "delivered"}),
            },
            {
                "role": "tool",
                "tool_call_id": "call_a2",
                "content": f"{TOOL_SAYS} db password: {DB_PASSWORD}",
            },
            {
                "role": "assistant",
                "content": "I can cancel order 8812 and refund you. Shall I?",
                "refusal": None,
            },
            {"role": "user", "content": "Yes please."},
            {
                "role": "assistant",
                "content": "Cancelling now.",
                "tool_calls": [
                    {
                        "id": "call_b1",
                        "type": "function",
                        "function": {
                            "name": "cancel_order",
                            "arguments": '{"order_id": "8812", "refund": true, "amount": 42.5}',
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_b1", "content": ""},
            {"role": "assistant", "content": [{"type": "text", "text": "Done: refunded 42.50."}]},
        ],
    }
    line.update(copy.deepcopy(overrides))
    return line


def anthropic_session(**overrides: Any) -> dict[str, Any]:
    line: dict[str, Any] = {
        "session_id": "msg-session-0001",
        "tenant_id": "acme",
        "subject_id": "ada",
        "started_at": "2026-03-02T09:00:00Z",
        "system": [{"type": "text", "text": "You are Acme's support agent."}],
        "messages": [
            {"role": "user", "content": "Please cancel my order 8812, it arrived broken."},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "thinking",
                        "thinking": "I should look the order up.",
                        "signature": "x",
                    },
                    {"type": "text", "text": "Let me look that up."},
                    {
                        "type": "tool_use",
                        "id": "toolu_01",
                        "name": "get_order",
                        "input": {"order_id": "8812", "api_key": API_KEY},
                    },
                    {
                        "type": "tool_use",
                        "id": "toolu_02",
                        "name": "get_customer",
                        "input": {"customer": "ada"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01",
                        "content": json.dumps({"order_id": "8812", "status": "delivered"}),
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_02",
                        "content": [
                            {"type": "text", "text": f"{TOOL_SAYS} db password: {DB_PASSWORD}"}
                        ],
                        "is_error": False,
                    },
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_03",
                        "name": "cancel_order",
                        "input": {"order_id": "8812", "refund": True},
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_03",
                        "content": "refund failed: card expired",
                        "is_error": True,
                    },
                    {"type": "text", "text": "Oh, use my other card then."},
                ],
            },
            {"role": "assistant", "content": "I will retry with your other card."},
        ],
    }
    line.update(copy.deepcopy(overrides))
    return line
