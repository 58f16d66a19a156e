"""Candidates and their evidence in DuckDB, keyed by deterministic candidate ids.

A rerun upserts: the same candidate id updates its evidence and statistics, never duplicates.
Human decisions stick: a candidate a reviewer approved, rejected or promoted keeps that status
when mining sees it again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import polars as pl
import pyarrow as pa

from memory_core.gc_pause import gc_paused
from memory_core.lifecycle import check_transition
from memory_core.models import Candidate, CandidateStatus
from memory_core.stores.meta import MetaStore
from memory_core.stores.status_writes import MetaStatuses, write_status

__all__ = [
    "DECIDED_STATUSES",
    "PINS_IN_EVIDENCE",
    "EpisodePins",
    "candidate_hashes",
    "candidates_from_bodies",
    "count_by_status",
    "episode_pins",
    "existing_ids",
    "get_candidates",
    "ids_by_partition",
    "list_candidates",
    "merge_candidate_stats",
    "pending_keys",
    "run_candidate_rows",
    "score_fields",
    "set_candidate_scores",
    "set_candidate_status",
    "status_keys",
    "support_pin_subjects",
    "upsert_candidate_groups",
    "upsert_candidates",
]

DECIDED_STATUSES = frozenset(
    {
        CandidateStatus.approved,
        CandidateStatus.rejected,
        CandidateStatus.promoted,
        CandidateStatus.revoked,
    }
)


# A stored body whose ``provenance`` is this string keeps its evidence pins in
# ``candidate_evidence`` (episode id, subject, content hash), not in the body: every reader that
# validates a body goes through ``candidates_from_bodies``, which puts them back, so what users
# see (``memctl candidates``, review, promote) is the same list of pins in the same order (by
# episode id). Why: a mined candidate pins every episode it cites (~1 per episode of its
# partition), so each night that added one episode to it rebuilt, validated and rewrote all its
# pins (~30% of a 1% night's partition CPU at 100k episodes, BENCHMARKS.md issue 19 s27); now
# the new episode's evidence row is the only pin written. Bodies written before, and bodies
# whose pins are not plain episode pins (claims), keep their pins and are read as they are.
PINS_IN_EVIDENCE = "candidate_evidence"

# The episodes mined candidates cite, one row each (``episode_pins``): what each one's evidence
# pin holds (``Provenance(source_id=episode id, source_kind="episode", content_hash,
# subject_id, revision=None)``). An Arrow table, not a dict of tuples: the miner's is every
# episode of the units it re-mined (~1M rows on a 1% night at 1M episodes), sent from a worker
# process to the writer; as a dict it was ~70 MB of pickled tuples a night, ~0.8 CPU s to
# pickle in the workers and ~0.5 to unpickle in the writer (BENCHMARKS.md s44), as Arrow
# columns it is copied as buffers.
EpisodePins = pa.Table
_PIN_COLUMNS = ("episode_id", "content_hash", "subject_id")


def episode_pins(pins: Mapping[str, tuple[str | None, str | None]] | pa.Table) -> EpisodePins:
    """``EpisodePins`` from (content hash, subject) by episode id, or from a table holding
    ``episode_id``, ``content_hash`` and ``subject_id`` columns (others dropped)."""
    if isinstance(pins, pa.Table):
        return pins.select(list(_PIN_COLUMNS)).cast(
            pa.schema([(name, pa.string()) for name in _PIN_COLUMNS])
        )
    return pa.table(
        {
            "episode_id": pa.array(list(pins), pa.string()),
            "content_hash": pa.array([h for h, _ in pins.values()], pa.string()),
            "subject_id": pa.array([s for _, s in pins.values()], pa.string()),
        }
    )


# The rows of the ids in ``wanted_ids``, found by the id column alone. Joining the ids to the
# table directly read every candidate's body (~190 MB at 1M episodes, 0.25 s a query, twice
# per partition); the row ids of one partition's candidates lie close together (they are
# written together), so the outer scan reads only the row groups holding them (0.05 s).
_WANTED_ROWS = (
    "SELECT c.rowid FROM candidates c JOIN wanted_ids w ON c.candidate_id = w.candidate_id"
)

# The evidence rows of the candidates in ``wanted_ids``, found the same way: the id column is
# joined, the outer scan reads the other columns only of the row groups holding them. A semi
# join reading every column of every row cost 0.15 CPU s per partition's ~140 candidates on a
# 1.2M-row table (the 1M shape), this 0.02-0.03 (BENCHMARKS.md s28; the whole upsert on that
# shape: bench/evidence_write.py).
_WANTED_EVIDENCE = (
    "SELECT e.rowid FROM candidate_evidence e JOIN wanted_ids w ON e.candidate_id = w.candidate_id"
)


def candidate_hashes(candidates: Iterable[Candidate]) -> dict[str, tuple[str, str]]:
    """``(content_hash, score_basis)`` by candidate id, as the upsert compares and stores them.

    Why apart: the process pool's one writer is the 1M 1% night's critical path, and hashing
    ~14k candidates there was ~0.7 s of it; a worker computes them where it built the
    candidates and hands them over with them (``hashes=`` of the upserts)."""
    return {c.candidate_id: c.hashes() for c in candidates}


def upsert_candidates(
    meta: MetaStore,
    candidates: Iterable[Candidate],
    *,
    run_id: str,
    now: datetime,
    pins: EpisodePins | None = None,
    hashes: Mapping[str, tuple[str, str]] | None = None,
) -> dict[str, int]:
    """Insert new candidates, refresh changed ones, keep decided statuses; returns counts.

    One read of the existing rows and two bulk writes, whatever the number of candidates.
    ``pins``: a candidate with no ``provenance`` that cites episodes pins each of them with
    its entry here, stored in ``candidate_evidence`` only (``PINS_IN_EVIDENCE``); the miner
    builds candidates so instead of one pin object per cited episode. ``hashes``: some of the
    candidates' ``candidate_hashes``, computed from these very candidates where they were
    built; the others are hashed here.
    """
    return upsert_candidate_groups(
        meta, {0: candidates}, run_id=run_id, now=now, pins=pins, hashes=hashes
    )[0]


def upsert_candidate_groups(
    meta: MetaStore,
    groups: Mapping[Any, Iterable[Candidate]],
    *,
    run_id: str,
    now: datetime,
    pins: EpisodePins | None = None,
    hashes: Mapping[str, tuple[str, str]] | None = None,
) -> dict[Any, dict[str, int]]:
    """``upsert_candidates`` of several groups at once (the partitions of one commit), with
    each group's counts: the same stored rows as one call per group when no candidate id is
    in two groups, for one read and two bulk writes in all. Why: the process pool's one
    writer paid each statement's fixed cost once per partition (BENCHMARKS.md s42)."""
    incoming: dict[str, Candidate] = {}
    group_of: dict[str, Any] = {}
    for key, members in groups.items():
        for cand in members:
            incoming[cand.candidate_id] = cand
            group_of[cand.candidate_id] = key
    per_group = {key: {"inserted": 0, "updated": 0, "unchanged": 0} for key in groups}
    if not incoming:
        return per_group
    with meta.transaction() as con:
        # the stored rows' columns only: reading any of their bodies' JSON made this ~4x
        # slower (a 1M home's groups: ~5 against ~20 ms warm, more cold, BENCHMARKS.md s45);
        # the body is read below for the few rows that need it
        with _wanted_ids(con, list(incoming)):
            found = con.execute(
                "SELECT candidate_id, status, content_hash, score_basis, importance, scorer, "
                f"reason FROM candidates WHERE rowid IN ({_WANTED_ROWS})"
            ).fetchall()
        existing = {row[0]: row[1:4] for row in found}
        given = hashes or {}
        hashed = {cid: given.get(cid) or cand.hashes() for cid, cand in incoming.items()}
        # the status a body holds, for candidates whose content is unchanged: whether it
        # needs writing again (the column's status is what lifecycle checks go by)
        same = [cid for cid, row in existing.items() if row[1] == hashed[cid][0]]
        body_status = dict(_body_fields(con, same, "body->>'$.status'"))
        writes: list[tuple[Candidate, str, str]] = []
        kept: list[str] = []
        for cid, cand in incoming.items():
            counts = per_group[group_of[cid]]
            chash, basis = hashed[cid]
            prior = existing.get(cid)
            if prior is None:
                check_transition("candidate", cid, None, cand.status.value)
                counts["inserted"] += 1
                writes.append((cand, chash, basis))
                continue
            status, old_hash, old_basis = prior
            retire = cand.status is CandidateStatus.auto_rejected
            if status in DECIDED_STATUSES or (
                status == CandidateStatus.pending_review and not retire
            ):
                if old_hash == chash:
                    counts["unchanged"] += 1
                    continue
                # a decided candidate keeps its status; a scored one awaiting review keeps it
                # while its score still stands for it (Candidate.score_basis), and goes back
                # to pending_score when its content or the size of its evidence changed
                if status in DECIDED_STATUSES or old_basis == basis:
                    cand = cand.model_copy(update={"status": CandidateStatus(status)})
                    kept.append(cid)
            if old_hash == chash and body_status.get(cid) == cand.status:
                counts["unchanged"] += 1
                continue
            counts["updated"] += 1
            writes.append((cand, chash, basis))
        if kept:
            stats = dict(_body_fields(con, kept, "body->'$.stats'"))
            decided = {row[0]: (row[1], *row[4:7], stats.get(row[0])) for row in found
                       if row[0] in stats}  # fmt: skip
            writes = _keep_decisions(writes, decided)
        if writes:
            stored = [c.candidate_id for c, _, _ in writes if c.candidate_id in existing]
            _write(con, writes, run_id=run_id, now=now, stored=stored, pins=pins)
            moved = {
                c.candidate_id: c.status.value for c, _, _ in writes if c.candidate_id in existing
            }
            # statuses as read above (_write sets no status); bodies written with the new one
            was = {cid: existing[cid][0] for cid in moved}
            change = MetaStatuses(con, moved, stored=was, body_written=True)
            write_status(None, change, at=now, run_id=run_id)
    return per_group


