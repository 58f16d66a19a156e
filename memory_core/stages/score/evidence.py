"""A compact, content-free summary of the episodes a candidate rests on.

Both scorers read it: the heuristic computes its features from it, and the LLM prompt shows it
instead of raw episodes, so a request costs a few hundred tokens whatever the episodes say and no
episode text (or secret that slipped past redaction) is sent for scoring.

The summary comes from the candidate itself (support ids, provenance, mining stats) and, when the
episodes table is there, from the supporting episodes in Lance (time, outcome, feedback,
sensitivity). The Lance read is scoped by tenant, so nothing crosses tenants.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from memory_core.errors import StoreError
from memory_core.models import Candidate, utc
from memory_core.stores.filters import in_list, sql_quote
from memory_core.stores.lance import LanceStore

__all__ = ["Evidence", "feedback_polarity", "load_evidence", "needs_pin_subjects"]

logger = logging.getLogger(__name__)

_SENSITIVITY_RANK = {"low": 0, "medium": 1, "high": 2}
_POSITIVE = re.compile(
    r"\b(thanks?|thank you|worked|works|great|perfect|solved|fixed|helpful|correct|exactly)\b",
    re.IGNORECASE,
)
_NEGATIVE = re.compile(
    r"\b(wrong|didn'?t work|doesn'?t work|not work|broke|broken|useless|incorrect|bad|"
    r"not helpful|failed|still fails?)\b",
    re.IGNORECASE,
)
# ids of one tenant above which one scan of the tenant replaces an IN list; below it, one IN
# list: each scan costs ~9 ms whatever its list, and the 1M 1% night's ~2k ids a tenant went
# in chunks of 500 (48 scans, ~0.3-0.4 s; one list a tenant ~0.22, BENCHMARKS.md s45)
_SCAN_OVER = 5_000


def feedback_polarity(text: str | None) -> int:
    """+1, -1 or 0 from a feedback line; negative wins a tie ("thanks, but still broken")."""
    if not text:
        return 0
    if _NEGATIVE.search(text):
        return -1
    return 1 if _POSITIVE.search(text) else 0


@dataclass(frozen=True)
class Evidence:
    """Counts and dates only; ``None`` where a feature is unknown (the scorer skips it)."""

    support: int
    counterexamples: int
    subjects: int
    last_seen: datetime | None = None
    successes: int = 0
    failures: int = 0
    feedback_positive: int = 0
    feedback_negative: int = 0
    sensitivity: str = "low"
    success_rate: float | None = None  # the miner's pattern success rate, when it gave one

    @property
    def counterexample_rate(self) -> float:
        total = self.support + self.counterexamples
        return self.counterexamples / total if total else 0.0

    @classmethod
    def from_candidate(
        cls, candidate: Candidate, support_subjects: AbstractSet[str] | None = None
    ) -> Evidence:
        """What the candidate record alone tells; mining stats fill the gaps when present.

        ``support_subjects``: the subjects of the pins of supporting episodes, when the
        candidate was read without its pins (``list_candidates(pins=False)``); taken from
        ``candidate.provenance`` otherwise.

        Stats keys read (from the miners, all optional): ``support_subjects`` /
        ``distinct_subjects``, ``last_stated_at`` / ``last_seen``, ``success_rate``,
        ``successes``, ``failures``, ``feedback_positive``, ``feedback_negative``,
        ``sensitivity``.
        """
        stats = candidate.stats
        support = set(candidate.support_ids)
        if support_subjects is None:
            subjects = {p.subject_id for p in candidate.provenance if p.source_id in support}
            subjects.discard(None)
        else:
            subjects = set(support_subjects)
        n_subjects = (
            _int(stats.get("support_subjects"))
            or _int(stats.get("distinct_subjects"))
            or len(subjects)
        )
        rate = stats.get("success_rate")
        if candidate.subject_id is not None:
            n_subjects = max(n_subjects, 1)
        return cls(
            support=len(support),
            counterexamples=len(set(candidate.counterexample_ids)),
            subjects=n_subjects,
            last_seen=_time(
                stats.get("last_stated_at") or stats.get("last_seen") or stats.get("last_at")
            ),
            successes=_int(stats.get("successes")),
            failures=_int(stats.get("failures")),
            feedback_positive=_int(stats.get("feedback_positive")),
            feedback_negative=_int(stats.get("feedback_negative")),
            sensitivity=str(stats.get("sensitivity") or "low"),
            success_rate=float(rate) if isinstance(rate, int | float) else None,
        )

    def summary(self) -> dict[str, Any]:
        """The evidence block the LLM sees (no ids, no episode text)."""
        out: dict[str, Any] = {
            "supporting_episodes": self.support,
            "counterexamples": self.counterexamples,
            "distinct_subjects": self.subjects,
        }
        if self.last_seen is not None:
            out["last_seen"] = self.last_seen.date().isoformat()
        if self.successes or self.failures:
            out["outcomes"] = {"success": self.successes, "failure": self.failures}
        if self.success_rate is not None:
            out["success_rate"] = round(self.success_rate, 3)
        if self.feedback_positive or self.feedback_negative:
            out["feedback"] = {
                "positive": self.feedback_positive,
                "negative": self.feedback_negative,
            }
        if self.sensitivity != "low":
            out["sensitivity"] = self.sensitivity
        return out


def needs_pin_subjects(candidate: Candidate) -> bool:
    """Whether :meth:`Evidence.from_candidate` would count the subjects of the candidate's
    pins: not when the miner's stats give the count. A reader of candidates without their pins
    then asks for the pins' subjects of those candidates only (at 1M most mined candidates
    have the count: ~0.7 s of a first night's score stage read subjects no one counted)."""
    stats = candidate.stats
    return not (_int(stats.get("support_subjects")) or _int(stats.get("distinct_subjects")))


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return utc(value) if value.tzinfo else None
    if isinstance(value, str) and value:
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return utc(parsed) if parsed.tzinfo else None
    return None


