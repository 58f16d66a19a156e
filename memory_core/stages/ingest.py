"""Episode ingestion: validate every line, pass the write gate, embed what is new, write once.

All-or-nothing by default: one bad line and nothing is written, with every bad line reported
(line, field, reason). ``quarantine=True`` writes the good lines and keeps the bad ones, with
their reasons and their secrets redacted, in the quarantine table. Episodes are immutable
events: the same id with the same content is a no-op, with other content a conflict.

The write gate runs before anything is stored: secrets are redacted (and counted in the audit
log); claims made by tools or agents are kept as observations with no authority, so they can
never become preferences (invariant 5).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pydantic import ValidationError

from memory_core.config import Settings
from memory_core.context import RunContext
from memory_core.embed import Embedder, text_hash
from memory_core.errors import EpisodeConflict, FieldError, ValidationFailed
from memory_core.models import Authority, Episode, SourceRole, canonical_json, content_hash
from memory_core.stages.redact import Redactor, redact_text
from memory_core.stores import Stores
from memory_core.stores.audit import record_audit
from memory_core.stores.embed_cache import cached_vectors, store_vectors
from memory_core.stores.schemas import TS, schema_for

__all__ = ["IngestResult", "ingest_file", "ingest_records", "parse_lines"]

logger = logging.getLogger(__name__)

_NO_AUTHORITY_ROLES = {SourceRole.tool, SourceRole.agent}


@dataclass
class IngestResult:
    path: str
    lines: int = 0
    inserted: int = 0
    unchanged: int = 0
    quarantined: int = 0
    embedded: int = 0
    embed_cache_hits: int = 0
    redactions: dict[str, int] = field(default_factory=dict)
    claims_without_authority: int = 0
    errors: list[FieldError] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "lines": self.lines,
            "inserted": self.inserted,
            "unchanged": self.unchanged,
            "quarantined": self.quarantined,
            "embedded": self.embedded,
            "embed_cache_hits": self.embed_cache_hits,
            "redactions": self.redactions,
            "claims_without_authority": self.claims_without_authority,
            "errors": [str(e) for e in self.errors],
        }


@dataclass
class _Parsed:
    good: list[tuple[int, Episode]]
    errors: list[FieldError]
    bad_raw: dict[int, str]
    lines: int


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(record)"


def _record_id(raw: str) -> str | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    rid = value.get("episode_id") if isinstance(value, dict) else None
    return redact_text(rid) if isinstance(rid, str) else None


def parse_lines(lines: Iterable[str], *, dim: int | None = None) -> _Parsed:
    """Validate each non-blank line; collect every error with its line number and field."""
    good: list[tuple[int, Episode]] = []
    errors: list[FieldError] = []
    bad_raw: dict[int, str] = {}
    count = 0
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        count += 1
        try:
            episode = Episode.model_validate_json(raw)
        except ValidationError as exc:
            rid = _record_id(raw)
            for err in exc.errors(include_input=False, include_url=False):
                reason = err["msg"]
                if err["type"] == "json_invalid":
                    reason = f"not valid JSON: {err.get('ctx', {}).get('error', reason)}"
                errors.append(FieldError(number, _loc(err["loc"]), reason, rid))
            bad_raw[number] = raw
            continue
        if dim is not None and episode.vector is not None and len(episode.vector) != dim:
            reason = f"has {len(episode.vector)} dimensions, the store expects {dim}"
            errors.append(FieldError(number, "vector", reason, episode.episode_id))
            bad_raw[number] = raw
            continue
        good.append((number, episode))
    return _Parsed(good, errors, bad_raw, count)


def _gate(episode: Episode, redactor: Redactor) -> tuple[dict[str, Any], int]:
    """Redact secrets and strip authority from tool/agent claims; returns the row + #blocked."""
    data = episode.model_dump(mode="json", exclude={"vector"})
    texts = [
        data.get("goal") or "",
        data.get("text") or "",
        data.get("feedback") or "",
        *data["actions"],
        *data["observations"],
        *data["conditions"].values(),
        *(c["object"] + " " + (c.get("span") or "") for c in data["claims"]),
    ]
    before = sum(redactor.counts.values())
    if redactor.screen(*texts):
        for key in ("goal", "text", "feedback", "actions", "observations", "conditions", "claims"):
            data[key] = redactor.value(data[key])
    redactions = sum(redactor.counts.values()) - before
    role = SourceRole(data["source_role"])
    claim_authority = (
        Authority.none if role in _NO_AUTHORITY_ROLES else Authority.of_role(role)
    ).value
    for claim in data["claims"]:
        claim["authority"] = claim_authority
        claim["kind"] = "observation" if role in _NO_AUTHORITY_ROLES else "statement"
    blocked = len(data["claims"]) if role in _NO_AUTHORITY_ROLES else 0
    data["redactions"] = redactions
    return data, blocked


def _row_hash(data: dict[str, Any]) -> str:
    content = {k: v for k, v in data.items() if k not in {"recorded_at", "redactions"}}
    return content_hash(content)