def _body_fields(con: Any, ids: list[str], field: str) -> list[tuple[str, Any]]:
    """``(candidate_id, field)`` of the stored ``ids``, ``field`` an expression of ``body``."""
    if not ids:
        return []
    with _wanted_ids(con, ids):
        return con.execute(
            f"SELECT candidate_id, {field} FROM candidates WHERE rowid IN ({_WANTED_ROWS})"
        ).fetchall()


def _keep_decisions(
    writes: list[tuple[Candidate, str, str]], stored: Mapping[str, tuple[Any, ...]]
) -> list[tuple[Candidate, str, str]]:
    """``writes`` with what later stages decided about the kept candidates carried over from
    their stored rows (``stored``: status, importance, scorer, reason, the body's stats as
    JSON, by candidate id): the score (importance, scorer), the stats that scoring, workflow
    text and review merged into the body (mined stats win where both have a key), and a
    decided candidate's reason (the reviewer's words, not the miner's).

    The miner rebuilds a candidate from its evidence alone; without this, an approved
    procedure that gained one supporting episode lost its score, its rationale and the
    reviewer's reason while keeping the status they justified."""
    out = []
    for cand, chash, basis in writes:
        prior = stored.get(cand.candidate_id)
        if prior is not None:
            status, importance, scorer, reason, stats = prior
            update: dict[str, Any] = {
                "importance": importance,
                "scorer": scorer,
                "stats": {**(json.loads(stats) if stats else {}), **cand.stats},
            }
            if status in DECIDED_STATUSES:
                update["reason"] = reason
            cand = cand.model_copy(update=update)
        out.append((cand, chash, basis))
    return out


