"""Recorded answers instead of the API: ``extract.replay = FILE`` (JSONL keyed by custom_id).

Each line is ``{"custom_id": ..., "answer": {"facts": [...]}}`` (or ``"text": "<the answer
as the model would write it>"``), plus an optional ``"label"`` saying where the answers come
from. A replayed answer goes through the same parsing and the same rules as Claude's; a
request without a recorded answer gets none (nothing is invented). Facts from a replay are
stored with ``source = "replay"`` and never enter the answer cache, so they can never be
served later as if a model had given them; sessions are marked done under the model name
``replay:<file name>``, so a real key later extracts them again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Replay", "ReplayMessage", "TextBlock", "load_replay"]


@dataclass(frozen=True)
class TextBlock:
    text: str
    type: str = "text"


@dataclass(frozen=True)
class ReplayMessage:
    """Looks like an SDK message to the parser: text content and a stop reason."""

    content: list[TextBlock]
    stop_reason: str = "end_turn"
    id: str = "replay"


@dataclass(frozen=True)
class Replay:
    """Answers by custom_id, the file they came from and its label."""

    path: Path
    answers: dict[str, str]
    label: str

    @property
    def model(self) -> str:
        return f"replay:{self.path.name}"

    def message(self, custom_id: str) -> ReplayMessage | None:
        text = self.answers.get(custom_id)
        return None if text is None else ReplayMessage([TextBlock(text)])


def load_replay(path: str | Path) -> Replay:
    """Read a replay file; a bad line raises ValueError naming the file, line and field."""
    file = Path(path)
    if not file.is_file():
        msg = f"extract.replay: {file} not found"
        raise ValueError(msg)
    answers: dict[str, str] = {}
    labels: set[str] = set()
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item: Any = json.loads(line)
        except ValueError as exc:
            msg = f"{file}:{number}: not JSON ({exc})"
            raise ValueError(msg) from exc
        if not isinstance(item, dict) or not isinstance(item.get("custom_id"), str):
            msg = f"{file}:{number}: custom_id: a string is required"
            raise ValueError(msg)
        if "text" in item:
            text = str(item["text"])
        elif isinstance(item.get("answer"), dict):
            text = json.dumps(item["answer"], ensure_ascii=False)
        else:
            msg = f"{file}:{number}: answer: an object (or text) is required"
            raise ValueError(msg)
        answers[item["custom_id"]] = text
        if item.get("label"):
            labels.add(str(item["label"]))
    label = "; ".join(sorted(labels)) or "recorded answers"
    return Replay(file, answers, label)
