"""Turn LoCoMo long conversations into episode-contract records, with their QA for scoring.

Why: LoCoMo asks questions whose answers sit in specific turns of months-long, dated
conversations, so it measures whether recall finds the right episode (and the right time) after
consolidation. Each turn becomes one user-role episode with a real valid time; the questions,
answers and evidence stay outside the episodes and are returned only for scoring.

The source has a few flaws that the converter repairs or counts rather than hides: session
dates in free text ("1:56 pm on 8 May, 2023"), evidence written as "D8:6; D9:17" or "D:11:26",
and evidence that names a turn which does not exist.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

__all__ = [
    "REPLAY_LABEL",
    "LocomoConversion",
    "LocomoQuestion",
    "convert_locomo",
    "load_locomo",
    "observation_facts",
    "observation_replay",
    "parse_evidence",
    "parse_locomo_datetime",
]

_MONTHS = {
    name: number
    for number, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}
_TIME = re.compile(r"\b(\d{1,2})(?:[:.](\d{2}))?\s*([ap])\.?\s*m\b\.?", re.IGNORECASE)
_TIME_24H = re.compile(r"\b(\d{1,2}):(\d{2})(?::\d{2})?\b")
_DAY_MONTH_YEAR = re.compile(r"\b(\d{1,2})(?:st|nd|rd|th)?\s+([A-Za-z]+)\.?,?\s+(\d{4})\b")
_MONTH_DAY_YEAR = re.compile(r"\b([A-Za-z]+)\.?\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})\b")
_SESSION_KEY = re.compile(r"^session_(\d+)$")
_EVIDENCE = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)", re.IGNORECASE)


def parse_locomo_datetime(text: str) -> datetime:
    """Parse a LoCoMo session stamp such as ``"1:56 pm on 8 May, 2023"`` as UTC.

    Accepts 12-hour ("1:56 pm", "9 am") or 24-hour ("13:56") times, "8 May, 2023" or
    "May 8, 2023" dates in either order around the time, and ISO 8601. A missing time means
    midnight; anything without a recognisable date raises ``ValueError``.
    """
    raw = " ".join(str(text).split())
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        pass
    else:
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)

    hour = minute = 0
    rest = raw
    if match := _TIME.search(raw):
        hour, minute = int(match.group(1)) % 12, int(match.group(2) or 0)
        if match.group(3).lower() == "p":
            hour += 12
        rest = raw[: match.start()] + " " + raw[match.end() :]
    elif match := _TIME_24H.search(raw):
        hour, minute = int(match.group(1)), int(match.group(2))
        rest = raw[: match.start()] + " " + raw[match.end() :]

    date: tuple[int, int, int] | None = None
    if (m := _DAY_MONTH_YEAR.search(rest)) and m.group(2).lower() in _MONTHS:
        date = (int(m.group(3)), _MONTHS[m.group(2).lower()], int(m.group(1)))
    elif (m := _MONTH_DAY_YEAR.search(rest)) and m.group(1).lower() in _MONTHS:
        date = (int(m.group(3)), _MONTHS[m.group(1).lower()], int(m.group(2)))
    if date is None:
        msg = f"unrecognised LoCoMo date/time: {text!r}"
        raise ValueError(msg)
    try:
        return datetime(*date, hour, minute, tzinfo=UTC)
    except ValueError as exc:
        msg = f"invalid LoCoMo date/time {text!r}: {exc}"
        raise ValueError(msg) from exc


def parse_evidence(raw: Any) -> tuple[list[str], bool]:
    """Dialogue ids in one evidence entry, and whether the entry had to be repaired.

    ``"D1:3"`` -> (["D1:3"], False); ``"D8:6; D9:17"`` -> (["D8:6", "D9:17"], True);
    ``"D:11:26"`` -> (["D11:26"], True); ``"D"`` or a non-string -> ([], True).
    """
    if not isinstance(raw, str):
        return [], True
    ids = [f"D{a}:{b}" for a, b in _EVIDENCE.findall(raw)]
    return ids, ids != [raw.strip()]


@dataclass(frozen=True)
class LocomoQuestion:
    """One QA item, pointing at episode ids; for scoring only, never ingested."""

    conversation_id: str
    question: str
    answer: str | None
    evidence_ids: tuple[str, ...]
    category: int | None
    adversarial_answer: str | None = None
    unmapped_evidence: tuple[str, ...] = ()


@dataclass(frozen=True)
class LocomoConversion:
    """Episodes to ingest, questions to score with, and what the source got wrong.

    ``repaired_evidence`` counts evidence entries that were not a single well-formed dia_id;
    ``unmapped_evidence`` lists (conversation id, reference) pairs naming no turn;
    ``undated_sessions`` lists sessions whose date could not be parsed (they are placed one day
    after the previous session so order is kept).
    """

    episodes: list[dict[str, Any]]
    questions: list[LocomoQuestion]
    repaired_evidence: int = 0
    unmapped_evidence: list[tuple[str, str]] = field(default_factory=list)
    undated_sessions: list[str] = field(default_factory=list)


def load_locomo(path: Path) -> list[dict[str, Any]]:
    """Read a LoCoMo file (a JSON list of conversations with ``sample_id``)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, list):
        msg = f"{path}: expected a JSON list of LoCoMo conversations, got {type(data).__name__}"
        raise ValueError(msg)
    return data