def _pins_elsewhere(cand: Candidate, pins: EpisodePins | None) -> bool:
    """Whether ``cand``'s pins are ``pins``' entries of the episodes it cites."""
    return (
        pins is not None
        and not cand.provenance
        and bool(cand.support_ids or cand.counterexample_ids)
    )


def _body(cand: Candidate, pins: EpisodePins | None) -> str:
    """The stored body: pydantic's JSON, pins replaced by ``PINS_IN_EVIDENCE`` when they live
    in ``candidate_evidence`` (``provenance`` is the model's last field, so the key order is
    the same either way)."""
    if not _pins_elsewhere(cand, pins):
        return cand.model_dump_json()
    text = cand.model_dump_json(exclude={"provenance"})
    return f'{text[:-1]},"provenance":"{PINS_IN_EVIDENCE}"}}'


def _write(
    con: Any,
    writes: list[tuple[Candidate, str, str]],
    *,
    run_id: str,
    now: datetime,
    stored: list[str],
    pins: EpisodePins | None = None,
) -> None:
    """``stored``: the ids of the written candidates already stored (their evidence rows may
    exist; a candidate not stored has none: rows are written with it and deleted with it)."""
    rows = pa.table(
        {
            "candidate_id": [c.candidate_id for c, _, _ in writes],
            "kind": [c.kind.value for c, _, _ in writes],
            "tenant_id": [c.tenant_id for c, _, _ in writes],
            "subject_id": pa.array([c.subject_id for c, _, _ in writes], pa.string()),
            "namespace": [c.namespace for c, _, _ in writes],
            "status": [c.status.value for c, _, _ in writes],
            # pydantic's own serialiser: the same JSON value as json.dumps of model_dump,
            # ~3x faster (bodies carry every evidence pin: ~12 KB each at 1M episodes)
            "body": [_body(c, pins) for c, _, _ in writes],
            "content_hash": [h for _, h, _ in writes],
            "confidence": pa.array([c.confidence for c, _, _ in writes], pa.float64()),
            "importance": pa.array([c.importance for c, _, _ in writes], pa.float64()),
            "scorer": pa.array([c.scorer for c, _, _ in writes], pa.string()),
            "reason": [c.reason for c, _, _ in writes],
            "run_id": [run_id] * len(writes),
            "created_at": pa.array([now] * len(writes), pa.timestamp("us", tz="UTC")),
            "updated_at": pa.array([now] * len(writes), pa.timestamp("us", tz="UTC")),
            "score_basis": [basis for _, _, basis in writes],
        }
    )
    evidence = _evidence_table([c for c, _, _ in writes], pins)
    con.register("incoming_candidates", rows)
    con.register("incoming_evidence", evidence)
    con.execute(
        """INSERT INTO candidates SELECT * FROM incoming_candidates
        ON CONFLICT (candidate_id) DO UPDATE SET body = excluded.body,
        content_hash = excluded.content_hash, confidence = excluded.confidence,
        importance = excluded.importance,
        scorer = excluded.scorer, reason = excluded.reason, run_id = excluded.run_id,
        updated_at = excluded.updated_at, score_basis = excluded.score_basis"""
    )
    if stored:
        _replace_evidence(con, evidence, stored)
    else:
        # a partition's first night: none of them is stored, nor any evidence row of theirs
        con.execute("INSERT INTO candidate_evidence SELECT * FROM incoming_evidence")
    con.unregister("incoming_candidates")
    con.unregister("incoming_evidence")


