"""LLM control-plane tables: score cache, Message Batches in flight, and the spend ledger.

All SQL for ``score_cache``, ``llm_batches`` and ``llm_ledger`` lives here so the scoring stage
deals only in models. Two properties matter more than the rest:

* A batch row is written the moment the API accepts a batch and *before* anyone polls it; a run
  that crashes afterwards finds the row (status not ``collected``) and resumes polling the same
  batch instead of paying for the same requests twice.
* The cache is keyed by (candidate content hash, model, prompt version), so an unchanged rerun
  makes no API call, and a change to any of the three is a miss rather than a stale hit.

``llm_batches.custom_ids`` holds a JSON object ``{model, prompt_version, items: [{custom_id,
candidate_id, content_hash}]}``: the model and prompt version are needed to cache a resumed
batch's answers under the right key, and the content hash to refuse applying an answer to a
candidate whose content changed while the batch ran.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from memory_core.stores.meta import MetaStore
from memory_core.stores.status_writes import MetaStatuses, write_status

if TYPE_CHECKING:
    import duckdb

__all__ = [
    "BatchItem",
    "BatchRecord",
    "BatchStatus",
    "CachedScore",
    "LedgerEntry",
    "delete_cached_scores",
    "get_cached_scores",
    "insert_batch",
    "invalid_answers",
    "ledger_entries",
    "list_batches",
    "open_batches",
    "put_cached_scores",
    "record_answers_and_spend",
    "record_ledger",
    "set_batch_status",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class BatchStatus(StrEnum):
    """Where a Message Batch is in its life, as far as this pipeline knows."""

    submitted = "submitted"  # accepted by the API, never polled yet
    in_progress = "in_progress"  # polled, still processing
    ended = "ended"  # processing ended, results not yet applied
    collected = "collected"  # results read and applied (or cached): done
    lost = "lost"  # the API no longer knows it (404, archived): items get resubmitted


OPEN_STATUSES = (BatchStatus.submitted, BatchStatus.in_progress, BatchStatus.ended)
# Prompt versions of digest-summary batches (stages/digest_summary.py) start with this; the
# score stage resumes every other open batch, that stage only its own.
DIGEST_SUMMARY_PROMPT = "digest-summary"
# Prompt versions of fact-extraction batches (stages/extract) start with this; same rule.
EXTRACT_PROMPT = "extract"
# Prompt versions of workflow-text batches (stages/score/workflow_text.py); same rule.
WORKFLOW_PROMPT = "workflow"
# Batches of these prompts belong to their own stages; the score stage leaves them alone.
OWN_STAGE_PROMPTS = (DIGEST_SUMMARY_PROMPT, EXTRACT_PROMPT, WORKFLOW_PROMPT)


class CachedScore(BaseModel):
    """One validated LLM answer, reusable for the same content, model and prompt version."""

    model_config = _FROZEN
    content_hash: str
    model: str
    prompt_version: str
    candidate_id: str | None = None
    score: float
    body: dict[str, Any] = Field(description="the validated structured answer")
    created_at: datetime | None = None


class BatchItem(BaseModel):
    model_config = _FROZEN
    custom_id: str
    candidate_id: str
    content_hash: str


class BatchRecord(BaseModel):
    model_config = _FROZEN
    batch_id: str
    run_id: str
    status: BatchStatus
    model: str
    prompt_version: str
    items: list[BatchItem]
    created_at: datetime
    ended_at: datetime | None = None
    collected_at: datetime | None = None

    def item_for(self, custom_id: str) -> BatchItem | None:
        return next((i for i in self.items if i.custom_id == custom_id), None)


LedgerMode = Literal["sync", "batch_submit", "batch", "outcome", "invalid"]


class LedgerEntry(BaseModel):
    """One line of spend: tokens and cost as the API reported them, or an outcome summary."""

    model_config = _FROZEN
    run_id: str
    logged_at: datetime
    mode: LedgerMode
    batch_id: str | None = None
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0
    fallbacks: int = 0
    detail: dict[str, Any] = Field(default_factory=dict)
    entry_id: str = Field(default_factory=lambda: f"llm_{uuid.uuid4().hex[:20]}")


# -- score cache -------------------------------------------------------------------------------


def get_cached_scores(
    meta: MetaStore, hashes: Iterable[str], *, model: str, prompt_version: str
) -> dict[str, CachedScore]:
    """Cached answers by content hash for this model and prompt version."""
    wanted = sorted(set(hashes))
    if not wanted:
        return {}
    with meta.connect() as con:
        rows = con.execute(
            """SELECT content_hash, candidate_id, score, body, created_at FROM score_cache
            WHERE model = ? AND prompt_version = ? AND list_contains(?, content_hash)""",
            [model, prompt_version, wanted],
        ).fetchall()
    return {
        r[0]: CachedScore(
            content_hash=r[0],
            model=model,
            prompt_version=prompt_version,
            candidate_id=r[1],
            score=r[2],
            body=json.loads(r[3]),
            created_at=r[4],
        )
        for r in rows
    }


def put_cached_scores(meta: MetaStore, scores: Iterable[CachedScore], *, now: datetime) -> int:
    """Store answers; a second answer for the same key replaces the first (same content)."""
    rows = [
        (
            s.content_hash,
            s.model,
            s.prompt_version,
            s.candidate_id,
            s.score,
            json.dumps(s.body, sort_keys=True),
            s.created_at or now,
        )
        for s in scores
    ]
    if not rows:
        return 0
    with meta.transaction() as con:
        con.executemany(
            """INSERT INTO score_cache VALUES (?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (content_hash, model, prompt_version) DO UPDATE SET
            candidate_id = excluded.candidate_id, score = excluded.score,
            body = excluded.body, created_at = excluded.created_at""",
            rows,
        )
    return len(rows)


def delete_cached_scores(meta: MetaStore, candidate_ids: Iterable[str]) -> int:
    """Forgetting reaches the cache too (invariant 7): drop every answer about these ids."""
    ids = sorted(set(candidate_ids))
    if not ids:
        return 0
    with meta.transaction() as con:
        row = con.execute(
            "SELECT count(*) FROM score_cache WHERE list_contains(?, candidate_id)", [ids]
        ).fetchone()
        con.execute("DELETE FROM score_cache WHERE list_contains(?, candidate_id)", [ids])
    return int(row[0]) if row else 0


# -- batches -----------------------------------------------------------------------------------


def insert_batch(meta: MetaStore, record: BatchRecord) -> None:
    """Record a batch the API accepted; must happen before the first poll (crash-resume)."""
    payload = {
        "model": record.model,
        "prompt_version": record.prompt_version,
        "items": [i.model_dump() for i in record.items],
    }
    with meta.transaction() as con:
        con.execute(
            """INSERT INTO llm_batches VALUES (?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (batch_id) DO NOTHING""",
            [
                record.batch_id,
                record.run_id,
                record.status.value,
                json.dumps(payload, sort_keys=True),
                record.created_at,
                record.ended_at,
                record.collected_at,
            ],
        )


def _batch_from_row(row: tuple[Any, ...]) -> BatchRecord:
    payload = json.loads(row[3]) if row[3] else {}
    return BatchRecord(
        batch_id=row[0],
        run_id=row[1] or "",
        status=BatchStatus(row[2]),
        model=payload.get("model", ""),
        prompt_version=payload.get("prompt_version", ""),
        items=[BatchItem.model_validate(i) for i in payload.get("items", [])],
        created_at=row[4],
        ended_at=row[5],
        collected_at=row[6],
    )


_BATCH_COLUMNS = "batch_id, run_id, status, custom_ids, created_at, ended_at, collected_at"


def list_batches(meta: MetaStore, *, run_id: str | None = None) -> list[BatchRecord]:
    where, params = ("WHERE run_id = ?", [run_id]) if run_id else ("", [])
    with meta.connect() as con:
        rows = con.execute(
            f"SELECT {_BATCH_COLUMNS} FROM llm_batches {where} ORDER BY created_at, batch_id",
            params,
        ).fetchall()
    return [_batch_from_row(r) for r in rows]


def open_batches(meta: MetaStore) -> list[BatchRecord]:
    """Batches submitted but not yet collected: a new run resumes these first."""
    with meta.connect() as con:
        rows = con.execute(
            f"SELECT {_BATCH_COLUMNS} FROM llm_batches "
            "WHERE list_contains(?, status) ORDER BY created_at, batch_id",
            [[s.value for s in OPEN_STATUSES]],
        ).fetchall()
    return [_batch_from_row(r) for r in rows]


def set_batch_status(
    meta: MetaStore,
    batch_id: str,
    status: BatchStatus,
    *,
    ended_at: datetime | None = None,
    collected_at: datetime | None = None,
) -> None:
    with meta.transaction() as con:
        change = MetaStatuses(con, {batch_id: status.value}, table="llm_batches")
        write_status(None, change, at=collected_at or ended_at or datetime.now(UTC))
        con.execute(
            """UPDATE llm_batches SET ended_at = coalesce(?, ended_at),
            collected_at = coalesce(?, collected_at) WHERE batch_id = ?""",
            [ended_at, collected_at, batch_id],
        )


def _collected(con: duckdb.DuckDBPyConnection, batch_ids: list[str], now: datetime) -> None:
    collected = {b: BatchStatus.collected.value for b in batch_ids}
    write_status(None, MetaStatuses(con, collected, table="llm_batches"), at=now)
    con.execute(
        "UPDATE llm_batches SET collected_at = ? WHERE list_contains(?, batch_id)",
        [now, batch_ids],
    )


# -- ledger ------------------------------------------------------------------------------------


def _ledger_rows(entries: Iterable[LedgerEntry]) -> list[tuple[Any, ...]]:
    return [
        (
            e.entry_id,
            e.run_id,
            e.logged_at,
            e.mode,
            e.batch_id,
            e.requests,
            e.input_tokens,
            e.output_tokens,
            e.cache_read_tokens,
            e.cache_write_tokens,
            e.cost_usd,
            e.fallbacks,
            json.dumps(e.detail, sort_keys=True, default=str),
        )
        for e in entries
    ]


def record_ledger(
    meta: MetaStore,
    entries: Iterable[LedgerEntry],
    *,
    collected: Iterable[str] = (),
    now: datetime | None = None,
) -> int:
    """Write ledger rows and mark ``collected`` batches done, in one transaction.

    Together so that a batch is never marked collected without its spend in the ledger, and a
    rerun after a crash between the two cannot count the same batch twice.
    """
    rows = _ledger_rows(entries)
    done = sorted(set(collected))
    if not rows and not done:
        return 0
    with meta.transaction() as con:
        if rows:
            con.executemany(
                "INSERT INTO llm_ledger VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows
            )
        if done:
            _collected(con, done, now)
    return len(rows)


def record_answers_and_spend(
    meta: MetaStore,
    scores: Iterable[CachedScore],
    entries: Iterable[LedgerEntry],
    *,
    collected: Iterable[str] = (),
    now: datetime,
    also: Callable[[Any], None] | None = None,
) -> None:
    """Cache answers and write their spend in one transaction (``put_cached_scores`` and
    ``record_ledger`` together): a crash between two transactions would leave paid answers
    cached (so never asked again) with their cost missing from the ledger. ``also(con)``
    writes what a stage derives from the answers inside the same transaction."""
    cache = [
        (s.content_hash, s.model, s.prompt_version, s.candidate_id, s.score,
         json.dumps(s.body, sort_keys=True), s.created_at or now)
        for s in scores
    ]  # fmt: skip
    rows = _ledger_rows(entries)
    done = sorted(set(collected))
    if not (cache or rows or done or also):
        return
    with meta.transaction() as con:
        if also is not None:
            also(con)
        if cache:
            con.executemany(
                """INSERT INTO score_cache VALUES (?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (content_hash, model, prompt_version) DO UPDATE SET
                candidate_id = excluded.candidate_id, score = excluded.score,
                body = excluded.body, created_at = excluded.created_at""",
                cache,
            )
        if rows:
            con.executemany(
                "INSERT INTO llm_ledger VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows
            )
        if done:
            _collected(con, done, now)


def invalid_answers(meta: MetaStore, purpose: str) -> Counter[str]:
    """How many invalid answers each request hash of ``purpose`` has had (``invalid`` ledger
    rows): what bounds the retries of a request whose answers fail the schema."""
    with meta.connect() as con:
        rows = con.execute(
            "SELECT json_extract_string(detail, '$.request_hash') FROM llm_ledger "
            "WHERE mode = 'invalid' AND json_extract_string(detail, '$.purpose') = ?",
            [purpose],
        ).fetchall()
    return Counter(r[0] for r in rows if r[0])


def ledger_entries(meta: MetaStore, *, run_id: str | None = None) -> list[LedgerEntry]:
    where, params = ("WHERE run_id = ?", [run_id]) if run_id else ("", [])
    with meta.connect() as con:
        rows = con.execute(
            "SELECT entry_id, run_id, logged_at, mode, batch_id, requests, input_tokens, "
            "output_tokens, cache_read_tokens, cache_write_tokens, cost_usd, fallbacks, detail "
            f"FROM llm_ledger {where} ORDER BY logged_at, entry_id",
            params,
        ).fetchall()
    return [
        LedgerEntry(
            entry_id=r[0],
            run_id=r[1],
            logged_at=r[2],
            mode=r[3],
            batch_id=r[4],
            requests=r[5] or 0,
            input_tokens=r[6] or 0,
            output_tokens=r[7] or 0,
            cache_read_tokens=r[8] or 0,
            cache_write_tokens=r[9] or 0,
            cost_usd=r[10] or 0.0,
            fallbacks=r[11] or 0,
            detail=json.loads(r[12]) if r[12] else {},
        )
        for r in rows
    ]
