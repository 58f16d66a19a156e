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
    ("control char", {"tenant_id": "ac\x01me"}, "tenant_id: control character U+0001"),
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


def test_the_end_of_the_calendar_is_an_error_not_a_crash() -> None:
    line = openai_session(started_at="9999-12-31T23:59:59.999999Z")
    assert "messages[1]: valid time would pass 9999-12-31" in error_of(line)


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
    assert trajectory["observations"] == ["cancel_order failed: refund failed: card expired"]


def test_a_call_whose_result_is_an_error_is_kept_as_failed() -> None:
    """The call was made (the trajectory keeps it) but changed nothing (``failed: true``)."""
    anthropic = adapt(anthropic_session(outcome="failure"), ANTHROPIC).trajectory
    assert [a.get("failed", False) for a in anthropic["actions"]] == [False, False, True]
    assert "failed" not in anthropic["actions"][0]  # the usual call keeps {tool, args}

    def with_result(**result: Any) -> dict[str, Any]:
        line = openai_session()
        line["messages"][8] = {"role": "tool", "tool_call_id": "call_b1", **result}
        return adapt(line).trajectory

    refused = with_result(content="Error: refund failed, card expired")
    assert refused["actions"][2]["failed"] is True
    assert [a.get("failed", False) for a in refused["actions"][:2]] == [False, False]
    assert refused["observations"] == ["cancel_order failed: Error: refund failed, card expired"]
    for flagged in (
        {"content": "no", "status": "error"},
        {"content": "no", "is_error": True},
        {"content": json.dumps({"error": "order locked"})},
        {"content": "exception - timeout"},
    ):
        assert with_result(**flagged)["actions"][2].get("failed") is True, flagged
    for fine in (
        {"content": "Cancelled. No error."},
        {"content": json.dumps({"error": None, "ok": True})},
        {"content": "errors: 0"},
    ):
        assert "failed" not in with_result(**fine)["actions"][2], fine
    Episode.model_validate(refused)


def test_anthropic_server_tool_results_are_tool_output() -> None:
    line = anthropic_session(
        messages=[
            {"role": "user", "content": "What is new in Oslo?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "server_tool_use", "id": "srv_1", "name": "web_search",
                     "input": {"query": "Oslo news"}},
                    {"type": "web_search_tool_result", "tool_use_id": "srv_1",
                     "content": [{"type": "web_search_result", "url": "https://x", "title": "T"}]},
                    {"type": "text", "text": "Here is the news."},
                ],
            },
        ]
    )  # fmt: skip
    adapted = adapt(line, ANTHROPIC)
    roles = [(o, e["source_role"]) for e, o in _pairs(adapted)]
    assert roles == [
        ("system", "system"), ("messages[0]", "user"), ("messages[1]", "tool"),
        ("messages[1]", "agent"), ("trajectory", "agent"),
    ]  # fmt: skip
    assert '"url":"https://x"' in adapted.episodes[2]["text"]
    assert adapted.trajectory["actions"] == [{"tool": "web_search", "args": {"query": "Oslo news"}}]