_EVIDENCE_COLUMNS = ("candidate_id", "episode_id", "role", "subject_id", "content_hash")


def _replace_evidence(con: Any, evidence: pa.Table, stored: list[str]) -> None:
    """Make the evidence rows of the candidates ``stored`` (already stored, rewritten now) and
    of the new ones in ``evidence`` exactly ``evidence``, writing only the difference.

    The stored rows of those candidates are read by row id; a stored row the incoming rows do
    not hold as it is (an episode no longer cited, or cited with another role, subject or
    content hash) is deleted by row id, and only incoming rows not stored as they are go in, by
    a plain append. ``candidate_evidence`` has no primary key (migration 10): this difference
    is what keeps one row per (candidate, episode). An ``INSERT ... ON CONFLICT`` through the
    key made DuckDB load the key's index from disk on every partition's write, however few
    rows were new (a partition's candidate ids are spread over the whole 1.2M-key index at 1M
    episodes: 12% of the 1% night's partition time, BENCHMARKS.md s28).

    The two anti joins run in polars on the rows just read (nulls equal, as ``IS NOT
    DISTINCT FROM``), not as two more DuckDB statements, and the delete runs only when a row
    is gone: a night's rewritten candidates mostly only gain rows, and the DELETE's
    ``rowid IN`` over the 1.2M-row table cost as much with nothing to delete (on the 1M
    shape the anti-join query and the empty delete were ~40 and ~30 of ~165 ms wall of a
    partition's difference at load ~6, BENCHMARKS.md s33)."""
    with _wanted_ids(con, stored):
        have = con.sql(
            f"SELECT rowid AS row_id, {', '.join(_EVIDENCE_COLUMNS)} FROM candidate_evidence "
            f"WHERE rowid IN ({_WANTED_EVIDENCE})"
        ).to_arrow_table()
    if not have.num_rows:
        con.execute("INSERT INTO candidate_evidence SELECT * FROM incoming_evidence")
        return
    stored_rows, incoming = pl.from_arrow(have), pl.from_arrow(evidence)
    assert isinstance(stored_rows, pl.DataFrame) and isinstance(incoming, pl.DataFrame)
    keys = list(_EVIDENCE_COLUMNS)
    gone = stored_rows.join(incoming, on=keys, how="anti", nulls_equal=True)
    new = incoming.join(stored_rows, on=keys, how="anti", nulls_equal=True,
                        maintain_order="left")  # fmt: skip
    if gone.height:
        con.register("gone_evidence", gone.select("row_id").to_arrow())
        try:
            con.execute(
                "DELETE FROM candidate_evidence WHERE rowid IN (SELECT row_id FROM gone_evidence)"
            )
        finally:
            con.unregister("gone_evidence")
    if new.height:
        con.register("new_evidence", new.to_arrow().cast(evidence.schema))
        try:
            con.execute("INSERT INTO candidate_evidence SELECT * FROM new_evidence")
        finally:
            con.unregister("new_evidence")


