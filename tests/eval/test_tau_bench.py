"""tau-bench converter: the mapping, that gold labels never leak, and the real data file."""

from __future__ import annotations

import copy
import json
import os
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memory_core.eval.tau_bench import (
    FieldRule,
    convert_tau_bench,
    extract_conditions,
    id_kind,
    intent_label,
    load_tau_bench,
    mask_identifiers,
)
from memory_core.models import Episode

DATA_DIR = Path(
    os.environ.get("EVAL_DATA_DIR", Path(__file__).resolve().parents[3] / "shared" / "data")
)
TAU_FILE = DATA_DIR / "tau_bench_airline_tasks_00_24.json"

GOLD_MARKER = "issue_goldonly_voucher_zq"
GOLD_VALUE = "GOLDONLY-7731"
INSTRUCTION = "You are ada_lovelace_1815. SECRET-INSTRUCTION: cancel only if insured."

RESERVATION = {
    "reservation_id": "ABC123",
    "user_id": "ada_lovelace_1815",
    "origin": "JFK",
    "destination": "SEA",
    "flight_type": "one_way",
    "cabin": "economy",
    "flights": [
        {"origin": "JFK", "destination": "ATL", "flight_number": "HAT001", "date": "2024-05-20"},
        {"origin": "ATL", "destination": "SEA", "flight_number": "HAT002", "date": "2024-05-20"},
    ],
    "passengers": [{"first_name": "Ada", "last_name": "Lovelace", "dob": "1815-12-10"}],
    "payment_history": [{"payment_id": "credit_card_1234567", "amount": 300}],
    "created_at": "2024-05-14T10:00:00",
    "total_baggages": 1,
    "nonfree_baggages": 0,
    "insurance": "yes",
}
USER = {
    "name": {"first_name": "Ada", "last_name": "Lovelace"},
    "email": "ada@example.com",
    "dob": "1815-12-10",
    "membership": "gold",
    "payment_methods": {
        "credit_card_1234567": {"source": "credit_card", "last_four": "4242"},
        "gift_card_7654321": {"source": "gift_card", "amount": 50},
    },
    "reservations": ["ABC123"],
}


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


def _result(call_id: str, name: str, content: Any) -> dict[str, Any]:
    text = content if isinstance(content, str) else json.dumps(content)
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": text}


def _item(trial: int, reward: float, *, cancel_result: Any) -> dict[str, Any]:
    traj = [
        {"role": "system", "content": "# Airline Agent Policy (system prompt)"},
        {"role": "user", "content": "Hi, I want to cancel my trip to Seattle."},
        {"role": "assistant", "content": "Sure, what is your user id?"},
        {"role": "user", "content": "It is ada_lovelace_1815."},
        _call("c1", "get_user_details", {"user_id": "ada_lovelace_1815"}),
        _result("c1", "get_user_details", USER),
        _call("c2", "get_reservation_details", {"reservation_id": "ABC123"}),
        _result("c2", "get_reservation_details", RESERVATION),
        _call("c3", "get_reservation_details", {"reservation_id": "ABC123"}),
        _result("c3", "get_reservation_details", RESERVATION),
        {"role": "assistant", "content": "ASSISTANT-ONLY-TEXT: confirm cancellation?"},
        {"role": "user", "content": "Yes please."},
        _call("c4", "cancel_reservation", {"reservation_id": "ABC123"}),
        _result("c4", "cancel_reservation", cancel_result),
        {"role": "user", "content": "Thanks! ###STOP###"},
    ]
    return {
        "task_id": 7,
        "trial": trial,
        "reward": reward,
        "traj": traj,
        "info": {
            "task": {
                "user_id": "ada_lovelace_1815",
                "instruction": INSTRUCTION,
                "actions": [
                    {"name": "cancel_reservation", "kwargs": {"reservation_id": "ABC123"}},
                    {"name": GOLD_MARKER, "kwargs": {"voucher": GOLD_VALUE, "amount": 9917}},
                ],
                "outputs": [],
            },
            "reward_info": {"reward": reward, "actions": []},
        },
    }


