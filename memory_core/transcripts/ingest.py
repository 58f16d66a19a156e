"""``memctl ingest FILE --from openai-chat | anthropic-messages``: sessions through the write path.

Each line is adapted (``adapt_line``) and every episode it yields is validated with the same
exact path ingest uses, so a session is good or bad as a whole: a bad session is reported (line,
message index, field) and, with ``quarantine``, kept whole in the quarantine table (redacted),
never half-written. The good sessions' episodes then go through ``ingest_records``: the same
gate (secrets redacted in text and tool arguments, no authority for tool or agent claims), the
same idempotency (deterministic ids: a re-ingest is a no-op, a changed session a conflict) and
the same single commit. Errors from that path name the transcript line and message, not the
episode's position in the generated list.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memory_core.config import Settings
from memory_core.context import RunContext
from memory_core.embed import Embedder
from memory_core.errors import EpisodeConflict, FieldError, ValidationFailed
from memory_core.stages.ingest.blocks import exact_line
from memory_core.stages.ingest.stage import IngestResult, ingest_records, write_quarantine
from memory_core.stores import Stores
from memory_core.transcripts import Adapted, TranscriptError, TranscriptFormat, adapt_line

__all__ = ["TranscriptIngestResult", "ingest_transcripts", "read_sessions"]

logger = logging.getLogger(__name__)


@dataclass
class TranscriptIngestResult(IngestResult):
    """What ``ingest --from <chat format>`` did: ingest's own result (what was written) plus
    what the transcript held (sessions, episodes by role, trajectories and outcomes)."""

    format: str = ""
    sessions: int = 0
    episodes: int = 0
    trajectories: int = 0
    episodes_by_role: dict[str, int] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            **super().as_dict(),
            "format": self.format,
            "sessions": self.sessions,
            "episodes": self.episodes,
            "trajectories": self.trajectories,
            "episodes_by_role": self.episodes_by_role,
            "outcomes": self.outcomes,
        }


@dataclass
class Sessions:
    """The good lines as episode records (JSON, with the message each came from) and the bad
    lines with their reasons and raw text. The adapted dicts are not kept: only the JSON the
    write path reads."""

    records: list[str] = field(default_factory=list)
    origins: list[tuple[int, str]] = field(default_factory=list)  # (line, "messages[3]")
    errors: list[FieldError] = field(default_factory=list)
    bad_raw: dict[int, str] = field(default_factory=dict)
    lines: int = 0
    sessions: int = 0
    trajectories: int = 0
    roles: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)

    def add(self, adapted: Adapted) -> None:
        """Keep a session only if every episode it yields passes ingest's exact validation;
        otherwise record its errors, naming the message each episode came from."""
        records: list[str] = []
        errors: list[FieldError] = []
        seen: set[tuple[str, str]] = set()  # a session-wide problem is reported once
        for episode, origin in zip(adapted.episodes, adapted.origins, strict=True):
            record = json.dumps(episode, ensure_ascii=False)
            _, _, errs = exact_line(adapted.line, record, None)
            for e in errs:
                if (e.field, e.reason) not in seen:
                    seen.add((e.field, e.reason))
                    where = f"{origin} -> episode {e.field}"
                    errors.append(FieldError(adapted.line, where, e.reason, e.record_id))
            records.append(record)
        if errors:
            self.errors += errors
            return
        self.records += records
        self.origins += [(adapted.line, origin) for origin in adapted.origins]
        self.sessions += 1
        for episode, origin in zip(adapted.episodes, adapted.origins, strict=True):
            if origin != "trajectory":
                self.roles[episode["source_role"]] += 1
        if adapted.trajectory is not None:
            self.trajectories += 1
            self.outcomes[adapted.trajectory["outcome"]] += 1


def read_sessions(
    path: Path, fmt: TranscriptFormat, *, progress: Callable[[int], None] | None = None
) -> Sessions:
    """Adapt and validate every non-blank line of ``path``; never raises on bad lines.
    ``progress(bytes_read)`` now and then (the CLI's progress bar)."""
    out = Sessions()
    done = 0
    with Path(path).open("rb") as handle:  # line by line: the raw file is never held whole
        for number, data in enumerate(handle, start=1):
            _read_line(out, number, data.removesuffix(b"\n"), fmt)
            done += len(data)
            if progress is not None and number % 256 == 0:
                progress(done)
    if progress is not None:
        progress(done)
    return out


def _read_line(out: Sessions, number: int, data: bytes, fmt: TranscriptFormat) -> None:
    """One line into ``out``: its session's records, or its errors and raw text."""
    try:
        raw = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        out.lines += 1
        out.errors.append(FieldError(number, "(line)", f"not UTF-8 text: {exc.reason}"))
        out.bad_raw[number] = data.decode("utf-8", errors="replace")
        return
    if not raw.strip():
        return
    out.lines += 1
    try:
        adapted = adapt_line(number, raw, fmt)
    except TranscriptError as exc:
        out.errors.append(exc.error)
        out.bad_raw[number] = raw
        return
    before = len(out.errors)
    out.add(adapted)
    if len(out.errors) > before:
        out.bad_raw[number] = raw


def ingest_transcripts(
    stores: Stores,
    settings: Settings,
    ctx: RunContext,
    path: Path,
    *,
    fmt: TranscriptFormat,
    embedder: Embedder,
    quarantine: bool = False,
    progress: Callable[[int], None] | None = None,
) -> TranscriptIngestResult:
    """Ingest one JSONL file of sessions; all-or-nothing unless ``quarantine``;
    ``progress(bytes_read)`` while the file is read and adapted."""
    source = str(path)
    sessions = read_sessions(path, fmt, progress=progress)
    if sessions.errors and not quarantine:
        raise ValidationFailed(source, sessions.errors)
    records, origins = sessions.records, sessions.origins

    def where(error: FieldError) -> FieldError:
        line, origin = origins[error.line - 1]
        return FieldError(line, f"{origin} -> episode {error.field}", error.reason, error.record_id)

    try:
        written = ingest_records(
            stores, settings, ctx, records, embedder=embedder, quarantine=quarantine,
            source=source,
        )  # fmt: skip
    except ValidationFailed as exc:
        raise ValidationFailed(source, [where(e) for e in exc.errors]) from None
    except EpisodeConflict as exc:
        conflicts = [(origins[line - 1][0], eid) for line, eid in exc.conflicts]
        raise EpisodeConflict(source, conflicts) from None
    result = TranscriptIngestResult(
        path=source,
        format=fmt.value,
        lines=sessions.lines,
        sessions=sessions.sessions,
        episodes=len(records),
        trajectories=sessions.trajectories,
        episodes_by_role=dict(sorted(sessions.roles.items())),
        outcomes=dict(sorted(sessions.outcomes.items())),
        inserted=written.inserted,
        unchanged=written.unchanged,
        embedded=written.embedded,
        embed_cache_hits=written.embed_cache_hits,
        pending_embedding=written.pending_embedding,
        redactions=written.redactions,
        claims_without_authority=written.claims_without_authority,
        errors=sessions.errors + [where(e) for e in written.errors],
    )
    if quarantine:
        result.quarantined = written.quarantined + write_quarantine(
            stores, ctx, source, sessions.errors, sessions.bad_raw
        )
    logger.info(
        "ingest --from %s %s run=%s sessions=%d episodes=%d inserted=%d quarantined=%d",
        fmt.value,
        path.name,
        ctx.run_id,
        result.sessions,
        result.episodes,
        result.inserted,
        result.quarantined,
    )
    return result