def _evidence_table(candidates: list[Candidate], pins: EpisodePins | None = None) -> pa.Table:
    """One row per (candidate, episode): support first, a counterexample only if not support.

    Built as whole columns per candidate (a partition's candidates cite ~10k episodes), the
    subject and content hash taken from the candidate's pin of the episode (from ``pins``
    when its pins live in ``candidate_evidence``)."""
    cols: dict[str, list[Any]] = {"candidate_id": [], "episode_id": [], "role": [],
                                  "subject_id": [], "content_hash": []}  # fmt: skip
    pinned: list[bool] = []  # per row: its subject and content hash come from ``pins``
    for cand in candidates:
        support = list(dict.fromkeys(cand.support_ids))
        seen = set(support)
        counter = [e for e in dict.fromkeys(cand.counterexample_ids) if e not in seen]
        ids = [*support, *counter]
        if _pins_elsewhere(cand, pins):
            cols["subject_id"].extend([None] * len(ids))
            cols["content_hash"].extend([None] * len(ids))
            pinned.extend([True] * len(ids))
        else:
            by_id = {p.source_id: p for p in cand.provenance}
            cited = [by_id.get(e) for e in ids]
            cols["subject_id"].extend(p.subject_id if p else None for p in cited)
            cols["content_hash"].extend(p.content_hash if p else None for p in cited)
            pinned.extend([False] * len(ids))
        cols["candidate_id"].extend([cand.candidate_id] * len(ids))
        cols["episode_id"].extend(ids)
        cols["role"].extend(["support"] * len(support) + ["counterexample"] * len(counter))
    table = pa.table({name: pa.array(values, pa.string()) for name, values in cols.items()})
    if pins is None or not any(pinned):
        return table
    return _pinned_from(table, pa.array(pinned, pa.bool_()), pins)


def _pinned_from(table: pa.Table, pinned: pa.Array, pins: EpisodePins) -> pa.Table:
    """``table`` with the subject and content hash of its ``pinned`` rows taken from ``pins``
    (one join, rows in their order); an episode cited with no pin, or pinned twice, is an
    error."""
    frame = pl.from_arrow(table.append_column("_pinned", pinned))
    found = pl.from_arrow(pins.select(list(_PIN_COLUMNS)))
    assert isinstance(frame, pl.DataFrame) and isinstance(found, pl.DataFrame)
    found = found.with_columns(pl.lit(value=True).alias("_found"))
    try:  # one pin per episode: a second would double its evidence rows
        joined = frame.join(found, on="episode_id", how="left", maintain_order="left",
                            suffix="_pin", validate="m:1")  # fmt: skip
    except pl.exceptions.ComputeError as exc:
        msg = "evidence pins: an episode is pinned more than once"
        raise ValueError(msg) from exc
    lost = joined.filter(pl.col("_pinned") & pl.col("_found").is_null())
    if lost.height:
        first = lost.row(0, named=True)
        msg = (
            f"candidate {first['candidate_id']}: cites episode {first['episode_id']} "
            "with no evidence pin"
        )
        raise ValueError(msg)
    take = pl.col("_pinned")
    out = joined.select(
        "candidate_id", "episode_id", "role",
        pl.when(take).then(pl.col("subject_id_pin")).otherwise(pl.col("subject_id"))
        .alias("subject_id"),
        pl.when(take).then(pl.col("content_hash_pin")).otherwise(pl.col("content_hash"))
        .alias("content_hash"),
    )  # fmt: skip
    return out.to_arrow().cast(table.schema)


def candidates_from_bodies(con: Any, bodies: Iterable[str]) -> list[Candidate]:
    """Stored bodies as candidates, in the given order, with their evidence pins: a body whose
    pins live in ``candidate_evidence`` (``PINS_IN_EVIDENCE``) gets them back from there, one
    read for all of them, in episode id order (the order the miner pins in). The collector
    is paused meanwhile (``gc_pause``): a queue's thousands of bodies make no cycles."""
    with gc_paused():
        return _candidates_from_bodies(con, bodies)


def _candidates_from_bodies(con: Any, bodies: Iterable[str]) -> list[Candidate]:
    parsed = [json.loads(body) for body in bodies]
    elsewhere = [b["candidate_id"] for b in parsed if b.get("provenance") == PINS_IN_EVIDENCE]
    if elsewhere:
        with _wanted_ids(con, elsewhere):
            rows = con.execute(
                "SELECT candidate_id, episode_id, content_hash, subject_id "
                f"FROM candidate_evidence WHERE rowid IN ({_WANTED_EVIDENCE})"
            ).fetchall()
        pins: dict[str, list[tuple[str, str | None, str | None]]] = {}
        for cid, eid, chash, subject in rows:
            pins.setdefault(cid, []).append((eid, chash, subject))
        for body in parsed:
            if body.get("provenance") == PINS_IN_EVIDENCE:
                body["provenance"] = [
                    {"source_id": eid, "source_kind": "episode", "content_hash": chash,
                     "subject_id": subject, "revision": None}
                    for eid, chash, subject in sorted(pins.get(body["candidate_id"], ()))
                ]  # fmt: skip
    return [Candidate.model_validate(body) for body in parsed]