@pytest.fixture
def items() -> list[dict[str, Any]]:
    return [
        _item(0, 1.0, cancel_result={**RESERVATION, "status": "cancelled"}),
        _item(1, 0.0, cancel_result="Error: reservation ABC123 cannot be cancelled after 24h"),
    ]


def test_maps_each_run_through_the_openai_chat_adapter(items: list[dict[str, Any]]) -> None:
    conv = convert_tau_bench(items)
    ok, failed = conv.trajectories
    assert ok["episode_id"].endswith("-trajectory") and ok["episode_id"] != failed["episode_id"]
    assert ok["tenant_id"] == "tau-airline" and ok["namespace"] == "airline"
    assert ok["subject_id"] == "ada_lovelace_1815"
    assert ok["session_id"] == "task7-trial0"
    assert ok["source_role"] == "agent"
    assert (ok["outcome"], failed["outcome"]) == ("success", "failure")
    assert ok["goal"] == "Hi, I want to cancel my trip to Seattle."
    # the tool calls, in order, with their arguments (nothing collapsed)
    assert ok["actions"] == [
        {"tool": "get_user_details", "args": {"user_id": "ada_lovelace_1815"}},
        {"tool": "get_reservation_details", "args": {"reservation_id": "ABC123"}},
        {"tool": "get_reservation_details", "args": {"reservation_id": "ABC123"}},
        {"tool": "cancel_reservation", "args": {"reservation_id": "ABC123"}},
    ]
    assert "vector" not in ok
    # one episode per message too; the run's first message is at its session's start
    first = [e for e in conv.episodes if e["session_id"] == "task7-trial0"]
    assert [e["source_role"] for e in first] == [
        "system", "user", "agent", "user", "agent", "tool", "agent", "tool", "agent", "tool",
        "agent", "user", "agent", "tool", "user", "agent",
    ]  # fmt: skip
    assert first[0]["occurred_at"] == "2026-01-01T00:00:00.000000Z"
    assert first[-1] is ok and ok["occurred_at"] > first[-2]["occurred_at"]
    assert min(e["occurred_at"] for e in conv.episodes if e["session_id"] == "task7-trial1") == (
        "2026-01-01T00:01:00.000000Z"
    )
    assert all("actions" not in e for e in conv.episodes if e is not ok and e is not failed)
    assert len(conv.sessions) == 2 and conv.sessions[0]["outcome"] == "success"
    for episode in conv.episodes:
        Episode.model_validate(episode)


def test_conditions_come_from_tool_results(items: list[dict[str, Any]]) -> None:
    ok, failed = convert_tau_bench(items).trajectories
    assert ok["conditions"] == {
        "membership": "gold",
        "payment_methods": "credit_card,gift_card",
        "cabin": "economy",
        "flight_type": "one_way",
        "insurance": "yes",
        "reservation_status": "cancelled",
        "passengers": "1",
        "flight_legs": "2",
        "total_baggages": "1",
        "paid_with": "credit_card",
    }
    assert failed["conditions"]["tool_error"] == "reservation # cannot be cancelled after #"
    assert "reservation_status" not in failed["conditions"]
    assert all(isinstance(v, str) for v in ok["conditions"].values())
    assert any("Error: reservation ABC123" in o for o in failed["observations"])
    assert all(len(o) <= 200 for o in ok["observations"])
    # personal details stay out of the observation digests
    assert not any("ada@example.com" in o for o in ok["observations"])


def test_text_is_the_user_side_only(items: list[dict[str, Any]]) -> None:
    conv = convert_tau_bench(items)
    ok = conv.trajectories[0]
    assert ok["text"].splitlines() == [
        "Hi, I want to cancel my trip to Seattle.",
        "It is ada_lovelace_1815.",
        "Yes please.",
        "Thanks!",
    ]
    assert "ASSISTANT-ONLY-TEXT" not in ok["text"]
    assert "###STOP###" not in json.dumps(conv.episodes)


