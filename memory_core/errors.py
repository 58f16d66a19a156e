"""Errors that tell the next step.

Hierarchy::

    MemoryCoreError
    ├── ConfigError                 invalid configuration (names the key)
    ├── ValidationFailed            bad input records (every bad line, field and reason)
    ├── EpisodeConflict             same episode_id, other content
    ├── StoreError
    │   ├── MetaLocked              DuckDB file held by another process   (transient)
    │   ├── SchemaTooNew            metadata written by a newer memctl      (terminal)
    │   ├── DimensionMismatch       embedder dimension differs from a table (terminal)
    │   ├── EmbedderMismatch        embedder model differs from the home's  (terminal)
    │   ├── CommitConflict          a Lance commit kept losing to another writer (transient)
    │   └── MemoryUnavailable       the Lance store cannot be reached       (transient)
    ├── PolicyRefused               a write the authority rules forbid
    ├── NotFound                    a batch, run or record id that does not exist
    ├── InvalidRequest              a call that cannot be answered as asked (empty query)
    ├── InvalidReview               a review decision that names an unknown item or a bad edit
    └── ReviewClosed                a review batch that expired or was decided otherwise

``TransientError`` marks what may succeed on retry, so flows retry only those.
"""

from __future__ import annotations

from dataclasses import dataclass


class MemoryCoreError(Exception):
    """Base of every error memory_core raises on purpose."""


class TransientError(MemoryCoreError):
    """A retry may succeed (a lock held for a moment, a store briefly unreachable)."""


class TerminalError(MemoryCoreError):
    """A retry will fail the same way until someone changes input, config or code."""


class ConfigError(TerminalError):
    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        super().__init__(f"invalid config {key}: {reason}")


def _printable(text: str) -> str:
    """``text`` with control characters escaped (``\\x00``, ``\\n``), the rest as is."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


@dataclass(frozen=True)
class FieldError:
    """One problem with one input record."""

    line: int
    field: str
    reason: str
    record_id: str | None = None

    def __str__(self) -> str:
        # escaped: an id, a field path (a conditions key) or a reason quoting the input, with
        # a line break or an escape sequence, must not break the one line
        rid = f" (episode_id={_printable(self.record_id)})" if self.record_id else ""
        return f"line {self.line}{rid}: {_printable(self.field)}: {_printable(self.reason)}"


class ValidationFailed(TerminalError):
    def __init__(self, path: str, errors: list[FieldError]) -> None:
        self.path = path
        self.errors = errors
        lines = sorted({e.line for e in errors})
        msg = (
            f"{path}: {len(lines)} bad line(s), nothing written; first: {errors[0]}. "
            "Fix them, or rerun with --quarantine to write the good lines and quarantine the rest"
        )
        super().__init__(msg)


class EpisodeConflict(TerminalError):
    def __init__(self, path: str, conflicts: list[tuple[int, str]]) -> None:
        self.path = path
        self.conflicts = conflicts
        line, eid = conflicts[0]
        msg = (
            f"{path}: {len(conflicts)} episode(s) already stored with other content "
            f"(episodes are immutable); first: line {line} episode_id={eid}. "
            "Give the changed event a new episode_id"
        )
        super().__init__(msg)


class StoreError(MemoryCoreError):
    """A problem at the store boundary, translated from LanceDB or DuckDB."""


class MetaLocked(StoreError, TransientError):
    def __init__(self, path: str, holder: str | None) -> None:
        self.path = path
        self.holder = holder
        who = f" by {holder}" if holder else ""
        super().__init__(
            f"metadata file {path} is locked{who}; wait for that process to finish and retry"
        )


class SchemaTooNew(StoreError, TerminalError):
    def __init__(self, path: str, found: int, supported: int) -> None:
        self.path = path
        self.found = found
        self.supported = supported
        super().__init__(
            f"metadata file {path} has schema version {found}, newer than this memctl "
            f"supports ({supported}); upgrade memctl (pip install -U memory-core)"
        )


class DimensionMismatch(StoreError, TerminalError):
    def __init__(self, table: str, table_dim: int, embedder: str, embedder_dim: int) -> None:
        self.table = table
        self.table_dim = table_dim
        self.embedder_dim = embedder_dim
        super().__init__(
            f"table {table!r} stores {table_dim}-d vectors but embedder {embedder!r} gives "
            f"{embedder_dim}-d; use the embedder the home was created with "
            "(MEMCTL_EMBED__MODEL) or start a new home"
        )


class EmbedderMismatch(StoreError, TerminalError):
    """Vectors of two models in one table: distances between them mean nothing, so clusters
    and recall would silently degrade."""

    def __init__(self, table: str, home_embedder: str, embedder: str) -> None:
        self.table = table
        self.home_embedder = home_embedder
        self.embedder = embedder
        super().__init__(
            f"table {table!r} holds vectors of embedder {home_embedder!r} but the configured "
            f"embedder is {embedder!r}; use the home's embedder ([embed] model, "
            "MEMCTL_EMBED__MODEL) or start a new home to change models"
        )


class MemoryUnavailable(StoreError, TransientError):
    """Distinct from an empty result: the caller must not read it as 'nothing remembered'."""

    def __init__(self, uri: str, reason: str) -> None:
        self.uri = uri
        super().__init__(f"memory unavailable at {uri}: {reason}")


class CommitConflict(StoreError, TransientError):
    """Another writer (an MCP server folding its saves into the indices, say) kept committing
    to the same table first; a later attempt, by the next task retry or the next night,
    finds the table settled."""

    def __init__(self, table: str, action: str, attempts: int, reason: str) -> None:
        self.table = table
        self.action = action
        self.attempts = attempts
        super().__init__(
            f"{action} on table {table!r} lost to a concurrent commit {attempts} times: {reason}"
        )


class PolicyRefused(TerminalError):
    def __init__(self, record_id: str, reason: str) -> None:
        self.record_id = record_id
        self.reason = reason
        super().__init__(f"refused {record_id}: {reason}")


class NotFound(TerminalError):
    def __init__(self, what: str, ident: str, hint: str = "") -> None:
        self.what = what
        self.ident = ident
        super().__init__(f"no {what} {ident!r}" + (f"; {hint}" if hint else ""))


class InvalidRequest(TerminalError, ValueError):
    """Arguments no answer can be given for (an empty query, an empty tenant).

    Also a ``ValueError``, which is what the read path raised for bad arguments before."""

    def __init__(self, *, argument: str, reason: str) -> None:
        self.argument = argument
        self.reason = reason
        super().__init__(f"{argument}: {reason}")


class InvalidReview(TerminalError):
    """A review decision that cannot be applied as given (unknown item, bad edit, no reason)."""

    def __init__(
        self, batch_id: str, reason: str, *, candidate_id: str | None = None, field: str = ""
    ) -> None:
        self.batch_id = batch_id
        self.candidate_id = candidate_id
        self.field = field
        self.reason = reason
        where = f" item {candidate_id}" if candidate_id else ""
        what = f" {field}:" if field else ""
        super().__init__(f"review batch {batch_id}{where}:{what} {reason}; nothing was recorded")


class ReviewClosed(TerminalError):
    """The batch can no longer take this decision (expired, or decided the other way)."""

    def __init__(self, batch_id: str, status: str, hint: str) -> None:
        self.batch_id = batch_id
        self.status = status
        super().__init__(f"review batch {batch_id} is {status}; {hint}")