def _from_rows(con: Any, rows: list[tuple[Any, ...]]) -> list[Candidate]:
    return candidates_from_bodies(con, [r[0] for r in rows])


# A body without its evidence pins: ``provenance`` holds one pin per cited episode, ~3/4 of a
# stored body's bytes (~12 KB at 1M episodes) and most of the cost of validating it.
_WITHOUT_PINS = """json_merge_patch(body, '{"provenance": null}')"""


def list_candidates(
    meta: MetaStore,
    *,
    status: str | None = None,
    tenant_id: str | None = None,
    namespace: str | None = None,
    kind: str | None = None,
    run_id: str | None = None,
    pins: bool = True,
) -> list[Candidate]:
    """Candidates matching every given filter; ``run_id`` = inserted or changed by that run.

    ``pins=False`` leaves the evidence pins out (``provenance`` comes back empty; support and
    counterexample ids stay): for readers that only look at candidates (the score, workflow
    text and review queue readers), never for one that commits a candidate or writes its body
    back. Validating the pins was most of what those readers cost at scale.
    """
    clauses, params = [], []
    for column, value in (
        ("run_id", run_id),
        ("status", status),
        ("tenant_id", tenant_id),
        ("namespace", namespace),
        ("kind", kind),
    ):
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    with meta.connect() as con:
        rows = con.execute(
            f"SELECT {'body' if pins else _WITHOUT_PINS} FROM candidates {where} "
            "ORDER BY tenant_id, namespace, candidate_id",
            params,
        ).fetchall()
        return _from_rows(con, rows)


def support_pin_subjects(meta: MetaStore, ids: list[str]) -> dict[str, set[str]]:
    """The subject ids of each candidate's pins of its supporting episodes (no null), by id,
    read by SQL from the stored body: what a reader of candidates without pins
    (``list_candidates(pins=False)``) needs of the pins to count distinct subjects."""
    if not ids:
        return {}
    with meta.connect() as con:
        with _wanted_ids(con, ids):
            rows = con.execute(
                "SELECT candidate_id, json_extract_string(body, '$.support_ids[*]'), "
                "list_transform(json_extract(body, '$.provenance[*]'), "
                "lambda p: [p->>'source_id', p->>'subject_id']), "
                f"body->>'$.provenance' = '{PINS_IN_EVIDENCE}' "
                f"FROM candidates WHERE rowid IN ({_WANTED_ROWS})"
            ).fetchall()
        elsewhere = [r[0] for r in rows if r[3]]
        from_evidence: dict[str, list[tuple[str, str]]] = {}
        if elsewhere:  # those pins are the candidates' evidence rows (PINS_IN_EVIDENCE)
            with _wanted_ids(con, elsewhere):
                for cid, eid, subject in con.execute(
                    "SELECT candidate_id, episode_id, subject_id FROM candidate_evidence "
                    f"WHERE rowid IN ({_WANTED_EVIDENCE})"
                ).fetchall():
                    from_evidence.setdefault(cid, []).append((eid, subject))
    out: dict[str, set[str]] = {}
    for cid, support, pins, pins_elsewhere in rows:
        cited = set(support or ())
        pairs = from_evidence.get(cid, []) if pins_elsewhere else pins or ()
        found = {subject for source, subject in pairs if source in cited}
        found.discard(None)
        out[cid] = found
    return out


def score_fields(
    meta: MetaStore, ids: list[str]
) -> dict[str, tuple[str, float | None, str | None]]:
    """``{id: (status, importance, scorer)}`` of the given ids that exist, read from their
    bodies by SQL (no body parsed): what an insight twin takes from its procedure."""
    if not ids:
        return {}
    with meta.connect() as con, _wanted_ids(con, ids):
        rows = con.execute(
            "SELECT candidate_id, body->>'$.status', "
            "CAST(body->>'$.importance' AS DOUBLE), body->>'$.scorer' "
            f"FROM candidates WHERE rowid IN ({_WANTED_ROWS})"
        ).fetchall()
    return {cid: (status, importance, scorer) for cid, status, importance, scorer in rows}


