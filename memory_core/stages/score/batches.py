"""Message Batches: submit, record, poll with backoff up to a deadline, collect.

Crash safety comes from the order of operations: the batch row (batch id, custom ids, content
hashes, model, prompt version) is committed to DuckDB right after the API accepts the batch and
before the first poll. A run that dies while polling leaves the row open; the next run resumes
polling that batch and collects it instead of submitting (and paying for) the same requests
again. The window that remains is between the API's answer to ``create`` and the DuckDB commit
(one local insert); closing it would need an idempotency key the Batches API does not offer.

The deadline counts both the wall clock and the seconds handed to ``sleep``, so a test that
passes a no-op ``sleep`` still sees the deadline pass after the same number of polls.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from memory_core.config import ScoreConfig
from memory_core.models import stable_id
from memory_core.stages.score.anthropic_scorer import (
    ApiFailure,
    FailureKind,
    classify_error,
    classify_error_type,
)
from memory_core.stages.score.results import Usage
from memory_core.stores.llm import (
    BatchItem,
    BatchRecord,
    BatchStatus,
    insert_batch,
    set_batch_status,
)
from memory_core.stores.meta import MetaStore

if TYPE_CHECKING:
    import anthropic

__all__ = ["MAX_BATCH_REQUESTS", "BatchOutcome", "BatchRunner", "custom_id_for"]

logger = logging.getLogger(__name__)

MAX_BATCH_REQUESTS = 10_000  # well under the API's 100,000 requests / 256 MB per batch
_CUSTOM_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def custom_id_for(candidate_id: str) -> str:
    """The candidate id itself when the API accepts it (1-64 of [A-Za-z0-9_-]), else a hash."""
    return candidate_id if _CUSTOM_ID.match(candidate_id) else stable_id("c", candidate_id)


@dataclass
class BatchOutcome:
    """A collected batch: messages and failures keyed by candidate id, and what it cost."""

    record: BatchRecord
    messages: dict[str, Any] = field(default_factory=dict)
    failures: dict[str, ApiFailure] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    counts: dict[str, int] = field(default_factory=dict)

    def content_hash(self, candidate_id: str) -> str | None:
        item = next((i for i in self.record.items if i.candidate_id == candidate_id), None)
        return item.content_hash if item else None


@dataclass
class PollResult:
    collected: list[BatchOutcome] = field(default_factory=list)
    pending: list[BatchRecord] = field(default_factory=list)
    lost: list[BatchRecord] = field(default_factory=list)
    stop: ApiFailure | None = None


class BatchRunner:
    """Talks to the Batches API and keeps ``llm_batches`` in step with it."""

    def __init__(
        self,
        client: anthropic.Anthropic,
        config: ScoreConfig,
        meta: MetaStore,
        *,
        run_id: str,
        now: datetime,
        model: str,
        prompt_version: str,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client.with_options(timeout=config.timeout_s, max_retries=config.max_retries)
        self.config = config
        self.meta = meta
        self.run_id = run_id
        self.now = now
        self.model = model
        self.prompt_version = prompt_version
        self.sleep = sleep

    def submit(
        self, requests: Sequence[tuple[str, str, dict[str, Any]]]
    ) -> tuple[list[BatchRecord], ApiFailure | None, list[str]]:
        """Submit (candidate_id, content_hash, params) in batches; record each before polling.

        Returns the recorded batches, the failure that stopped submission (if any) and the
        candidate ids that were not submitted because of it.
        """
        import anthropic  # here, not at the top: a night without a key never loads the SDK

        records: list[BatchRecord] = []
        for start in range(0, len(requests), MAX_BATCH_REQUESTS):
            chunk = requests[start : start + MAX_BATCH_REQUESTS]
            items = [
                BatchItem(custom_id=custom_id_for(c), candidate_id=c, content_hash=h)
                for c, h, _ in chunk
            ]
            body = [
                {"custom_id": i.custom_id, "params": p}
                for i, (_, _, p) in zip(items, chunk, strict=True)
            ]
            try:
                batch = self.client.messages.batches.create(requests=body)
            except anthropic.APIError as exc:
                failure = classify_error(exc, self.config)
                left = [c for c, _, _ in requests[start:]]
                logger.warning(
                    "batch submission failed: %s (%d not submitted)", failure.reason, len(left)
                )
                return records, failure, left
            record = BatchRecord(
                batch_id=batch.id,
                run_id=self.run_id,
                status=BatchStatus.submitted,
                model=self.model,
                prompt_version=self.prompt_version,
                items=items,
                created_at=self.now,
            )
            insert_batch(self.meta, record)  # before any poll: a crash from here on resumes
            logger.info("submitted batch %s with %d request(s)", batch.id, len(items))
            records.append(record)
        return records, None, []

    def poll(self, records: Sequence[BatchRecord], *, wait: bool) -> PollResult:
        """Retrieve each open batch until all ended or the deadline; collect the ended ones.

        ``wait=False`` looks once without sleeping (used when resuming at the start of a run).
        """
        result = PollResult()
        open_ = list(records)
        started = time.monotonic()
        slept = 0.0
        delay = self.config.poll_initial_s
        while open_:
            still: list[BatchRecord] = []
            for index, record in enumerate(open_):
                state = self._check(record, result)
                if state is not None:
                    still.append(state)
                if result.stop is not None:  # e.g. 401: leave the rest open for a later run
                    still.extend(open_[index + 1 :])
                    break
            open_ = still
            if result.stop is not None or not open_ or not wait:
                break
            remaining = self.config.batch_deadline_s - max(slept, time.monotonic() - started)
            if remaining <= 0:
                logger.warning(
                    "batch deadline (%gs) passed with %d batch(es) still processing; the next "
                    "run resumes them",
                    self.config.batch_deadline_s,
                    len(open_),
                )
                break
            pause = min(delay, remaining)
            self.sleep(pause)
            slept += pause
            delay = min(delay * 2, self.config.poll_max_s)
        result.pending.extend(open_)
        return result

    def _check(self, record: BatchRecord, result: PollResult) -> BatchRecord | None:
        """Retrieve once; collect if ended. Returns the record if it is still open."""
        import anthropic  # here, not at the top: a night without a key never loads the SDK

        try:
            batch = self.client.messages.batches.retrieve(record.batch_id)
        except anthropic.NotFoundError:
            self._lose(record, result, "the API does not know this batch (404)")
            return None
        except anthropic.APIError as exc:
            failure = classify_error(exc, self.config)
            if failure.kind is FailureKind.fatal:
                result.stop = failure
            logger.warning("polling batch %s failed: %s", record.batch_id, failure.reason)
            return record
        if batch.processing_status != "ended":
            if record.status is BatchStatus.submitted:
                set_batch_status(self.meta, record.batch_id, BatchStatus.in_progress)
                record = record.model_copy(update={"status": BatchStatus.in_progress})
            return record
        set_batch_status(self.meta, record.batch_id, BatchStatus.ended, ended_at=batch.ended_at)
        try:
            outcome = self._collect(record)
        except anthropic.NotFoundError:
            self._lose(record, result, "its results are gone (404)")
            return None
        except anthropic.AnthropicError as exc:  # e.g. no results_url yet: try again later
            api = isinstance(exc, anthropic.APIError)
            reason = classify_error(exc, self.config).reason if api else str(exc)
            logger.warning("reading results of batch %s failed: %s", record.batch_id, reason)
            return record.model_copy(update={"status": BatchStatus.ended})
        result.collected.append(outcome)
        return None

    def _lose(self, record: BatchRecord, result: PollResult, why: str) -> None:
        logger.warning("batch %s is lost: %s; its candidates get resubmitted", record.batch_id, why)
        set_batch_status(self.meta, record.batch_id, BatchStatus.lost)
        result.lost.append(record)

    def _collect(self, record: BatchRecord) -> BatchOutcome:
        """Read the results JSONL; every line lands in messages or failures."""
        outcome = BatchOutcome(record=record)
        counts = {"succeeded": 0, "errored": 0, "expired": 0, "canceled": 0, "unknown": 0}
        for line in self.client.messages.batches.results(record.batch_id):
            item = record.item_for(line.custom_id)
            if item is None:
                counts["unknown"] += 1
                continue
            res = line.result
            counts[res.type] = counts.get(res.type, 0) + 1
            if res.type == "succeeded":
                outcome.messages[item.candidate_id] = res.message
                outcome.usage = outcome.usage + Usage.from_api(res.message.usage)
            elif res.type == "errored":
                err = res.error.error
                outcome.failures[item.candidate_id] = classify_error_type(err.type, err.message)
            else:  # expired or canceled: never processed; not billed; try again later
                outcome.failures[item.candidate_id] = ApiFailure(
                    FailureKind.transient, f"batch request {res.type}"
                )
        outcome.counts = counts
        return outcome