def _rfc3339(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _turn_text(turn: Mapping[str, Any]) -> str | None:
    parts = [str(turn.get("text") or "").strip()]
    caption = turn.get("blip_caption")
    if caption and str(caption).strip():
        parts.append(f"[image: {str(caption).strip()}]")
    text = " ".join(p for p in parts if p)
    return text or None


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


def convert_locomo(
    items: list[dict[str, Any]], *, namespace: str = "conversation"
) -> LocomoConversion:
    """One episode per dialogue turn; each conversation is its own tenant.

    A turn's ``occurred_at`` is its session's date plus one minute per earlier turn in the
    session, so the order of turns survives sorting by valid time.
    """
    episodes: list[dict[str, Any]] = []
    questions: list[LocomoQuestion] = []
    repaired = 0
    unmapped: list[tuple[str, str]] = []
    undated: list[str] = []

    for item in items:
        sample_id = str(item["sample_id"])
        conversation = item.get("conversation") or {}
        sessions = sorted(
            (int(m.group(1)), turns)
            for key, turns in conversation.items()
            if (m := _SESSION_KEY.match(key)) and isinstance(turns, list)
        )
        known: set[str] = set()
        previous: datetime | None = None
        for number, turns in sessions:
            stamp = conversation.get(f"session_{number}_date_time")
            try:
                begins = parse_locomo_datetime(stamp) if stamp else None
            except ValueError:
                begins = None
            if begins is None:
                undated.append(f"{sample_id}:session_{number}")
                begins = (previous or datetime(2000, 1, 1, tzinfo=UTC)) + timedelta(days=1)
            previous = begins
            for index, turn in enumerate(t for t in turns if isinstance(t, Mapping)):
                dia_id = str(turn.get("dia_id") or f"D{number}:{index + 1}")
                known.add(dia_id)
                episodes.append(
                    {
                        "episode_id": f"{sample_id}:{dia_id}",
                        "tenant_id": sample_id,
                        "subject_id": str(turn.get("speaker") or "unknown"),
                        "namespace": namespace,
                        "session_id": f"{sample_id}:session_{number}",
                        "occurred_at": _rfc3339(begins + timedelta(minutes=index)),
                        "source_role": "user",
                        "goal": None,
                        "actions": [],
                        "outcome": "unknown",
                        "conditions": {},
                        "observations": [],
                        "text": _turn_text(turn),
                        "claims": [],
                    }
                )

        for qa in item.get("qa") or []:
            evidence: list[str] = []
            missing: list[str] = []
            for raw in qa.get("evidence") or []:
                ids, was_repaired = parse_evidence(raw)
                repaired += was_repaired
                if not ids:
                    missing.append(str(raw))
                for dia_id in ids:
                    if dia_id in known:
                        episode_id = f"{sample_id}:{dia_id}"
                        if episode_id not in evidence:
                            evidence.append(episode_id)
                    else:
                        missing.append(dia_id)
            unmapped.extend((sample_id, ref) for ref in missing)
            category = qa.get("category")
            questions.append(
                LocomoQuestion(
                    conversation_id=sample_id,
                    question=str(qa.get("question", "")),
                    answer=_optional_str(qa.get("answer")),
                    evidence_ids=tuple(evidence),
                    category=int(category) if category is not None else None,
                    adversarial_answer=_optional_str(qa.get("adversarial_answer")),
                    unmapped_evidence=tuple(missing),
                )
            )
    return LocomoConversion(episodes, questions, repaired, unmapped, undated)


# -- LoCoMo's observation annotations as replayed extraction answers --------------------------

REPLAY_LABEL = "replayed dataset annotations, not Claude"
_WORDS = re.compile(r"[a-z0-9]+")


def _observation_predicate(sentence: str, speaker: str) -> str:
    """A predicate for an annotation sentence, which has none: ``observation:`` and the first
    words after the speaker's name. Nearly unique per sentence on purpose: distinct
    annotations must not be read as contradicting values of one shared predicate."""
    words = [
        w for w in _WORDS.findall(sentence.lower()) if w not in _WORDS.findall(speaker.lower())
    ]
    return "observation:" + "_".join(words[:6] or ["note"])


def observation_facts(items: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Facts per session id (``conv-26:session_3``) from the annotations, as an extraction
    answer would state them: the speaker is the subject, the sentence the object, the
    annotated turns (episode ids) the evidence. No importance: the dataset has none."""
    out: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        sample_id = str(item["sample_id"])
        for key, by_speaker in sorted((item.get("observation") or {}).items()):
            m = re.match(r"^session_(\d+)_observation$", key)
            if not m or not isinstance(by_speaker, Mapping):
                continue
            session = f"{sample_id}:session_{m.group(1)}"
            for speaker, facts in sorted(by_speaker.items()):
                for entry in facts or []:
                    if not isinstance(entry, list | tuple) or len(entry) < 2:
                        continue
                    sentence, refs = str(entry[0]).strip(), entry[1]
                    dia_ids: list[str] = []
                    for raw in refs if isinstance(refs, list) else [refs]:
                        dia_ids += parse_evidence(raw)[0]
                    if not sentence or not dia_ids:
                        continue
                    out.setdefault(session, []).append({
                        "subject_id": str(speaker),
                        "predicate": _observation_predicate(sentence, str(speaker)),
                        "object": sentence[:500],
                        "kind": "fact",
                        "valid_from": None,
                        "valid_to": None,
                        "evidence": [f"{sample_id}:{d}" for d in dict.fromkeys(dia_ids)],
                        "speaker_role": "user",
                        "importance": None,
                    })  # fmt: skip
    return out


def observation_replay(items: list[dict[str, Any]], plans: Sequence[Any]) -> list[dict[str, Any]]:
    """Replay lines (``{custom_id, answer, label}``) for the requests the extract stage planned
    (``stages/extract/plan.py``): each request's answer is the annotated facts of the sessions
    it carries. Evidence is given as episode ids; the stage's rules check it like any answer."""
    facts = observation_facts(items)
    lines = []
    for plan in plans:
        answer = [f for s in plan.sessions for f in facts.get(s.session_key, [])]
        lines.append({"custom_id": plan.custom_id, "answer": {"facts": answer},
                      "label": REPLAY_LABEL})  # fmt: skip
    return lines