def pending_keys(
    meta: MetaStore,
    tenant_id: str,
    namespace: str,
    *,
    produced: Iterable[str] = (),
    pending: Iterable[str] | None = None,
) -> list[tuple[str, str | None, str | None]]:
    """(candidate id, policy version, cluster id) of a partition's ``pending_score`` candidates
    not in ``produced``, by id: what deciding staleness needs. The ids come first, without the
    bodies; only the bodies of the ones not produced (usually none) are read, by row id (a
    body holds every evidence pin: reading the two fields of every pending body cost more than
    the rest of deciding staleness). ``pending``: the partition's pending_score ids as the
    caller read them (``ids_by_partition``), instead of a read of its own."""
    if pending is None:
        key = (tenant_id, namespace)
        found_ids = ids_by_partition(
            meta, status=CandidateStatus.pending_score.value, partition=key
        )
        pending = found_ids.get(key, frozenset())
    done = set(produced)
    gone = sorted(cid for cid in pending if cid not in done)
    if not gone:
        return []
    with meta.connect() as con, _wanted_ids(con, gone):
        found = con.execute(
            "SELECT candidate_id, body->>'$.policy_version', body->>'$.cluster_id' "
            f"FROM candidates WHERE rowid IN ({_WANTED_ROWS}) ORDER BY candidate_id"
        ).fetchall()
    return [(r[0], r[1], r[2]) for r in found]


def ids_by_partition(
    meta: MetaStore,
    *,
    kind: str | None = None,
    status: str | None = None,
    partition: tuple[str, str] | None = None,
) -> dict[tuple[str, str], frozenset[str]]:
    """Ids of the stored candidates of one ``kind`` and/or ``status``, by (tenant, namespace),
    in one read (no body read; partitions without one left out); ``partition``: that
    (tenant, namespace) alone."""
    filters = [(c, v) for c, v in (("kind", kind), ("status", status)) if v is not None]
    if partition is not None:
        filters += [("tenant_id", partition[0]), ("namespace", partition[1])]
    where = " AND ".join(f"{column} = ?" for column, _ in filters) or "TRUE"
    with meta.connect() as con:
        rows = con.execute(
            f"SELECT tenant_id, namespace, candidate_id FROM candidates WHERE {where}",
            [value for _, value in filters],
        ).fetchall()
    out: dict[tuple[str, str], set[str]] = {}
    for tenant, namespace, cid in rows:
        out.setdefault((tenant, namespace), set()).add(cid)
    return {key: frozenset(ids) for key, ids in out.items()}


def existing_ids(meta: MetaStore, ids: list[str]) -> set[str]:
    """Which of ``ids`` are stored (no body read)."""
    if not ids:
        return set()
    with meta.connect() as con, _wanted_ids(con, ids):
        rows = con.execute(
            "SELECT c.candidate_id FROM candidates c "
            "SEMI JOIN wanted_ids w ON c.candidate_id = w.candidate_id"
        ).fetchall()
    return {r[0] for r in rows}


def get_candidates(meta: MetaStore, ids: list[str], *, pins: bool = True) -> list[Candidate]:
    """The stored candidates among ``ids``, by id; ``pins=False`` as ``list_candidates``'."""
    if not ids:
        return []
    with meta.connect() as con:
        field = "body" if pins else _WITHOUT_PINS
        found = sorted(_bodies(con, list(dict.fromkeys(ids)), field))  # by id, as before
        return _from_rows(con, [(body,) for _, body in found])


def status_keys(meta: MetaStore, status: str) -> list[tuple[str, str, str | None]]:
    """(candidate id, kind, the id its stats' ``twin_of`` names) of every candidate in
    ``status``, in ``list_candidates``' order: what picks a review queue before any body is
    read whole (a stable queue's candidates sit in open batches, and reading all of them,
    ~3k at 1M episodes, was most of the review stage's night, BENCHMARKS.md s45)."""
    with meta.connect() as con:
        return con.execute(
            "SELECT candidate_id, kind, body->>'$.stats.twin_of' FROM candidates "
            "WHERE status = ? ORDER BY tenant_id, namespace, candidate_id",
            [status],
        ).fetchall()


def set_candidate_status(
    meta: MetaStore, updates: dict[str, tuple[CandidateStatus, str]], *, now: datetime
) -> None:
    """Set status (through the lifecycle writer) and reason of several candidates in one
    transaction."""
    with meta.transaction() as con:
        statuses = {cid: status.value for cid, (status, _) in updates.items()}
        write_status(None, MetaStatuses(con, statuses), at=now)
        for cid, (_, reason) in updates.items():
            con.execute(
                """UPDATE candidates SET reason = ?, updated_at = ?,
                body = json_merge_patch(body, json_object('reason', ?))
                WHERE candidate_id = ?""",
                [reason, now, reason, cid],
            )


