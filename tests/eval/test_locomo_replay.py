"""LoCoMo observation annotations as replayed extraction answers, through the real stage."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memory_core.config import Settings
from memory_core.context import RunContext
from memory_core.embed import HashEmbedder
from memory_core.eval.locomo import (
    REPLAY_LABEL,
    convert_locomo,
    observation_facts,
    observation_replay,
)
from memory_core.stages.extract import extract_facts, load_replay
from memory_core.stages.extract.plan import load_sessions, pack_requests
from memory_core.stages.extract.prompt import prompt_version
from memory_core.stages.ingest import ingest_records
from memory_core.stores import Stores
from memory_core.stores.extract import extracted_facts
from memory_core.stores.llm import ledger_entries

NOW = datetime(2024, 1, 1, tzinfo=UTC)


def conversation() -> list[dict[str, Any]]:
    return [
        {
            "sample_id": "conv-x",
            "conversation": {
                "speaker_a": "Ann",
                "speaker_b": "Bob",
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_1": [
                    {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat named Tom."},
                    {"speaker": "Bob", "dia_id": "D1:2", "text": "Nice! I run marathons."},
                ],
                "session_2_date_time": "9 am on 9 June, 2023",
                "session_2": [
                    {"speaker": "Ann", "dia_id": "D2:1", "text": "Tom the cat is sick."},
                ],
            },
            "observation": {
                "session_1_observation": {
                    "Ann": [["Ann adopted a cat named Tom.", "D1:1"]],
                    "Bob": [["Bob runs marathons.", "D1:2"], ["Bob likes cats.", "D9:9"]],
                },
                "session_2_observation": {"Ann": [["Ann's cat Tom is sick.", ["D2:1"]]]},
            },
            "qa": [],
        }
    ]


def test_observation_facts_name_the_speaker_and_evidence_turns() -> None:
    facts = observation_facts(conversation())
    (ann,) = facts["conv-x:session_2"]
    assert ann["subject_id"] == "Ann" and ann["evidence"] == ["conv-x:D2:1"]
    assert ann["object"] == "Ann's cat Tom is sick." and ann["importance"] is None
    preds = {f["predicate"] for f in facts["conv-x:session_1"]}
    assert len(preds) == 3 and all(p.startswith("observation:") for p in preds)


def test_replayed_annotations_go_through_the_stage_rules(
    stores: Stores, settings: Settings, tmp_path: Path
) -> None:
    items = conversation()
    episodes = convert_locomo(items).episodes
    result = ingest_records(
        stores, settings, RunContext(now=NOW), [json.dumps(e) for e in episodes],
        embedder=HashEmbedder(384), source="locomo.json",
    )  # fmt: skip
    assert result.inserted == 3
    file = tmp_path / "replay.jsonl"
    pv = prompt_version(settings.extract)
    sessions, _ = load_sessions(
        stores, settings.extract, model=f"replay:{file.name}", prompt_version=pv, done={}
    )
    plans = pack_requests(sessions, settings.extract, model="replay", prompt_version=pv)
    lines = observation_replay(items, plans)
    assert [x["custom_id"] for x in lines] == [p.custom_id for p in plans]
    file.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert load_replay(file).label == REPLAY_LABEL
    cfg = settings.model_copy(
        update={"extract": settings.extract.model_copy(update={"replay": str(file)})}
    )
    done = extract_facts(stores, cfg, RunContext(now=NOW, run_id="r1"))
    assert done.mode == "replay" and done.label and REPLAY_LABEL in done.label
    assert done.dropped == {"unknown_evidence": 1}  # "D9:9" names no turn of the request
    facts = extracted_facts(stores.meta)
    assert {f.subject_id for f in facts} == {"Ann", "Bob"}
    assert all(f.source == "replay" and f.model is None for f in facts)
    with stores.meta.connect() as con:  # replayed answers never enter the answer cache
        assert con.execute("SELECT count(*) FROM score_cache").fetchone() == (0,)
    (outcome,) = [e for e in ledger_entries(stores.meta, run_id="r1") if e.mode == "outcome"]
    assert outcome.requests == 0 and outcome.detail["label"] == done.label
    assert extract_facts(stores, cfg, RunContext(now=NOW)).requests_planned == 0


def test_a_request_without_a_recorded_answer_gets_none(
    stores: Stores, settings: Settings, tmp_path: Path
) -> None:
    episodes = convert_locomo(conversation()).episodes
    ingest_records(
        stores, settings, RunContext(now=NOW), [json.dumps(e) for e in episodes],
        embedder=HashEmbedder(384), source="locomo.json",
    )  # fmt: skip
    file = tmp_path / "empty.jsonl"
    file.write_text('{"custom_id": "x_other", "answer": {"facts": []}}\n')
    cfg = settings.model_copy(
        update={"extract": settings.extract.model_copy(update={"replay": str(file)})}
    )
    done = extract_facts(stores, cfg, RunContext(now=NOW))
    assert len(done.no_recorded_answer) == 1 and done.facts_written == 0
    assert extracted_facts(stores.meta) == []


def test_a_bad_replay_line_names_file_line_and_field(tmp_path: Path) -> None:
    file = tmp_path / "bad.jsonl"
    file.write_text('{"custom_id": "x_1", "answer": {"facts": []}}\n{"answer": {}}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: custom_id: a string is required"):
        load_replay(file)
