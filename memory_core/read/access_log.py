"""The access log: which records the read path served, appended without blocking it.

Agreed format with forgetting (which folds these files nightly into access statistics, so
unused, unimportant memories go first): JSON lines under ``<home>/access_log/``, one object per
served record::

    {"record_id": "...", "table": "facts", "tenant_id": "...", "subject_id": "..." | null,
     "at": "2026-08-01T12:00:00Z"}

``subject_id`` is the *record's* scope (null for tenant-scope records), never the caller's: the
log says what was used, not who looked, so it adds no personal data beyond the record's own.

Files are named ``<UTC start>-<pid>-<token>-<seq>.jsonl``. A writer appends whole lines with one
``write`` per batch, and never touches a file again once it has been idle ``roll_s`` seconds (it
starts the next ``seq``), so a folder that takes files untouched for longer than that
(``forget.access_log_min_age_s``, 60 s by default, vs ``roll_s`` 30 s) never races a writer.

The read path only puts entries on a bounded queue (``put_nowait``); a daemon thread batches
them to disk every ``flush_s``. When the queue is full, entries are dropped and counted rather
than slowing a query: access statistics are a hint for forgetting, not a ledger.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import queue
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["AccessLog", "closed_files", "read_entries", "served_entries"]

logger = logging.getLogger(__name__)

_STOP = object()


class AccessLog:
    """A background, batched appender of access entries; ``close()`` (or exit) flushes it."""

    def __init__(
        self,
        directory: Path | str,
        *,
        flush_s: float = 1.0,
        roll_s: float = 30.0,
        max_queue: int = 100_000,
        max_file_bytes: int = 64 << 20,
    ) -> None:
        self.directory = Path(directory)
        self.flush_s = flush_s
        self.roll_s = roll_s
        self.max_file_bytes = max_file_bytes
        self.dropped = 0
        self.written = 0
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_queue)
        self._token = uuid.uuid4().hex[:8]
        self._seq = 0
        self._path: Path | None = None
        self._last_write = 0.0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="memctl-access-log", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def record(self, entries: Iterable[dict[str, Any]]) -> None:
        """Queue entries; never blocks, never raises into the caller's query."""
        if self._closed:
            return
        for entry in entries:
            try:
                self._queue.put_nowait(entry)
            except queue.Full:
                self.dropped += 1

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything queued so far is on disk (tests, shutdown)."""
        if self._closed:
            return True
        done = threading.Event()
        try:
            self._queue.put(done, timeout=timeout)
        except queue.Full:
            return False
        return done.wait(timeout)

    def close(self, timeout: float = 5.0) -> None:
        if self._closed:
            return
        self.flush(timeout)
        self._closed = True
        with contextlib.suppress(queue.Full):
            self._queue.put(_STOP, timeout=timeout)
        self._thread.join(timeout)
        atexit.unregister(self.close)

    def __enter__(self) -> AccessLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        while True:
            batch: list[dict[str, Any]] = []
            events: list[threading.Event] = []
            stop = False
            try:
                item = self._queue.get(timeout=self.flush_s)
            except queue.Empty:
                continue
            deadline = time.monotonic() + 0.05  # gather what arrives together into one write
            while True:
                if item is _STOP:
                    stop = True
                elif isinstance(item, threading.Event):
                    events.append(item)
                else:
                    batch.append(item)
                try:
                    item = self._queue.get(timeout=max(deadline - time.monotonic(), 0))
                except queue.Empty:
                    break
            if batch:
                self._write(batch)
            for event in events:
                event.set()
            if stop:
                return

    def _current_path(self) -> Path:
        now = time.monotonic()
        stale = self._path is not None and now - self._last_write > self.roll_s
        too_big = (
            self._path is not None
            and self._path.exists()
            and self._path.stat().st_size > self.max_file_bytes
        )
        if self._path is None or stale or too_big:
            self._seq += 1
            start = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
            name = f"{start}-{os.getpid()}-{self._token}-{self._seq:04d}.jsonl"
            self._path = self.directory / name
        return self._path

    def _write(self, batch: list[dict[str, Any]]) -> None:
        data = "".join(json.dumps(e, separators=(",", ":"), default=str) + "\n" for e in batch)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self._current_path()
            with path.open("a", encoding="utf-8") as out:
                out.write(data)
            self._last_write = time.monotonic()
            self.written += len(batch)
        except OSError as exc:
            self.dropped += len(batch)
            logger.warning("access log: %d entries dropped: %s", len(batch), exc)


def closed_files(directory: Path | str, *, min_age_s: float = 60.0) -> list[Path]:
    """Files no writer will append to again (untouched for ``min_age_s``), oldest first."""
    root = Path(directory)
    if not root.is_dir():
        return []
    cutoff = time.time() - min_age_s
    files = [p for p in root.glob("*.jsonl") if p.stat().st_mtime <= cutoff]
    return sorted(files, key=lambda p: (p.stat().st_mtime, p.name))


def read_entries(path: Path | str) -> Iterator[dict[str, Any]]:
    """Entries of one file; a torn last line (a crash mid-write) is skipped, not fatal."""
    with Path(path).open(encoding="utf-8") as lines:
        for line in lines:
            if not line.endswith("\n"):
                break
            try:
                yield json.loads(line)
            except ValueError:
                logger.warning("access log %s: unreadable line skipped", path)


def served_entries(served: Iterable[Any], at: datetime) -> list[dict[str, Any]]:
    """Entries in the agreed format for served candidates (``.table``, ``.record_id``, ``.row``)."""
    stamp = at.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return [
        {
            "record_id": c.record_id,
            "table": c.table,
            "tenant_id": c.row.get("tenant_id"),
            "subject_id": c.row.get("subject_id"),
            "at": stamp,
        }
        for c in served
    ]