def _to_arrow(rows: list[dict[str, Any]], vectors: np.ndarray, dim: int, version: str) -> pa.Table:
    schema = schema_for("episodes", dim)

    def col(name: str) -> list[Any]:
        return [r.get(name) for r in rows]

    def as_json(name: str) -> list[str]:
        return [canonical_json(r[name]) for r in rows]

    n = len(rows)
    flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1))
    columns: dict[str, Any] = {
        "episode_id": col("episode_id"),
        "session_id": col("session_id"),
        "occurred_at": pa.array(col("occurred_at"), pa.string()).cast(TS),
        "source_role": col("source_role"),
        "goal": col("goal"),
        "actions": col("actions"),
        "outcome": col("outcome"),
        "conditions": as_json("conditions"),
        "observations": col("observations"),
        "feedback": col("feedback"),
        "claims": as_json("claims"),
        "consent_basis": col("consent_basis"),
        "sources": as_json("sources"),
        "procedure_id": col("procedure_id"),
        "procedure_version": col("procedure_version"),
        "redactions": col("redactions"),
        "tenant_id": col("tenant_id"),
        "subject_id": col("subject_id"),
        "namespace": col("namespace"),
        "status": ["active"] * n,
        "valid_from": pa.array(col("occurred_at"), pa.string()).cast(TS),
        "valid_to": pa.nulls(n, TS),
        "recorded_at": pa.array(col("recorded_at"), pa.string()).cast(TS),
        "expires_at": pa.array(col("expires_at"), pa.string()).cast(TS),
        "sensitivity": col("sensitivity"),
        "purpose": col("purpose"),
        "authority": [Authority.of_role(SourceRole(r["source_role"])).value for r in rows],
        "confidence": pa.array([1.0] * n, pa.float32()),
        "importance": pa.nulls(n, pa.float32()),
        "provenance": ["[]"] * n,
        "content_hash": col("content_hash"),
        "embedding_version": [version] * n,
        "policy_version": ["1"] * n,
        "text": col("text"),
        "vector": pa.FixedSizeListArray.from_arrays(flat, dim),
    }
    return pa.table({f.name: columns[f.name] for f in schema}, schema=schema)


def _existing_hashes(stores: Stores, ids: list[str]) -> dict[str, str]:
    if not ids:
        return {}
    table = stores.lance.scan("episodes", columns=["episode_id", "content_hash"])
    if table.num_rows == 0:
        return {}
    wanted = set(ids)
    return {
        eid: h
        for eid, h in zip(
            table.column("episode_id").to_pylist(),
            table.column("content_hash").to_pylist(),
            strict=True,
        )
        if eid in wanted
    }


def _embed(
    stores: Stores, embedder: Embedder, texts: list[str], ctx: RunContext, result: IngestResult
) -> np.ndarray:
    hashes = [text_hash(t) for t in texts]
    cached = cached_vectors(stores.meta, hashes, embedder.version)
    missing = sorted({h: t for h, t in zip(hashes, texts, strict=True) if h not in cached}.items())
    fresh: dict[str, np.ndarray] = {}
    if missing:
        vectors = embedder.embed([t for _, t in missing])
        fresh = {h: vectors[i] for i, (h, _) in enumerate(missing)}
        store_vectors(stores.meta, fresh, embedder.version, ctx.now)
    result.embedded += len(fresh)
    result.embed_cache_hits += len(texts) - len(fresh)
    lookup = {**cached, **fresh}
    return np.stack([lookup[h] for h in hashes]) if hashes else np.zeros((0, embedder.dim))