def load_evidence(
    lance: LanceStore | None,
    candidates: Sequence[Candidate],
    *,
    support_subjects: Mapping[str, AbstractSet[str]]
    | Future[Mapping[str, AbstractSet[str]]]
    | None = None,
) -> dict[str, Evidence]:
    """Evidence per candidate id; episodes in Lance refine what the candidate record says.

    ``support_subjects`` (by candidate id) when the candidates were read without their pins:
    see :meth:`Evidence.from_candidate`. A future of them is awaited after the episodes'
    scans: the score stage reads them from DuckDB meanwhile (both leave the GIL).

    A missing or unreachable episodes table is not an error here: scoring still works from the
    candidate record, and the read path's errors surface in the stages that own that table.
    """
    tables = _supporting_episodes(lance, candidates)
    if isinstance(support_subjects, Future):
        support_subjects = support_subjects.result()
    subjects = support_subjects if support_subjects is not None else {}
    base = {
        c.candidate_id: Evidence.from_candidate(
            c, subjects.get(c.candidate_id, set()) if support_subjects is not None else None
        )
        for c in candidates
    }
    if tables is None:
        return base
    found = _found_per_candidate(candidates, tables)
    out: dict[str, Evidence] = {}
    for index, cand in enumerate(candidates):
        agg = found.get(index)
        out[cand.candidate_id] = (
            _refine(base[cand.candidate_id], agg) if agg else base[cand.candidate_id]
        )
    return out


def _supporting_episodes(
    lance: LanceStore | None, candidates: Sequence[Candidate]
) -> list[pa.Table] | None:
    """Each tenant's episodes among its candidates' supporting ids (None: nothing to refine
    with, or the table cannot be read)."""
    if lance is None or not candidates:
        return None
    by_tenant: dict[str, set[str]] = defaultdict(set)
    for cand in candidates:
        by_tenant[cand.tenant_id].update(cand.support_ids)
    try:
        return _episode_tables(lance, [(t, sorted(ids)) for t, ids in by_tenant.items() if ids])
    except (StoreError, OSError, ValueError) as exc:
        logger.debug("episode evidence unavailable, scoring from candidate records: %s", exc)
        return None


_EPISODE_COLUMNS = ["episode_id", "subject_id", "occurred_at", "outcome", "feedback", "sensitivity"]

# Tenants' scans run at once on this many threads: a scan is mostly Lance's own work, off the
# GIL, and the score stage runs alone (the 1M 1% night's ten tenants: 0.14 against 0.22 s)
_SCAN_THREADS = 4


def _episode_tables(lance: LanceStore, wanted: list[tuple[str, list[str]]]) -> list[pa.Table]:
    """``_episode_table`` of each (tenant, ids), in order."""
    if len(wanted) < 2:
        return [_episode_table(lance, tenant, ids) for tenant, ids in wanted]
    with ThreadPoolExecutor(max_workers=min(_SCAN_THREADS, len(wanted))) as pool:
        return list(pool.map(lambda item: _episode_table(lance, *item), wanted))


