"""Transcript adapters, line by line: roles, order, ids, the trajectory and every bad line."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core.models import Episode
from memory_core.transcripts import Adapted, TranscriptError, TranscriptFormat, adapt_line
from tests.transcripts.sessions import API_KEY, TOOL_SAYS, anthropic_session, openai_session

OPENAI = TranscriptFormat.openai_chat
ANTHROPIC = TranscriptFormat.anthropic_messages


def adapt(line: dict[str, Any], fmt: TranscriptFormat = OPENAI, number: int = 1) -> Adapted:
    return adapt_line(number, json.dumps(line), fmt)


def error_of(line: Any, fmt: TranscriptFormat = OPENAI, number: int = 3) -> str:
    raw = line if isinstance(line, str) else json.dumps(line)
    with pytest.raises(TranscriptError) as info:
        adapt_line(number, raw, fmt)
    assert info.value.error.line == number
    return str(info.value)


# --- OpenAI chat ---------------------------------------------------------------------------


def test_openai_messages_become_episodes_with_their_roles_in_order() -> None:
    adapted = adapt(openai_session())
    roles = [e["source_role"] for e in adapted.episodes]
    assert roles == [
        "system", "user", "agent", "tool", "tool", "agent", "user", "agent", "tool", "agent",
        "agent",  # the trajectory, last
    ]  # fmt: skip
    assert adapted.origins[:3] == ["messages[0]", "messages[1]", "messages[2]"]
    assert adapted.origins[-1] == "trajectory"
    times = [e["occurred_at"] for e in adapted.episodes]
    assert times[0] == "2026-03-01T09:00:00.000000Z"
    assert times == sorted(times) and len(set(times)) == len(times)  # strictly increasing
    for episode in adapted.episodes:
        Episode.model_validate(episode)
        assert episode["session_id"] == "chatcmpl-session-0001"
        assert (episode["tenant_id"], episode["subject_id"]) == ("acme", "ada")
        assert episode["namespace"] == "support"


def test_openai_texts_tools_and_empty_results() -> None:
    by_origin = {origin: episode for episode, origin in _pairs(adapt(openai_session()))}
    assert by_origin["messages[1]"]["text"] == "Please cancel my order 8812, it arrived broken."
    calls = by_origin["messages[2]"]
    assert calls["text"].startswith("[tool call] get_order(order_id=8812, api_key=")
    assert "actions" not in calls  # message episodes carry text only
    assert by_origin["messages[3]"]["conditions"] == {"tool": "get_order"}
    assert by_origin["messages[4]"]["conditions"] == {"tool": "get_customer"}
    assert by_origin["messages[4]"]["source_role"] == "tool"  # what the tool says of the user
    assert TOOL_SAYS in by_origin["messages[4]"]["text"]
    empty = by_origin["messages[8]"]  # an empty tool result is still an episode
    assert empty["text"] is None and empty["conditions"] == {"tool": "cancel_order"}
    assert by_origin["messages[9]"]["text"] == "Done: refunded 42.50."


def _pairs(adapted: Adapted) -> list[tuple[dict[str, Any], str]]:
    return list(zip(adapted.episodes, adapted.origins, strict=True))


def test_openai_trajectory_has_goal_tool_calls_and_outcome() -> None:
    trajectory = adapt(openai_session()).trajectory
    assert trajectory is not None
    assert trajectory["goal"] == "Please cancel my order 8812, it arrived broken."
    assert trajectory["actions"] == [
        {"tool": "get_order", "args": {"order_id": "8812", "api_key": API_KEY}},
        {"tool": "get_customer", "args": {"customer": "ada"}},
        {"tool": "cancel_order", "args": {"order_id": "8812", "refund": True, "amount": 42.5}},
    ]
    assert trajectory["outcome"] == "success"
    assert trajectory["source_role"] == "agent"
    Episode.model_validate(trajectory)
    no_outcome = openai_session()
    del no_outcome["outcome"]
    assert adapt(no_outcome).trajectory["outcome"] == "unknown"


def test_no_tool_calls_and_no_outcome_means_no_trajectory() -> None:
    line = openai_session(messages=[{"role": "user", "content": "hi"}])
    del line["outcome"]
    adapted = adapt(line)
    assert adapted.trajectory is None and len(adapted.episodes) == 1
    judged = adapt(openai_session(messages=[{"role": "user", "content": "hi"}]))
    assert judged.trajectory["actions"] == [] and judged.trajectory["outcome"] == "success"


def test_ids_are_deterministic_and_scoped_by_tenant() -> None:
    first, again = adapt(openai_session()), adapt(openai_session())
    assert [e["episode_id"] for e in first.episodes] == [e["episode_id"] for e in again.episodes]
    other = adapt(openai_session(tenant_id="globex"))
    assert not {e["episode_id"] for e in first.episodes} & {e["episode_id"] for e in other.episodes}
    ids = [e["episode_id"] for e in first.episodes]
    assert ids[0].endswith("-m0000") and ids[-1].endswith("-trajectory")
    assert len(set(ids)) == len(ids)


def test_message_timestamps_are_used_and_order_always_wins() -> None:
    messages = [
        {"role": "user", "content": "a", "timestamp": "2026-03-01T10:00:00+02:00"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c", "timestamp": "2026-03-01T07:00:00Z"},  # earlier
        {"role": "assistant", "content": "d", "timestamp": "2026-03-01T09:00:00Z"},
    ]
    line = openai_session(messages=messages)
    del line["started_at"]
    times = [e["occurred_at"] for e in adapt(line).episodes[:4]]
    assert times == [
        "2026-03-01T08:00:00.000000Z",
        "2026-03-01T08:00:00.001000Z",
        "2026-03-01T08:00:00.002000Z",  # its own time is earlier: kept after its predecessor
        "2026-03-01T09:00:00.000000Z",
    ]


def test_legacy_function_call_and_developer_role() -> None:
    line = openai_session(
        messages=[
            {"role": "developer", "content": "rules"},
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": None,
                "function_call": {"name": "weather", "arguments": '{"city": "Oslo"}'},
            },
            {"role": "function", "name": "weather", "content": "rain"},
        ]
    )
    adapted = adapt(line)
    assert [e["source_role"] for e in adapted.episodes] == [
        "system",
        "user",
        "agent",
        "tool",
        "agent",
    ]
    assert adapted.trajectory["actions"] == [{"tool": "weather", "args": {"city": "Oslo"}}]


OPENAI_BAD = [
    ("not JSON", "{not json", "(line): not valid JSON"),
    ("a list", "[1, 2]", "(line): must be a JSON object"),
    ("missing session", {"session_id": None}, "session_id: required"),
    ("missing tenant", {"tenant_id": None}, "tenant_id: required"),
    ("blank subject", {"subject_id": "  "}, "subject_id: must be a non-empty string"),
    ("unknown key", {"sesion": "x"}, "sesion: unknown field"),
    ("no messages", {"messages": []}, "messages: must be a non-empty list"),
    ("bad outcome", {"outcome": "great"}, "outcome: must be one of"),
    ("naive start", {"started_at": "2026-03-01T09:00:00"}, "started_at: not an RFC3339"),
    ("bad conditions", {"conditions": {"os": 1}}, "conditions: must be an object of string"),
    ("bad role", {"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role: must be"),
    ("message not object", {"messages": ["hi"]}, "messages[0]: must be a message object"),
    ("bad content", {"messages": [{"role": "user", "content": 5}]}, "messages[0].content: must"),
    (
        "bad part",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]},
        "messages[0].content[0].text: must be a string",
    ),
    (
        "bad timestamp",
        {"messages": [{"role": "user", "content": "x", "timestamp": "noon"}]},
        "messages[0].timestamp: not an RFC3339",
    ),
]


@pytest.mark.parametrize(
    ("label", "change", "expected"), OPENAI_BAD, ids=[b[0] for b in OPENAI_BAD]
)
def test_openai_bad_lines_name_line_and_field(label: str, change: Any, expected: str) -> None:
    if isinstance(change, str):
        line: Any = change
    else:
        line = openai_session()
        for key, value in change.items():
            if value is None:
                line.pop(key)
            else:
                line[key] = value
    message = error_of(line)
    assert message.startswith("line 3: "), message
    assert expected in message, message


def _with_message(index: int, message: dict[str, Any]) -> dict[str, Any]:
    line = openai_session()
    line["messages"][index] = message
    return line


def test_malformed_tool_arguments_name_line_message_and_field() -> None:
    line = openai_session()
    line["messages"][7]["tool_calls"][0]["function"]["arguments"] = '{"order_id": 8812,'
    message = error_of(line, number=12)
    assert message.startswith(
        "line 12: messages[7].tool_calls[0].function.arguments: not valid JSON"
    )
    line["messages"][7]["tool_calls"][0]["function"]["arguments"] = "[1, 2]"
    assert "must hold a JSON object, got a list" in error_of(line)
    line["messages"][7]["tool_calls"][0]["function"]["arguments"] = '{"x": NaN}'
    assert "messages[7].tool_calls[0].function.arguments: not valid JSON" in error_of(line)
    line["messages"][7]["tool_calls"][0]["function"]["arguments"] = '{"x": 1e999}'
    assert "infinite" in error_of(line)


def test_bad_tool_calls() -> None:
    line = openai_session()
    line["messages"][2]["tool_calls"][1]["function"]["name"] = ""
    assert "messages[2].tool_calls[1].function.name: must be the tool's name" in error_of(line)
    line = openai_session()
    line["messages"][2]["tool_calls"] = {"id": "x"}
    assert "messages[2].tool_calls: must be a list" in error_of(line)
    line = openai_session()
    line["messages"][2]["tool_calls"][0]["type"] = "custom"
    assert "messages[2].tool_calls[0].type: only function calls" in error_of(line)


def test_tool_result_without_a_call_is_refused() -> None:
    line = openai_session()
    line["messages"][3]["tool_call_id"] = "call_nobody"
    message = error_of(line)
    assert "messages[3].tool_call_id: tool result without a call" in message
    line = openai_session()
    del line["messages"][3]["tool_call_id"]
    assert "messages[3].tool_call_id: required" in error_of(line)
    # a result before its call is a result without a call
    line = openai_session()
    line["messages"][2], line["messages"][3] = line["messages"][3], line["messages"][2]
    assert "messages[2].tool_call_id: tool result without a call" in error_of(line)


def test_started_at_is_required_without_timestamps() -> None:
    line = openai_session()
    del line["started_at"]
    assert "started_at: required when the messages carry no timestamp" in error_of(line)


# --- Anthropic Messages --------------------------------------------------------------------


def test_anthropic_tool_results_in_user_messages_are_tool_episodes() -> None:
    adapted = adapt(anthropic_session(), ANTHROPIC)
    pairs = [(o, e["source_role"]) for e, o in _pairs(adapted)]
    assert pairs == [
        ("system", "system"),
        ("messages[0]", "user"),
        ("messages[1]", "agent"),
        ("messages[2]", "tool"),
        ("messages[2]", "tool"),
        ("messages[3]", "agent"),
        ("messages[4]", "tool"),
        ("messages[4]", "user"),  # the user's own words after the result stay the user's
        ("messages[5]", "agent"),
        ("trajectory", "agent"),
    ]
    episodes = adapted.episodes
    ids = [e["episode_id"] for e in episodes]
    assert ids[0].endswith("-sys") and ids[3].endswith("-m0002.r0") and ids[4].endswith("-m0002.r1")
    assert ids[7].endswith("-m0004") and ids[6].endswith("-m0004.r0")
    assert TOOL_SAYS in episodes[4]["text"] and episodes[4]["source_role"] == "tool"
    assert episodes[4]["conditions"] == {"tool": "get_customer"}
    assert episodes[6]["conditions"] == {"tool": "cancel_order", "tool_error": "true"}
    assert episodes[7]["text"] == "Oh, use my other card then."
    assert "I should look" not in json.dumps(episodes)  # thinking is not a statement
    assert episodes[2]["text"].startswith("Let me look that up.\n[tool call] get_order(")
    times = [e["occurred_at"] for e in episodes]
    assert times == sorted(times) and len(set(times)) == len(times)
    for episode in episodes:
        Episode.model_validate(episode)


def test_anthropic_trajectory() -> None:
    trajectory = adapt(anthropic_session(outcome="failure"), ANTHROPIC).trajectory
    assert trajectory["goal"] == "Please cancel my order 8812, it arrived broken."
    assert [a["tool"] for a in trajectory["actions"]] == [
        "get_order",
        "get_customer",
        "cancel_order",
    ]
    assert trajectory["actions"][0]["args"] == {"order_id": "8812", "api_key": API_KEY}
    assert trajectory["outcome"] == "failure"


def test_anthropic_system_as_string_and_plain_content() -> None:
    line = anthropic_session(system="Be kind.", messages=[{"role": "user", "content": "hello"}])
    adapted = adapt(line, ANTHROPIC)
    assert [(e["source_role"], e["text"]) for e in adapted.episodes] == [
        ("system", "Be kind."),
        ("user", "hello"),
    ]


def _anthropic_with(index: int, message: dict[str, Any]) -> dict[str, Any]:
    line = anthropic_session()
    line["messages"][index] = message
    return line


ANTHROPIC_BAD = [
    ("system role", _anthropic_with(0, {"role": "system", "content": "x"}), "messages[0].role"),
    (
        "tool_use in user message",
        _anthropic_with(0, {"role": "user", "content": [
            {"type": "tool_use", "id": "t", "name": "x", "input": {}}]}),
        "messages[0].content[0].type: tool_use belongs in an assistant message",
    ),
    (
        "result without call",
        _anthropic_with(2, {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_99", "content": "x"}]}),
        "messages[2].content[0].tool_use_id: tool result without a call",
    ),
    (
        "input not object",
        _anthropic_with(3, {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_03", "name": "cancel_order", "input": [1]}]}),
        "messages[3].content[0].input: must be a JSON object",
    ),
    (
        "block without type",
        _anthropic_with(0, {"role": "user", "content": [{"text": "x"}]}),
        "messages[0].content[0].type: must be a string",
    ),
    ("bad system", anthropic_session(system=5), "system: must be a string or a list of blocks"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("label", "line", "expected"), ANTHROPIC_BAD, ids=[b[0] for b in ANTHROPIC_BAD]
)
def test_anthropic_bad_lines_name_line_and_field(label: str, line: Any, expected: str) -> None:
    message = error_of(line, ANTHROPIC)
    assert message.startswith("line 3: ") and expected in message, message


def test_system_key_is_anthropic_only() -> None:
    assert "system: unknown field" in error_of(openai_session(system="x"), OPENAI)


# --- property: any JSON line gives episodes or our one-line error ---------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
ROLE = st.sampled_from(["user", "assistant", "system", "tool", "developer", "function", "x"])
BLOCK = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "tool_use", "tool_result", "thinking", "image"])},
    optional={
        "text": JSON,
        "id": st.sampled_from(["a", "b"]),
        "name": JSON,
        "input": JSON,
        "tool_use_id": st.sampled_from(["a", "b", "c"]),
        "content": JSON,
        "is_error": JSON,
    },
)
CALL = st.fixed_dictionaries(
    {"id": st.sampled_from(["a", "b"]), "type": st.just("function")},
    optional={"function": st.fixed_dictionaries({"name": JSON, "arguments": JSON | st.text()})},
)
MESSAGE = st.fixed_dictionaries(
    {"role": ROLE},
    optional={
        "content": JSON | st.lists(BLOCK, max_size=3),
        "tool_calls": st.lists(CALL, max_size=2) | JSON,
        "tool_call_id": st.sampled_from(["a", "b", "c"]) | JSON,
        "timestamp": st.sampled_from(["2026-01-01T00:00:00Z", "x"]) | JSON,
        "name": JSON,
    },
)
LINE = st.fixed_dictionaries(
    {},
    optional={
        "session_id": st.sampled_from(["s", ""]) | JSON,
        "tenant_id": st.just("t") | JSON,
        "subject_id": st.just("u") | JSON,
        "started_at": st.sampled_from(["2026-01-01T00:00:00Z", "2026-01-01T00:00:00"]) | JSON,
        "outcome": st.sampled_from(["success", "bad"]) | JSON,
        "system": JSON,
        "conditions": JSON,
        "expires_at": JSON,
        "sensitivity": JSON,
        "messages": st.lists(MESSAGE, max_size=5) | JSON,
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(line=LINE | JSON, fmt=st.sampled_from([OPENAI, ANTHROPIC]))
def test_any_json_line_gives_episodes_or_one_line_error(line: Any, fmt: TranscriptFormat) -> None:
    raw = json.dumps(line)
    try:
        adapted = adapt_line(7, raw, fmt)
    except TranscriptError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("line 7: ")
        return
    for episode in adapted.episodes:
        assert episode["source_role"] in ("user", "agent", "tool", "system")
    times = [e["occurred_at"] for e in adapted.episodes]
    assert times == sorted(times) and len(set(times)) == len(times)
