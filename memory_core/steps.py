"""Episode steps: a free-text action (contract v1) or a structured tool call (contract v1.1).

Why one module: the step is shared by ingest (validation, redaction, storage), clustering and
mining (its identity and abstract signature), compaction (its text) and the read path. Lance
keeps the ``actions`` column as ``list<string>`` so that v1 homes need no migration: a tool
call is stored as its canonical JSON object (sorted keys, compact), a free-text action as
itself. ``decode_step`` turns a stored string back into what was ingested.

A call may say ``failed: true``: the tool answered with an error (a provider's ``is_error``,
a result the adapter reads as an error). The agent did make it, so the trajectory keeps it,
but it changed nothing, so mining never counts it as a step that did the work (a run that
"cancelled" with an error and then told the user it could not is a run that changed nothing).

Examples
--------
>>> call = ToolCall(tool="cancel_reservation", args={"reservation_id": "ZFA04Y"})
>>> encode_step(call)
'{"args":{"reservation_id":"ZFA04Y"},"tool":"cancel_reservation"}'
>>> decode_step(encode_step(call)) == call
True
>>> step_tool("reset network adapter"), step_tool(call)
('reset network adapter', 'cancel_reservation')
>>> step_text(call)
'cancel_reservation(reservation_id=ZFA04Y)'
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
)


class ToolCall(BaseModel):
    """One tool call an agent made: the tool's name and its arguments as the agent sent them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: str = Field(min_length=1, max_length=200, description="the tool's name: the identity")
    args: dict[str, Any] = Field(default_factory=dict, description="arguments, JSON values")
    failed: bool = Field(
        default=False,
        description="the tool answered with an error: the call was made but changed nothing",
    )

    @model_serializer(mode="wrap")
    def _usual_form(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """``failed`` only when true: the usual call keeps the v1.1 form ``{tool, args}``, so
        stored rows and content hashes of runs without failed calls never change."""
        data = handler(self)
        if not self.failed:
            data.pop("failed", None)
        return data

    @field_validator("tool")
    @classmethod
    def _tool_not_blank(cls, value: str) -> str:
        if not value.strip():
            msg = "tool name is blank"
            raise ValueError(msg)
        return value


Step = str | ToolCall

_TOOL_CALL_PREFIXES = ('{"args":', '{"tool":')


def call_dict(call: ToolCall | dict[str, Any]) -> dict[str, Any]:
    """A tool call as JSON: ``{tool, args}``, plus ``failed: true`` only when it failed (the
    usual case keeps the v1.1 form, so stored rows and content hashes do not change)."""
    value = call.model_dump(mode="json") if isinstance(call, ToolCall) else dict(call)
    if not value.get("failed"):
        value.pop("failed", None)
    return value


def encode_step(step: Step | dict[str, Any]) -> str:
    """The stored form: a string as itself, a tool call as canonical JSON."""
    if isinstance(step, str):
        return step
    value = call_dict(step)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def decode_step(stored: str) -> Step:
    """What was ingested: a tool call when the stored string is one, otherwise the string."""
    if stored.startswith(_TOOL_CALL_PREFIXES):
        try:
            return ToolCall.model_validate_json(stored)
        except ValidationError:
            return stored
    return stored


def as_step(step: Step | dict[str, Any]) -> Step:
    """A step from any of its forms: stored string, ``{tool, args}`` dict or the model."""
    if isinstance(step, str):
        return decode_step(step)
    if isinstance(step, dict):
        return ToolCall.model_validate(step)
    return step


def step_tool(step: Step | dict[str, Any]) -> str:
    """A step's identity: the tool's name, or the free text of a v1 action."""
    step = as_step(step)
    return step.tool if isinstance(step, ToolCall) else step


def step_text(step: Step | dict[str, Any]) -> str:
    """A step as a person reads it: ``tool(key=value, ...)`` or the free text."""
    step = as_step(step)
    if isinstance(step, str):
        return step
    args = ", ".join(f"{k}={_value_text(v)}" for k, v in step.args.items())
    return f"{step.tool}({args})"


def _value_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