def test_text_is_truncated() -> None:
    item = _item(0, 1.0, cancel_result={})
    item["traj"].insert(2, {"role": "user", "content": "x" * 5000})
    episode = convert_tau_bench([item]).trajectories[0]
    assert len(episode["text"]) <= 2000
    Episode.model_validate(episode)


def test_gold_actions_and_instruction_never_leak(items: list[dict[str, Any]]) -> None:
    conv = convert_tau_bench(items)
    dumped = json.dumps(conv.episodes)
    for secret in (GOLD_MARKER, GOLD_VALUE, "9917", "SECRET-INSTRUCTION", INSTRUCTION):
        assert secret not in dumped
    # the labels are still there, beside the episodes, for scoring
    ok, failed = (t["episode_id"] for t in conv.trajectories)
    assert conv.intent_of_episode == {
        ok: f"cancel_reservation|{GOLD_MARKER}",
        failed: f"cancel_reservation|{GOLD_MARKER}",
    }
    assert set(conv.task_of_episode) == {e["episode_id"] for e in conv.episodes}
    assert set(conv.task_of_episode.values()) == {"7"}


def test_deterministic_and_input_untouched(items: list[dict[str, Any]]) -> None:
    before = copy.deepcopy(items)
    first = convert_tau_bench(items)
    second = convert_tau_bench(copy.deepcopy(items))
    assert json.dumps(first.episodes, sort_keys=True) == json.dumps(second.episodes, sort_keys=True)
    assert first.intent_of_episode == second.intent_of_episode
    assert items == before


def test_options_are_honoured(items: list[dict[str, Any]]) -> None:
    start = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)
    conv = convert_tau_bench(items, tenant_id="t", namespace="ns", start=start)
    assert {e["tenant_id"] for e in conv.episodes} == {"t"}
    assert {e["namespace"] for e in conv.episodes} == {"ns"}
    starts = sorted(
        min(e["occurred_at"] for e in conv.episodes if e["session_id"] == s["session_id"])
        for s in conv.sessions
    )
    assert starts == ["2030-06-01T12:00:00.000000Z", "2030-06-01T12:01:00.000000Z"]


def test_tool_calls_as_json_string_and_result_without_name() -> None:
    item = _item(0, 1.0, cancel_result={})
    for message in item["traj"]:
        if message.get("tool_calls"):
            message["tool_calls"] = json.dumps(message["tool_calls"])
        if message["role"] == "tool":
            del message["name"]
    conv = convert_tau_bench([item])
    episode = conv.trajectories[0]
    assert episode["actions"][0] == {
        "tool": "get_user_details",
        "args": {"user_id": "ada_lovelace_1815"},
    }
    assert episode["conditions"]["membership"] == "gold"
    tools = [e for e in conv.episodes if e["source_role"] == "tool"]
    assert tools[0]["conditions"] == {"tool": "get_user_details"}  # named from the call


def test_malformed_tool_arguments_skip_the_run_with_the_reason() -> None:
    bad = _item(0, 1.0, cancel_result={})
    bad["traj"][4]["tool_calls"][0]["function"]["arguments"] = '{"user_id": '
    conv = convert_tau_bench([bad, _item(1, 0.0, cancel_result={})])
    assert len(conv.trajectories) == 1
    assert conv.skipped == [
        "item 0: line 1: messages[4].tool_calls[0].function.arguments: not valid JSON: "
        "Expecting value: line 1 column 13 (char 12)"
    ]