def ingest_file(
    stores: Stores,
    settings: Settings,
    ctx: RunContext,
    path: Path,
    *,
    embedder: Embedder,
    quarantine: bool = False,
) -> IngestResult:
    """Ingest one JSONL file of episodes (interface contract v1)."""
    try:
        with path.open(encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except UnicodeDecodeError as exc:
        err = FieldError(0, "(file)", f"not UTF-8 text: {exc.reason} at byte {exc.start}")
        raise ValidationFailed(str(path), [err]) from exc
    return ingest_records(
        stores, settings, ctx, lines, embedder=embedder, quarantine=quarantine, source=str(path)
    )


def ingest_records(
    stores: Stores,
    settings: Settings,
    ctx: RunContext,
    lines: list[str],
    *,
    embedder: Embedder,
    quarantine: bool = False,
    source: str = "<records>",
) -> IngestResult:
    """Validate, gate, embed and write ``lines``; raises before writing anything on bad input."""
    stores.lance.ensure_tables(embedder.dim, embedder=embedder.version)
    parsed = parse_lines(lines, dim=embedder.dim)
    result = IngestResult(path=source, lines=parsed.lines, errors=parsed.errors)
    if parsed.errors and not quarantine:
        raise ValidationFailed(source, parsed.errors)

    redactor = Redactor()
    rows: list[dict[str, Any]] = []
    supplied: list[list[float] | None] = []
    seen: dict[str, tuple[int, str]] = {}
    conflicts: list[tuple[int, str]] = []
    blocked = 0
    now_iso = ctx.now.isoformat()
    for number, episode in parsed.good:
        data, n_blocked = _gate(episode, redactor)
        data["recorded_at"] = data["recorded_at"] or now_iso
        data["content_hash"] = _row_hash(data)
        prior = seen.get(episode.episode_id)
        if prior is not None:
            if prior[1] != data["content_hash"]:
                conflicts.append((number, episode.episode_id))
            continue
        seen[episode.episode_id] = (number, data["content_hash"])
        blocked += n_blocked
        rows.append(data)
        supplied.append(episode.vector)

    existing = _existing_hashes(stores, [r["episode_id"] for r in rows])
    fresh_rows: list[dict[str, Any]] = []
    fresh_vectors: list[list[float] | None] = []
    for data, vector in zip(rows, supplied, strict=True):
        have = existing.get(data["episode_id"])
        if have is None:
            fresh_rows.append(data)
            fresh_vectors.append(vector)
        elif have == data["content_hash"]:
            result.unchanged += 1
        else:
            conflicts.append((seen[data["episode_id"]][0], data["episode_id"]))
    if conflicts:
        raise EpisodeConflict(source, sorted(conflicts))

    vectors = _vectors_for(stores, embedder, fresh_rows, fresh_vectors, ctx, result)
    if fresh_rows:
        stores.lance.insert_new(
            "episodes", _to_arrow(fresh_rows, vectors, embedder.dim, embedder.version)
        )
    result.inserted = len(fresh_rows)
    result.redactions = dict(sorted(redactor.counts.items()))
    result.claims_without_authority = blocked
    result.quarantined = _write_quarantine(stores, ctx, source, parsed) if quarantine else 0
    with stores.meta.transaction() as con:
        record_audit(
            con,
            at=ctx.now,
            action="ingest",
            run_id=ctx.run_id,
            actor=ctx.actor,
            target=Path(source).name,
            counts={
                "lines": result.lines,
                "inserted": result.inserted,
                "unchanged": result.unchanged,
                "quarantined": result.quarantined,
                "embedded": result.embedded,
            },
        )
        if result.redactions:
            record_audit(
                con,
                at=ctx.now,
                action="redact",
                run_id=ctx.run_id,
                actor=ctx.actor,
                target=Path(source).name,
                counts=result.redactions,
            )
        if blocked:
            record_audit(
                con,
                at=ctx.now,
                action="claims_without_authority",
                run_id=ctx.run_id,
                actor=ctx.actor,
                target=Path(source).name,
                counts={"claims": blocked},
            )
    logger.info(
        "ingest %s run=%s inserted=%d unchanged=%d quarantined=%d",
        Path(source).name,
        ctx.run_id,
        result.inserted,
        result.unchanged,
        result.quarantined,
    )
    return result


def _vectors_for(
    stores: Stores,
    embedder: Embedder,
    rows: list[dict[str, Any]],
    supplied: list[list[float] | None],
    ctx: RunContext,
    result: IngestResult,
) -> np.ndarray:
    out = np.zeros((len(rows), embedder.dim), dtype=np.float32)
    need: list[int] = []
    for i, vector in enumerate(supplied):
        if vector is None:
            need.append(i)
        else:
            out[i] = vector
    if need:
        texts = [Episode.model_validate(_episode_fields(rows[i])).embedding_text() for i in need]
        out[need] = _embed(stores, embedder, texts, ctx, result)
    return out


def _episode_fields(row: dict[str, Any]) -> dict[str, Any]:
    data = {k: v for k, v in row.items() if k not in {"content_hash", "redactions"}}
    data["claims"] = [
        {k: v for k, v in c.items() if k in {"predicate", "object", "span"}} for c in data["claims"]
    ]
    return data


def _write_quarantine(stores: Stores, ctx: RunContext, source: str, parsed: _Parsed) -> int:
    if not parsed.bad_raw:
        return 0
    by_line: dict[int, list[FieldError]] = {}
    for err in parsed.errors:
        by_line.setdefault(err.line, []).append(err)
    records = []
    for line, raw in sorted(parsed.bad_raw.items()):
        safe = redact_text(raw, Counter())
        errs = by_line.get(line, [])
        rid = errs[0].record_id if errs else None
        qid = "q_" + content_hash([Path(source).name, line, safe])[:24]
        records.append(
            [
                qid,
                Path(source).name,
                line,
                rid,
                _json_field(safe, "tenant_id"),
                _json_field(safe, "subject_id"),
                json.dumps([{"field": e.field, "reason": e.reason} for e in errs]),
                safe,
                ctx.now,
            ]
        )
    with stores.meta.transaction() as con:
        con.executemany(
            "INSERT INTO quarantine VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (quarantine_id) DO NOTHING",
            records,
        )
    return len(records)


def _json_field(raw: str, key: str) -> str | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    got = value.get(key) if isinstance(value, dict) else None
    return got if isinstance(got, str) else None