def test_long_runs_and_long_outputs_are_cut_and_say_so() -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for n in range(230):
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{n}",
                        "type": "function",
                        "function": {"name": "step", "arguments": "{}"},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"c{n}", "content": "ok"})
    messages.append({"role": "tool", "tool_call_id": "c0", "content": "x" * 150_000})
    adapted = adapt(openai_session(messages=messages))
    trajectory = adapted.trajectory
    assert len(trajectory["actions"]) == 200
    assert trajectory["observations"] == ["230 tool calls; the first 200 are kept"]
    long = adapted.episodes[-2]["text"]
    kept = long.index(" …[cut: ")
    assert len(long) <= 100_000 and long.endswith(f"[cut: {150_000 - kept} more characters]")
    for episode in adapted.episodes:
        Episode.model_validate(episode)


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
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def mostly(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Valid values most of the time, any JSON now and then: the deep paths get reached."""
    return st.integers(0, 9).flatmap(lambda i: good if i else JSON)


IDS = st.sampled_from(["a", "b", "c"])
TEXT = st.text(max_size=12)
NAME = mostly(st.sampled_from(["get_order", "cancel_order"]))
ARGS = st.dictionaries(st.sampled_from(["id", "api_key", "n"]), JSON, max_size=3)
ARG_TEXT = mostly(ARGS.map(json.dumps)) | st.sampled_from(["", "{", "[1]", '{"x": 1e999}'])
OPENAI_CALL = st.fixed_dictionaries(
    {
        "id": mostly(IDS),
        "function": mostly(st.fixed_dictionaries({"name": NAME, "arguments": ARG_TEXT})),
    },
    optional={"type": st.sampled_from(["function", "custom"])},
)
OPENAI_PART = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "image_url"]), "text": mostly(TEXT)}
)
OPENAI_MESSAGE = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "assistant", "tool", "tool", "system", "x"]),
        "content": mostly(st.none() | TEXT | st.lists(OPENAI_PART, max_size=2)),
    },
    optional={
        "tool_calls": mostly(st.lists(OPENAI_CALL, max_size=2)),
        "tool_call_id": mostly(IDS),
        "timestamp": mostly(st.sampled_from(["2026-01-01T00:00:00Z", "2025-06-01T00:00:00+01:00"])),
    },
)
RESULT_CONTENT = TEXT | st.lists(
    st.fixed_dictionaries({"type": st.just("text"), "text": TEXT}), max_size=2
)
ANTHROPIC_BLOCK = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": mostly(TEXT)}),
    st.fixed_dictionaries(
        {"type": st.just("tool_use"), "id": mostly(IDS), "name": NAME, "input": mostly(ARGS)}
    ),
    st.fixed_dictionaries(
        {"type": st.just("tool_result"), "tool_use_id": mostly(IDS)},
        optional={"content": mostly(RESULT_CONTENT), "is_error": st.booleans()},
    ),
    st.fixed_dictionaries(
        {"type": mostly(st.sampled_from(["thinking", "image", "web_search_tool_result"]))},
        optional={"tool_use_id": IDS, "content": JSON},
    ),
)
ANTHROPIC_MESSAGE = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "user", "assistant", "system"]),
        "content": mostly(TEXT | st.lists(ANTHROPIC_BLOCK, max_size=4)),
    }
)


STARTS = ["2026-01-01T00:00:00Z", "2026-01-01T00:00:00", "9999-12-31T23:59:59.998Z"]


def session_line(
    message: st.SearchStrategy[Any], **optional: st.SearchStrategy[Any]
) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries(
        {
            "session_id": st.just("s"),
            "tenant_id": st.just("t"),
            "subject_id": st.just("u"),
            "messages": mostly(st.lists(message, min_size=1, max_size=6)),
        },
        optional={
            "started_at": mostly(st.sampled_from(STARTS)),
            "outcome": mostly(st.sampled_from(["success", "failure", "unknown"])),
            "conditions": mostly(st.dictionaries(TEXT, TEXT, max_size=2)),
            **optional,
        },
    )


OPENAI_LINE = session_line(OPENAI_MESSAGE)
ANTHROPIC_LINE = session_line(ANTHROPIC_MESSAGE, system=mostly(TEXT))
CASES = st.tuples(st.just(OPENAI), OPENAI_LINE | JSON) | st.tuples(
    st.just(ANTHROPIC), ANTHROPIC_LINE | JSON
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=CASES)
def test_any_json_line_gives_episodes_or_one_line_error(case: tuple[TranscriptFormat, Any]) -> None:
    """Whatever JSON a line holds: valid episodes in order, or our one-line error naming the
    line; and what a tool returned is never an episode of the user."""
    fmt, line = case
    try:
        adapted = adapt_line(7, json.dumps(line), fmt)
    except TranscriptError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("line 7: ")
        return
    for episode in adapted.episodes:
        Episode.model_validate(episode)
        if ".r" in episode["episode_id"] or "tool" in episode.get("conditions", {}):
            assert episode["source_role"] == "tool"
    times = [e["occurred_at"] for e in adapted.episodes]
    assert times == sorted(times) and len(set(times)) == len(times)
    if fmt is ANTHROPIC:  # every tool_result block became a tool episode, none a user one
        results = [
            b for m in line["messages"] if isinstance(m["content"], list)
            for b in m["content"] if b["type"].endswith("tool_result")
        ]  # fmt: skip
        tools = [e for e in adapted.episodes if e["source_role"] == "tool"]
        assert len(tools) == len(results)


# --- property: the same conversation in both shapes gives the same episodes -----------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("user"), TEXT.filter(str.strip)),
        st.tuples(st.just("agent"), TEXT.filter(str.strip)),
        st.tuples(st.just("call"), st.sampled_from(["get_order", "cancel_order"]), ARGS),
    ),
    min_size=1,
    max_size=8,
)


def both_shapes(ops: list[tuple[Any, ...]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """One conversation as an OpenAI and an Anthropic session: each call is answered by a tool
    result right away (OpenAI: a ``tool`` message; Anthropic: a ``tool_result`` block in the
    next user message)."""
    openai: list[dict[str, Any]] = []
    anthropic: list[dict[str, Any]] = []
    for n, op in enumerate(ops):
        if op[0] == "user":
            openai.append({"role": "user", "content": op[1]})
            anthropic.append({"role": "user", "content": op[1]})
        elif op[0] == "agent":
            openai.append({"role": "assistant", "content": op[1]})
            anthropic.append({"role": "assistant", "content": op[1]})
        else:
            call_id, result = f"c{n}", f"result {n}"
            function = {"name": op[1], "arguments": json.dumps(op[2])}
            openai.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function", "function": function}]})  # fmt: skip
            openai.append({"role": "tool", "tool_call_id": call_id, "content": result})
            anthropic.append({"role": "assistant", "content": [
                {"type": "tool_use", "id": call_id, "name": op[1], "input": op[2]}]})  # fmt: skip
            anthropic.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": call_id, "content": result}]})  # fmt: skip
    header = {"session_id": "s", "tenant_id": "t", "subject_id": "u",
              "started_at": "2026-01-01T00:00:00Z"}  # fmt: skip
    return {**header, "messages": openai}, {**header, "messages": anthropic}


@settings(max_examples=150, deadline=None)
@given(ops=OPS)
def test_both_shapes_agree_and_tool_output_is_never_the_user(ops: list[tuple[Any, ...]]) -> None:
    openai, anthropic = both_shapes(ops)
    a, b = adapt(openai, OPENAI), adapt(anthropic, ANTHROPIC)
    view = [(e["source_role"], e.get("text"), e.get("conditions")) for e in a.episodes]
    assert view == [(e["source_role"], e.get("text"), e.get("conditions")) for e in b.episodes]
    calls = [{"tool": op[1], "args": op[2]} for op in ops if op[0] == "call"]
    if calls:
        assert a.trajectory["actions"] == b.trajectory["actions"] == calls
    else:
        assert a.trajectory is None and b.trajectory is None
    results = [e for e in a.episodes if e.get("text", "") and e["text"].startswith("result ")]
    assert len(results) == len(calls) and {e["source_role"] for e in results} <= {"tool"}
    assert adapt(openai, OPENAI).episodes == a.episodes  # deterministic: a re-ingest is a no-op
