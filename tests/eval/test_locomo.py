"""LoCoMo converter: the turn mapping, date parsing, evidence repair, and the real data file."""

from __future__ import annotations

import copy
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memory_core.eval.locomo import (
    convert_locomo,
    load_locomo,
    parse_evidence,
    parse_locomo_datetime,
)
from memory_core.models import Episode

DATA_DIR = Path(
    os.environ.get("EVAL_DATA_DIR", Path(__file__).resolve().parents[3] / "shared" / "data")
)
LOCOMO_FILE = DATA_DIR / "locomo_5conv.json"


@pytest.fixture
def items() -> list[dict[str, Any]]:
    return [
        {
            "sample_id": "conv-x",
            "conversation": {
                "speaker_a": "Ann",
                "speaker_b": "Bob",
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_1": [
                    {"speaker": "Ann", "dia_id": "D1:1", "text": "Hi Bob! I adopted a cat."},
                    {
                        "speaker": "Bob",
                        "dia_id": "D1:2",
                        "text": "Look at my new bike.",
                        "img_url": ["https://example.com/bike.jpg"],
                        "blip_caption": "a photo of a red bicycle",
                        "query": "red bike",
                    },
                    {"speaker": "Ann", "dia_id": "D1:3", "text": "Nice! Her name is Luna."},
                ],
                # a dated session without turns, as in the real file: ignored
                "session_2_date_time": "9:00 am on 9 May, 2023",
            },
            "qa": [
                {
                    "question": "What did Ann adopt?",
                    "answer": "a cat",
                    "evidence": ["D1:1"],
                    "category": 1,
                },
                {"question": "Name?", "answer": "Luna", "evidence": ["D1:1; D1:3"], "category": 1},
                {"question": "Bike?", "answer": 2023, "evidence": ["D:1:2", "D1:2"], "category": 2},
                {"question": "Ghost?", "answer": "x", "evidence": ["D1:9", "D"], "category": 4},
                {"question": "Dog?", "adversarial_answer": "Rex", "evidence": [], "category": 5},
            ],
            "event_summary": {"events_session_1": {"Ann": ["adopted a cat"]}},
            "observation": {},
        }
    ]


def test_maps_one_episode_per_turn(items: list[dict[str, Any]]) -> None:
    conv = convert_locomo(items)
    assert [e["episode_id"] for e in conv.episodes] == ["conv-x:D1:1", "conv-x:D1:2", "conv-x:D1:3"]
    first, second, third = conv.episodes
    assert first["tenant_id"] == "conv-x"
    assert (first["subject_id"], second["subject_id"]) == ("Ann", "Bob")
    assert first["namespace"] == "conversation"
    assert first["session_id"] == "conv-x:session_1"
    assert first["source_role"] == "user"
    assert first["outcome"] == "unknown"
    assert first["goal"] is None and first["claims"] == []
    assert "vector" not in first
    assert [e["occurred_at"] for e in conv.episodes] == [
        "2023-05-08T13:56:00Z",
        "2023-05-08T13:57:00Z",
        "2023-05-08T13:58:00Z",
    ]
    assert second["text"] == "Look at my new bike. [image: a photo of a red bicycle]"
    assert third["text"] == "Nice! Her name is Luna."
    for episode in conv.episodes:
        Episode.model_validate(episode)
    assert convert_locomo(items, namespace="chat").episodes[0]["namespace"] == "chat"


def test_questions_map_evidence_and_count_bad_refs(items: list[dict[str, Any]]) -> None:
    conv = convert_locomo(items)
    adopt, name, bike, ghost, dog = conv.questions
    assert adopt.evidence_ids == ("conv-x:D1:1",) and adopt.answer == "a cat"
    assert name.evidence_ids == ("conv-x:D1:1", "conv-x:D1:3")
    assert bike.evidence_ids == ("conv-x:D1:2",)  # repaired and deduplicated
    assert bike.answer == "2023" and bike.category == 2
    assert ghost.evidence_ids == () and ghost.unmapped_evidence == ("D1:9", "D")
    assert dog.answer is None and dog.adversarial_answer == "Rex" and dog.evidence_ids == ()
    assert conv.repaired_evidence == 3  # "D1:1; D1:3", "D:1:2", "D"
    assert conv.unmapped_evidence == [("conv-x", "D1:9"), ("conv-x", "D")]
    assert conv.undated_sessions == []
    # answers never enter an episode
    assert "Rex" not in json.dumps(conv.episodes)


def test_deterministic_and_input_untouched(items: list[dict[str, Any]]) -> None:
    before = copy.deepcopy(items)
    first, second = convert_locomo(items), convert_locomo(copy.deepcopy(items))
    assert first == second
    assert items == before