def _episode_table(lance: LanceStore, tenant: str, ids: list[str]) -> pa.Table:
    """The tenant's episodes among ``ids`` (narrow columns), with the tenant as a column."""
    if len(ids) > _SCAN_OVER:
        # many ids (a first night at scale: ~500k at 1M episodes): one scan of the tenant's
        # narrow columns filtered in Arrow beats hundreds of IN-list scans of the table
        table = lance.scan(
            "episodes", where=f"tenant_id = {sql_quote(tenant)}", columns=_EPISODE_COLUMNS
        )
        table = table.filter(
            pc.is_in(table.column("episode_id"), value_set=pa.array(ids, pa.string()))
        )
    else:
        where = f"tenant_id = {sql_quote(tenant)} AND {in_list('episode_id', ids)}"
        table = lance.scan("episodes", where=where, columns=_EPISODE_COLUMNS)
    table = table.select(_EPISODE_COLUMNS)
    return table.append_column("tenant_id", pa.array([tenant] * table.num_rows, pa.string()))


def _found_per_candidate(
    candidates: Sequence[Candidate], tables: list[pa.Table]
) -> dict[int, dict[str, Any]]:
    """Per candidate (by position), what its supporting episodes found in Lance add up to.

    Columnar, because a first night at 1M scores ~3k candidates resting on ~120k episodes:
    one join and one group-by instead of a Python dict per episode row (~3.5 of the score
    stage's ~7.5 s there, s35). Counts follow the candidate's support list as given (an id
    listed twice counts twice; an id not found counts nothing); an episode id stored twice
    for a tenant counts as its last row read."""
    if not tables:
        return {}
    episodes = pl.DataFrame(pa.concat_tables(tables))
    if episodes.is_empty():
        return {}
    episodes = episodes.unique(["tenant_id", "episode_id"], keep="last", maintain_order=True)
    polarity = {t: feedback_polarity(t) for t in episodes["feedback"].unique().to_list() if t}
    timed = isinstance(episodes.schema["occurred_at"], pl.Datetime) and bool(
        episodes.schema["occurred_at"].time_zone  # type: ignore[union-attr]
    )
    episodes = episodes.with_columns(
        polarity=pl.col("feedback").replace_strict(polarity, default=0, return_dtype=pl.Int8),
        rank=pl.col("sensitivity").replace_strict(
            _SENSITIVITY_RANK, default=0, return_dtype=pl.Int8
        ),
    )
    index: list[int] = []
    tenants: list[str] = []
    ids: list[str] = []
    for i, cand in enumerate(candidates):
        index.extend([i] * len(cand.support_ids))
        tenants.extend([cand.tenant_id] * len(cand.support_ids))
        ids.extend(cand.support_ids)
    pairs = pl.DataFrame(
        {"i": index, "tenant_id": tenants, "episode_id": ids},
        schema={"i": pl.Int64, "tenant_id": pl.String, "episode_id": pl.String},
    )
    subject = pl.col("subject_id")
    sums = (
        pairs.join(episodes, on=["tenant_id", "episode_id"], how="inner")
        .group_by("i")
        .agg(
            subjects=subject.filter(subject.is_not_null() & (subject != "")).n_unique(),
            last=pl.col("occurred_at").max() if timed else pl.lit(None),
            successes=(pl.col("outcome") == "success").sum(),
            failures=(pl.col("outcome") == "failure").sum(),
            positive=(pl.col("polarity") > 0).sum(),
            negative=(pl.col("polarity") < 0).sum(),
            rank=pl.col("rank").max(),
        )
    )
    return {row["i"]: row for row in sums.iter_rows(named=True)}


_BY_RANK = {rank: name for name, rank in _SENSITIVITY_RANK.items()}


def _refine(base: Evidence, found: Mapping[str, Any]) -> Evidence:
    """The candidate's record, refined by what its episodes found in Lance add up to; a count
    of 0 keeps the record's own (the episodes may be gone, the miner's stats not)."""
    rank = int(found["rank"] or 0)
    last = found["last"]
    return replace(
        base,
        subjects=max(base.subjects, int(found["subjects"])),
        last_seen=utc(last) if last is not None else base.last_seen,
        successes=int(found["successes"]) or base.successes,
        failures=int(found["failures"]) or base.failures,
        feedback_positive=int(found["positive"]) or base.feedback_positive,
        feedback_negative=int(found["negative"]) or base.feedback_negative,
        # the most sensitive of the record's and the episodes' (the record's on a tie)
        sensitivity=base.sensitivity
        if rank <= _SENSITIVITY_RANK.get(base.sensitivity, 0)
        else _BY_RANK[rank],
    )