def test_extractor_is_generic() -> None:
    rules = (
        FieldRule("os", ("env", "os")),
        FieldRule("kinds", ("items", "*", "kind"), tools=frozenset({"ls"})),
        FieldRule("n", ("items",), fold="count"),
        FieldRule("first_tag", ("tag",), fold="first"),
        FieldRule("owner", ("owner",), transform=id_kind),
    )
    results = [
        ("probe", json.dumps({"env": {"os": "linux"}, "tag": "a", "owner": "team_42"})),
        ("ls", json.dumps({"items": {"x": {"kind": "dir"}, "y": {"kind": "file"}}})),
        ("other", json.dumps({"items": {"z": {"kind": "socket"}}, "tag": "b"})),
        ("probe", "not json"),
        ("probe", "Error: disk 3 full at 12:00"),
    ]
    assert extract_conditions(results, rules) == {
        "os": "linux",
        "kinds": "dir,file",
        "first_tag": "a",
        "owner": "team",
        "tool_error": "disk # full at #",
    }
    assert extract_conditions(
        [("t", json.dumps({"items": [1, 2, 3]}))], (FieldRule("n", ("items",), fold="count"),)
    ) == {"n": "3"}


def test_helpers() -> None:
    assert mask_identifiers("not enough seats on flight HAT290") == "not enough seats on flight #"
    assert id_kind("gift_card_8190333") == "gift_card"
    assert intent_label({"info": {"task": {"actions": []}}}) == ""
    assert intent_label({"info": {"task": {"actions": [{"name": "b"}, {"name": "a"}]}}}) == "a|b"


# --- the real data set -------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_items() -> list[dict[str, Any]]:
    if not TAU_FILE.exists():
        pytest.skip(f"tau-bench data not found at {TAU_FILE} (set EVAL_DATA_DIR to its folder)")
    return load_tau_bench(TAU_FILE)


def _scalars(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [s for v in node.values() for s in _scalars(v)]
    if isinstance(node, list):
        return [s for v in node for s in _scalars(v)]
    return [] if node is None else [str(node)]


def test_real_file_converts_and_validates(real_items: list[dict[str, Any]]) -> None:
    conv = convert_tau_bench(real_items)
    assert len(conv.trajectories) == 100
    assert not conv.skipped
    assert len({e["episode_id"] for e in conv.episodes}) == len(conv.episodes)
    for episode in conv.episodes:
        Episode.model_validate(episode)
    for episode in conv.trajectories:
        assert len(episode["conditions"]) <= 12
        assert len(episode["text"] or "") <= 2000
    messages = sum(len(item["traj"]) for item in real_items)
    roles = Counter(e["source_role"] for e in conv.episodes if e not in conv.trajectories)
    # every message but the 15 user turns that held only the stop marker
    assert roles == {"system": 100, "user": 845, "agent": 1381, "tool": 621}
    assert sum(roles.values()) == messages - 15
    assert len(set(conv.task_of_episode.values())) == 25
    assert len(set(conv.intent_of_episode.values())) == 14
    assert sum(e["outcome"] == "success" for e in conv.trajectories) == 31
    assert sum(bool(e["conditions"]) for e in conv.trajectories) >= 75
    calls = sum(
        1 for m in (m for i in real_items for m in i["traj"]) for _ in m.get("tool_calls") or []
    )
    assert sum(len(e["actions"]) for e in conv.trajectories) == calls


def test_real_file_leaks_nothing_from_the_gold(real_items: list[dict[str, Any]]) -> None:
    """A gold action name or argument value may show in an episode only if the run shows it.

    ``subject_id`` is the task's user id by contract and is left out of the check.
    """
    conv = convert_tau_bench(real_items)
    leaks: list[tuple[str, str]] = []
    by_session: dict[str, list[dict[str, Any]]] = {}
    for episode in conv.episodes:
        by_session.setdefault(episode["session_id"], []).append(episode)
    for item, session in zip(real_items, conv.sessions, strict=True):
        fields = ("goal", "actions", "conditions", "observations", "text")
        content = json.dumps(
            [{k: e.get(k) for k in fields} for e in by_session[session["session_id"]]],
            ensure_ascii=False,
        )
        run = json.dumps(item["traj"], ensure_ascii=False)  # the system prompt is the run's too
        for action in item["info"]["task"]["actions"]:
            for value in [action["name"], *_scalars(action.get("kwargs"))]:
                if len(value) >= 3 and value in content and value not in run:
                    leaks.append((session["session_id"], value))
        assert item["info"]["task"]["instruction"] not in content
    assert leaks == []