def test_undated_session_keeps_order(items: list[dict[str, Any]]) -> None:
    conversation = items[0]["conversation"]
    conversation["session_2_date_time"] = "sometime"
    conversation["session_2"] = [{"speaker": "Bob", "dia_id": "D2:1", "text": "Later."}]
    conv = convert_locomo(items)
    assert conv.undated_sessions == ["conv-x:session_2"]
    assert conv.episodes[-1]["occurred_at"] == "2023-05-09T13:56:00Z"


def test_sessions_sort_numerically(items: list[dict[str, Any]]) -> None:
    conversation = items[0]["conversation"]
    conversation["session_10_date_time"] = "10:00 am on 1 June, 2023"
    conversation["session_10"] = [{"speaker": "Bob", "dia_id": "D10:1", "text": "June."}]
    conversation["session_2"] = [{"speaker": "Bob", "dia_id": "D2:1", "text": "May 9."}]
    ids = [e["episode_id"] for e in convert_locomo(items).episodes]
    assert ids[-2:] == ["conv-x:D2:1", "conv-x:D10:1"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
        ("12:09 am on 13 September, 2023", datetime(2023, 9, 13, 0, 9, tzinfo=UTC)),
        ("12:30 pm on 1 January, 2024", datetime(2024, 1, 1, 12, 30, tzinfo=UTC)),
        ("10:37 AM on 27 June 2023", datetime(2023, 6, 27, 10, 37, tzinfo=UTC)),
        ("9 pm on 3 Sept, 2022", datetime(2022, 9, 3, 21, 0, tzinfo=UTC)),
        ("May 8, 2023 at 1:56 p.m.", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
        ("8 May 2023 13:56", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
        ("  1:56  pm on  8 May, 2023 ", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
        ("8 May, 2023", datetime(2023, 5, 8, tzinfo=UTC)),
        ("2023-05-08T13:56:00Z", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
    ],
)
def test_parse_locomo_datetime(text: str, expected: datetime) -> None:
    assert parse_locomo_datetime(text) == expected


@pytest.mark.parametrize("text", ["", "sometime", "1:56 pm on 31 February, 2023", "8 Foo, 2023"])
def test_parse_locomo_datetime_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="LoCoMo date"):
        parse_locomo_datetime(text)


@pytest.mark.parametrize(
    ("raw", "ids", "repaired"),
    [
        ("D1:3", ["D1:3"], False),
        ("D8:6; D9:17", ["D8:6", "D9:17"], True),
        ("D:11:26", ["D11:26"], True),
        ("D", [], True),
        (None, [], True),
    ],
)
def test_parse_evidence(raw: Any, ids: list[str], repaired: bool) -> None:
    assert parse_evidence(raw) == (ids, repaired)


# --- the real data set -------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_items() -> list[dict[str, Any]]:
    if not LOCOMO_FILE.exists():
        pytest.skip(f"LoCoMo data not found at {LOCOMO_FILE} (set EVAL_DATA_DIR to its folder)")
    return load_locomo(LOCOMO_FILE)


def test_real_file_converts_and_validates(real_items: list[dict[str, Any]]) -> None:
    conv = convert_locomo(real_items)
    ids = [e["episode_id"] for e in conv.episodes]
    assert len(ids) == len(set(ids)) == 2760
    assert {e["tenant_id"] for e in conv.episodes} == {i["sample_id"] for i in real_items}
    for episode in conv.episodes:
        Episode.model_validate(episode)
    assert conv.undated_sessions == []
    # turns keep their order in valid time within each conversation
    for tenant in {e["tenant_id"] for e in conv.episodes}:
        times = [e["occurred_at"] for e in conv.episodes if e["tenant_id"] == tenant]
        assert times == sorted(times)


def test_real_file_evidence_maps_to_episodes(real_items: list[dict[str, Any]]) -> None:
    conv = convert_locomo(real_items)
    known = {e["episode_id"] for e in conv.episodes}
    assert len(conv.questions) == 999
    with_evidence = [q for q in conv.questions if q.evidence_ids]
    assert all(set(q.evidence_ids) <= known for q in with_evidence)
    assert len(with_evidence) == 997
    # the source's own flaws, counted: "D8:6; D9:17", "D:11:26" repaired; "D10:19" names no
    # turn of conv-42 and "D" names none at all
    assert conv.repaired_evidence == 3
    assert sorted(conv.unmapped_evidence) == [("conv-42", "D"), ("conv-42", "D10:19")]
