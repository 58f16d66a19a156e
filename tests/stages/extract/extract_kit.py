"""Conversations and a fake extractor for the extract-stage tests.

The fake answers an extraction request the way a careful model would, from the request body
it was really sent (the SDK serialised it): it reads the ``[tN] role speaker: text`` lines and
maps a few phrasings to facts, citing the refs it saw. Tests that need a bad answer override
``FakeAnthropic.answer``.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from memory_core.config import Settings
from memory_core.context import RunContext
from memory_core.embed import HashEmbedder
from memory_core.stages.ingest import ingest_records
from memory_core.stores import Stores

T0 = datetime(2026, 7, 1, 9, 0, tzinfo=UTC)
NOW = datetime(2026, 8, 1, 12, 0, tzinfo=UTC)
SECRET = "sk-ant-api03-" + "Zq7" * 14  # planted in a user turn; ingest must redact it
PASSWORD_URL = "postgres://app:Pw-s3cr3tValue1@db.internal:5432/app"

_LINE = re.compile(r"^\[(t\d+)\] (user(?: (\S+))?|agent|tool|system): (.*)$")
_SESSION = re.compile(r'^<session id="[^"]*" date="[^"]*"(?: user="([^"]*)")?>$')
RULES: list[tuple[str, str, str, str, int]] = [
    # (phrase in the turn, predicate, object, kind, importance)
    ("i am vegetarian", "diet", "vegetarian", "fact", 5),
    ("i'm vegetarian", "diet", "vegetarian", "fact", 5),
    ("window seat", "prefers_seat", "window", "preference", 3),
    ("aisle seat", "prefers_seat", "aisle", "preference", 4),
    ("i love hiking", "likes", "hiking in the mountains", "preference", 3),
    ("mountain walks are my thing", "enjoys", "hiking in mountains", "preference", 3),
    ("the customer is a gold member", "membership", "gold", "fact", 4),
]


def turns_of(params: dict[str, Any]) -> list[tuple[str, str, str | None, str]]:
    """(ref, role, speaker or None, text) of every turn in a request's user message."""
    out = []
    user = None
    for line in params["messages"][0]["content"].splitlines():
        if m := _SESSION.match(line):
            user = m.group(1)
        elif m := _LINE.match(line):
            role = "user" if m.group(2).startswith("user") else m.group(2)
            out.append((m.group(1), role, m.group(3) or (user if role == "user" else None),
                        m.group(4)))  # fmt: skip
    return out


def fake_facts(params: dict[str, Any]) -> list[dict[str, Any]]:
    facts = []
    turns = turns_of(params)
    speakers = [s for _, r, s, _ in turns if r == "user" and s]
    for ref, role, speaker, text in turns:
        low = text.lower()
        for phrase, predicate, obj, kind, importance in RULES:
            if phrase in low:
                facts.append({
                    "subject_id": speaker or (speakers[0] if speakers else "nobody"),
                    "predicate": predicate, "object": obj, "kind": kind,
                    "valid_from": None, "valid_to": None, "evidence": [ref],
                    "speaker_role": role, "importance": importance,
                })  # fmt: skip
    return facts


def extract_answer(params: dict[str, Any], attempt: int) -> str:
    """FakeAnthropic.answer for extraction requests."""
    return json.dumps({"facts": fake_facts(params)})


def turn(eid: str, session: str, minutes: int, text: str, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "episode_id": eid,
        "tenant_id": "acme",
        "subject_id": "u1",
        "namespace": "chat",
        "session_id": session,
        "occurred_at": (T0 + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z"),
        "source_role": "user",
        "text": text,
    }
    base.update(fields)
    return base


def conversation() -> list[dict[str, Any]]:
    """u1 over three sessions; an agent's claim about u1; u2 in their own session."""
    return [
        turn("a1", "s1", 0, "Hi, I am vegetarian, please note that. " + f"my key is {SECRET}"),
        turn("a2", "s1", 1, "Noted. The customer is a gold member.", source_role="agent"),
        turn("a3", "s1", 2, f"I'd like a window seat. Also {PASSWORD_URL}"),
        turn("b1", "s2", 60 * 24, "Again: I'm vegetarian."),
        turn("b2", "s2", 60 * 24 + 1, "I love hiking on weekends."),
        turn("c1", "s3", 60 * 48, "Mountain walks are my thing, honestly."),
        turn("d1", "s9", 60, "I want an aisle seat", subject_id="u2"),
        turn("t1", "s1", 3, "[tool] seat map: 12A free", source_role="tool"),
    ]


def ingest(stores: Stores, settings: Settings, episodes: list[dict[str, Any]]) -> None:
    result = ingest_records(
        stores, settings, RunContext(now=NOW), [json.dumps(e) for e in episodes],
        embedder=HashEmbedder(settings.embed.dim), source="chat.jsonl",
    )  # fmt: skip
    assert result.inserted == len(episodes), result