def set_candidate_scores(
    meta: MetaStore,
    scores: dict[str, dict[str, Any]],
    *,
    now: datetime,
) -> None:
    """Record importance, scorer and any extra fields (rationale, risk flags) per candidate.

    ``scores[cid]`` holds ``importance``, ``scorer``, optional ``status`` and ``stats`` keys to
    merge into the candidate's stats (e.g. rationale, risk_flags). One read and one bulk
    update whatever the number of candidates (row-by-row UPDATEs took ~12 ms each).
    """
    if not scores:
        return
    with meta.transaction() as con:
        statuses = {cid: s["status"] for cid, s in scores.items() if "status" in s}
        write_status(None, MetaStatuses(con, statuses), at=now)
        rows: list[tuple[str, Any, Any, str]] = []
        for cid, raw in _bodies(con, list(scores)):
            score = scores[cid]
            body = json.loads(raw)
            body["importance"] = score.get("importance")
            body["scorer"] = score.get("scorer")
            body["stats"] = {**body.get("stats", {}), **score.get("stats", {})}
            rows.append((cid, body["importance"], body["scorer"], json.dumps(body, sort_keys=True)))
        if not rows:
            return
        incoming = pa.table(
            {
                "candidate_id": pa.array([r[0] for r in rows], pa.string()),
                "importance": pa.array([r[1] for r in rows], pa.float64()),
                "scorer": pa.array([r[2] for r in rows], pa.string()),
                "body": pa.array([r[3] for r in rows], pa.string()),
            }
        )
        con.register("incoming_scores", incoming)
        try:
            con.execute(
                """UPDATE candidates SET importance = s.importance, scorer = s.scorer,
                body = s.body, updated_at = ?
                FROM incoming_scores s WHERE candidates.candidate_id = s.candidate_id""",
                [now],
            )
        finally:
            con.unregister("incoming_scores")


@contextmanager
def _wanted_ids(con: Any, ids: list[str]) -> Iterator[None]:
    """``ids`` registered as the table ``wanted_ids`` (what ``_WANTED_ROWS`` and the semi
    joins read) for the block, unregistered after it whatever happens."""
    con.register("wanted_ids", pa.table({"candidate_id": pa.array(ids, pa.string())}))
    try:
        yield
    finally:
        con.unregister("wanted_ids")


def _bodies(con: Any, ids: list[str], field: str = "body") -> list[tuple[str, str]]:
    """``(candidate_id, body)`` of the given ids that exist, by a join (not a list scan);
    ``field``: what of the body (``_WITHOUT_PINS``)."""
    with _wanted_ids(con, ids):
        return con.execute(
            f"SELECT candidate_id, {field} FROM candidates WHERE rowid IN ({_WANTED_ROWS})"
        ).fetchall()


def merge_candidate_stats(
    meta: MetaStore, stats: dict[str, dict[str, Any]], *, now: datetime
) -> None:
    """Merge keys into several candidates' stats (workflow text), nothing else changes."""
    with meta.transaction() as con:
        for cid, extra in stats.items():
            row = con.execute(
                "SELECT body FROM candidates WHERE candidate_id = ?", [cid]
            ).fetchone()
            if row is None:
                continue
            body = json.loads(row[0])
            body["stats"] = {**body.get("stats", {}), **extra}
            con.execute(
                "UPDATE candidates SET body = ?, updated_at = ? WHERE candidate_id = ?",
                [json.dumps(body, sort_keys=True), now, cid],
            )


def count_by_status(meta: MetaStore) -> dict[str, int]:
    """``{status: candidates}`` in one GROUP BY (no candidate bodies are parsed)."""
    with meta.connect() as con:
        rows = con.execute("SELECT status, count(*) FROM candidates GROUP BY status").fetchall()
    return {str(status): int(n) for status, n in sorted(rows)}


def run_candidate_rows(
    meta: MetaStore, run_id: str, *, limit: int | None = None
) -> tuple[list[dict[str, Any]], int]:
    """Ids and counts of the candidates a run inserted or changed (what flows publish), the
    first ``limit`` of them by (tenant, namespace, id), and how many there are in all.

    Read by SQL, not by validating every body: the nightly summary of a 1M-episode run lists
    ~15k candidates, more than Prefect publishes in one artifact (its events stop at 1.5 MB).
    """
    with meta.connect() as con:
        (total,) = con.execute(
            "SELECT count(*) FROM candidates WHERE run_id = ?", [run_id]
        ).fetchone() or (0,)
        rows = con.execute(
            """SELECT candidate_id, kind, tenant_id, namespace, status,
            coalesce(json_array_length(body, '$.support_ids'), 0),
            coalesce(json_array_length(body, '$.counterexample_ids'), 0)
            FROM candidates WHERE run_id = ? ORDER BY tenant_id, namespace, candidate_id
            LIMIT ?""",
            [run_id, limit],
        ).fetchall()
    keys = ("candidate_id", "kind", "tenant", "namespace", "status", "support", "counterexamples")
    return [dict(zip(keys, row, strict=True)) for row in rows], int(total)
