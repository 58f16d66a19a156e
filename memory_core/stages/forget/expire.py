"""Expiry: TTL, explicit ``expires_at``, purpose limits, decay and per-subject caps.

Rules, per Lance table (memory class) and namespace (``ForgetConfig.policy``), on current rows
(``recorded_to IS NULL``):

* an ``active`` row whose ``expires_at`` has passed, whose age (valid time: ``occurred_at``
  for episodes, ``valid_from`` for facts and procedures, ``last_at`` for digests) exceeds the
  TTL, whose purpose was ended (``memctl forget --purpose``) or outlived
  ``purpose_ttl_days``, whose decay score fell below ``decay_floor``, or which ranks below
  ``max_per_subject`` for its subject, becomes ``expired`` at once (not served any more);
  ``expires_at`` is set to the run's clock unless it already says an earlier moment;
* an ``expired`` row is hard-deleted once ``expires_at`` is ``grace_days`` old; an active row
  already past TTL + grace is deleted directly (no pointless rewrite first);
* a hard delete reaches DuckDB too (memberships, access stats, cached vectors of its text);
  lineage edges stay, so promoted knowledge keeps naming the evidence it rests on.

Everything depends only on the stored rows and the clock (``--now``): a rerun with the same
clock finds nothing to do.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

from memory_core.config import MemoryClass, Settings
from memory_core.context import RunContext
from memory_core.stages.forget.purge import IN_CHUNK, delete_where
from memory_core.stores import Stores
from memory_core.stores import forgetting as fstore
from memory_core.stores.filters import in_list, sql_quote, ts_literal
from memory_core.stores.schemas import ID_COLUMN, TABLES
from memory_core.stores.status_writes import InPlace, write_status

__all__ = [
    "CLASS_OF",
    "ExpireResult",
    "access_log_dir",
    "expire_records",
    "fold_access_log",
]

logger = logging.getLogger(__name__)

CLASS_OF: dict[str, MemoryClass] = {
    "episodes": "episodic",
    "facts": "semantic",
    "procedures": "procedural",
    "digests": "digest",
}
BASIS = {"episodes": "occurred_at", "facts": "valid_from", "procedures": "valid_from",
         "digests": "last_at"}  # fmt: skip


@dataclass
class ExpireResult:
    expired: dict[str, int] = field(default_factory=dict)
    deleted: dict[str, int] = field(default_factory=dict)
    control_plane: dict[str, int] = field(default_factory=dict)
    changed_tables: set[str] = field(default_factory=set)

    def as_dict(self) -> dict[str, Any]:
        return {
            "expired": dict(sorted(self.expired.items())),
            "deleted": dict(sorted(self.deleted.items())),
            "control_plane": dict(sorted(self.control_plane.items())),
        }


def _expire(stores: Stores, ctx: RunContext, name: str, where: str, **values: Any) -> int:
    """Active rows of ``name`` matching ``where`` become expired (one update); how many."""
    change = InPlace(name, where, was=("active",), to="expired", values=values)
    return write_status(stores, change, at=ctx.now, run_id=ctx.run_id, actor=ctx.actor).rows


def _purpose_clauses(settings: Settings, ended: list[tuple[str, str | None]], basis: str,
                     now: datetime) -> list[str]:  # fmt: skip
    clauses = []
    for purpose, tenant in ended:
        scope = f" AND tenant_id = {sql_quote(tenant)}" if tenant else ""
        clauses.append(f"(purpose = {sql_quote(purpose)}{scope})")
    for purpose, days in sorted(settings.forget.purpose_ttl_days.items()):
        cutoff = ts_literal(now - timedelta(days=days))
        clauses.append(f"(purpose = {sql_quote(purpose)} AND {basis} < {cutoff})")
    return clauses


def expire_records(stores: Stores, settings: Settings, ctx: RunContext) -> ExpireResult:
    """Apply every expiry rule to every table; see the module docstring."""
    result = ExpireResult()
    existing = set(stores.lance.table_names())
    now = ctx.now
    ended = fstore.ended_purposes(stores.meta)
    for name in TABLES:
        if name not in existing:
            continue
        basis = BASIS[name]
        spaces = stores.lance.scan(name, columns=["namespace"], where="recorded_to IS NULL")
        purpose = _purpose_clauses(settings, ended, basis, now)
        for ns in sorted(set(spaces.column("namespace").to_pylist())):
            policy = settings.forget.policy(ns, CLASS_OF[name])
            grace = timedelta(days=policy.grace_days or 0.0)
            scope = f"recorded_to IS NULL AND namespace = {sql_quote(ns)}"
            # 1. hard delete: expired past grace, or active already past TTL + grace
            gone = [f"(status = 'expired' AND expires_at <= {ts_literal(now - grace)})",
                    f"(status = 'active' AND expires_at <= {ts_literal(now - grace)})"]  # fmt: skip
            if policy.ttl_days is not None:
                cutoff = ts_literal(now - timedelta(days=policy.ttl_days) - grace)
                gone.append(f"(status = 'active' AND {basis} < {cutoff})")
            deleted = delete_where(stores, name, f"{scope} AND ({' OR '.join(gone)})", ctx=ctx)
            _add(result.deleted, name, len(deleted.ids))
            for key, value in deleted.control_plane.items():
                _add(result.control_plane, key, value)
            # 2. expire at once, keeping an earlier own expires_at
            own = _expire(
                stores, ctx, name,
                f"{scope} AND status = 'active' AND expires_at <= {ts_literal(now)}",
            )  # fmt: skip
            rules = list(purpose)
            if policy.ttl_days is not None:
                cutoff = ts_literal(now - timedelta(days=policy.ttl_days))
                rules.append(f"{basis} < {cutoff}")
            ttl = 0
            if rules:
                where = f"{scope} AND status = 'active' AND ({' OR '.join(rules)})"
                ttl = _expire(stores, ctx, name, where, expires_at=now)
            decayed = _decay(stores, settings, ctx, name, ns, scope, policy)
            _add(result.expired, name, own + ttl + decayed)
            if deleted.ids or own or ttl or decayed:
                result.changed_tables.add(name)
    return result


def _decay(stores: Stores, settings: Settings, ctx: RunContext, name: str, ns: str, scope: str,
           policy: Any) -> int:  # fmt: skip
    if policy.decay_floor is None and policy.max_per_subject is None:
        return 0
    now = ctx.now
    id_col = ID_COLUMN[name]
    rows = stores.lance.scan(
        name,
        where=f"{scope} AND status = 'active'",
        columns=[id_col, "tenant_id", "subject_id", "importance", BASIS[name]],
    )
    rows = rows.rename_columns(["id", "tenant_id", "subject_id", "importance", "basis"])
    victims = fstore.decay_victims(
        stores.meta, rows, table_name=name, now=now,
        half_life_days=settings.forget.decay_half_life_days,
        default_importance=settings.forget.default_importance,
        floor=policy.decay_floor, cap=policy.max_per_subject,
    )  # fmt: skip
    for start in range(0, len(victims), IN_CHUNK):
        where = in_list(id_col, victims[start : start + IN_CHUNK])
        _expire(stores, ctx, name, where, expires_at=now)
    return len(victims)


def _add(counts: dict[str, int], key: str, value: int) -> None:
    if value:
        counts[key] = counts.get(key, 0) + value


# -- access log ------------------------------------------------------------------------------


def access_log_dir(settings: Settings) -> Path:
    """``<home>/access_log``: JSON-lines files the read path appends to, one read per line."""
    return settings.home / "access_log"


_READ_SCHEMA = pa.schema(
    [
        ("record_id", pa.string()),
        ("table", pa.string()),
        ("tenant_id", pa.string()),
        ("subject_id", pa.string()),
        ("at", pa.timestamp("us", tz="UTC")),
    ]
)


def _parse_reads(path: Path) -> tuple[list[dict[str, Any]], int]:
    reads, bad = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            at = datetime.fromisoformat(str(item["at"]).replace("Z", "+00:00"))
            reads.append(
                {
                    "record_id": str(item["record_id"]),
                    "table": item.get("table"),
                    "tenant_id": item.get("tenant_id"),
                    "subject_id": item.get("subject_id"),
                    "at": at if at.tzinfo else at.replace(tzinfo=UTC),
                }
            )
        except (ValueError, KeyError, TypeError):
            bad += 1
    return reads, bad


def fold_access_log(stores: Stores, settings: Settings, ctx: RunContext) -> dict[str, int]:
    """Fold the read path's access-log files into ``access_stats`` (hits, last access).

    Only files untouched for ``access_log_min_age_s`` are taken (the read path may still be
    appending to the newest). A file's name and content hash are recorded in the same DuckDB
    transaction as its counts, so a crash before the file is moved away never counts it twice.
    """
    folder = access_log_dir(settings)
    out = {"files": 0, "reads": 0, "bad_lines": 0}
    if not folder.is_dir():
        return out
    wall = time.time()
    files = sorted(
        p for p in folder.glob("*.jsonl")
        if wall - p.stat().st_mtime >= settings.forget.access_log_min_age_s
    )  # fmt: skip
    keyed = {f"{p.name}:{hashlib.sha256(p.read_bytes()).hexdigest()[:24]}": p for p in files}
    done = fstore.folded_files(stores.meta, list(keyed))
    reads: list[dict[str, Any]] = []
    fresh = []
    for key, path in sorted(keyed.items()):
        if key in done:
            continue
        items, bad = _parse_reads(path)
        reads += items
        out["bad_lines"] += bad
        fresh.append(key)
    if fresh:
        table = pa.Table.from_pylist(reads, schema=_READ_SCHEMA)
        fstore.fold_access_rows(stores.meta, table, file_keys=fresh, run_id=ctx.run_id, now=ctx.now)
    for key, path in keyed.items():
        if settings.forget.keep_folded_access_logs:
            (folder / "folded").mkdir(exist_ok=True)
            path.replace(folder / "folded" / f"{path.stem}-{key.rsplit(':', 1)[1][:12]}.jsonl")
        else:
            path.unlink(missing_ok=True)
    out["files"], out["reads"] = len(fresh), len(reads)
    return out
