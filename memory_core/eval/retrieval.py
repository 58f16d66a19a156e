"""Retrieval measurement: ask questions through the real read path, per ablation arm, and
turn what is served into recall@k, answer-in-context, stale, out-of-scope and budget figures.

Arms (the issue's ablation at retrieval level), each a set of memory classes the agent reads:
``no_memory`` (nothing), ``episodes`` (episodes and digests), ``facts_only`` (facts alone),
``episodes_facts`` (+ facts) and
``episodes_facts_procedures`` (+ procedures). Each arm asks recall for its classes in one call
(one ranking and one packing over them, as an agent asking those classes gets), with the same
options, once per subject the question may be about; those calls are merged by score and
packed again by the read path's ``pack`` into the same token budget, so the arms differ only
in what they may read. Scope is checked on every call before merging: a record of another
tenant or subject served by any call counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from memory_core.config import RecallConfig
from memory_core.embed import Embedder
from memory_core.eval import metrics
from memory_core.read.filters import CLASS_TABLES, MemoryType
from memory_core.read.pack import display_text, pack
from memory_core.read.rank import Candidate
from memory_core.recall import Recaller
from memory_core.stores.lance import sql_quote

__all__ = ["ARMS", "MemoEmbedder", "Query", "RetrievalRun", "evenly", "open_reader", "run_queries"]

ARMS: dict[str, tuple[str, ...]] = {
    "no_memory": (),
    "episodes": ("episodic",),
    "facts_only": ("semantic",),
    "episodes_facts": ("episodic", "semantic"),
    "episodes_facts_procedures": ("episodic", "semantic", "procedural"),
}
FULL_ARM = "episodes_facts_procedures"


def evenly(items: Sequence[Any], n: int | None) -> list[Any]:
    """At most ``n`` items spread evenly over the sequence, in order (all when ``n`` is None):
    a deterministic sample that covers every conversation or task, not just the first."""
    if n is None or n >= len(items):
        return list(items)
    if n <= 0:
        return []
    step = len(items) / n
    return [items[int(i * step)] for i in range(n)]


class MemoEmbedder:
    """The configured embedder with a memo of query texts: an ablation asks the same question
    once per memory class, and an embedding is the same whichever table it searches."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self._memo: dict[str, np.ndarray] = {}

    @property
    def version(self) -> str:
        return self.inner.version

    @property
    def dim(self) -> int:
        return self.inner.dim

    def prime(self, texts: Sequence[str], *, batch: int = 64) -> None:
        """Embed many queries up front in batches: MiniLM embedding one text per call is
        dominated by per-call overhead, and LoCoMo asks about a thousand questions."""
        todo = [t for t in dict.fromkeys(texts) if t not in self._memo]
        for start in range(0, len(todo), batch):
            self.embed(todo[start : start + batch])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self._memo]
        if missing:
            for text, vector in zip(missing, self.inner.embed(missing), strict=True):
                self._memo[text] = vector
        return np.stack([self._memo[t] for t in texts]) if texts else self.inner.embed(texts)


def open_reader(lance_uri: str, embedder: Embedder, config: RecallConfig) -> Recaller:
    """The agents' read path over an evaluation home, without an access log."""
    return Recaller(lance_uri, embedder=MemoEmbedder(embedder), config=config, access_log_dir=None)


@dataclass(frozen=True)
class Query:
    """One question: who asks (tenant, subjects), what counts as found, and the gold answer.

    ``relevant`` are record ids (episode, fact, procedure ids; a digest counts when its
    provenance names one); ``answers`` are strings that must all appear in the context for
    the answer to count as present; ``kind`` groups queries in the report.
    """

    text: str
    tenant_id: str
    subjects: tuple[str | None, ...]
    relevant: frozenset[str]
    answers: tuple[str, ...] = ()
    kind: str = "question"
    state: Mapping[str, str] = field(default_factory=dict)
    forbidden: frozenset[str] = frozenset()


@dataclass
class RetrievalRun:
    """Per arm: hits, answers found; across calls: served, stale, out of scope, budget use."""

    k: int
    budget_tokens: int
    queries: int = 0
    hits: dict[str, int] = field(default_factory=dict)
    answered: dict[str, int] = field(default_factory=dict)
    with_relevant: int = 0
    with_answer: int = 0
    served: int = 0
    stale: int = 0
    out_of_scope: int = 0
    forbidden_served: int = 0
    forbidden_asked: int = 0
    utilisation: list[float] = field(default_factory=list)
    by_kind: dict[str, dict[str, int]] = field(default_factory=dict)
    detail: list[dict[str, Any]] | None = None

    def as_dict(self) -> dict[str, Any]:
        arms = {
            arm: {
                "recall_at_k": metrics.rate(self.hits.get(arm, 0), self.with_relevant),
                "answer_in_context": metrics.rate(self.answered.get(arm, 0), self.with_answer),
            }
            for arm in ARMS
        }
        return {
            "k": self.k,
            "budget_tokens": self.budget_tokens,
            "queries": self.queries,
            "queries_with_relevant": self.with_relevant,
            "queries_with_answer": self.with_answer,
            "recall_at_k": arms[FULL_ARM]["recall_at_k"],
            "answer_in_context": arms[FULL_ARM]["answer_in_context"],
            "served_records": self.served,
            "stale_retrieval_rate": metrics.rate(self.stale, self.served),
            "wrong_scope_retrieval_rate": metrics.rate(self.out_of_scope, self.served),
            "wrong_scope_retrievals": self.out_of_scope,
            "forbidden_probes": self.forbidden_asked,
            "forbidden_served": self.forbidden_served,
            "context_budget_utilisation": metrics.mean(self.utilisation),
            "ablation": arms,
            "by_kind": self.by_kind,
        }


def _sources(record: Mapping[str, Any]) -> set[str]:
    ids = {str(record.get("record_id"))}
    for entry in record.get("provenance") or []:
        if isinstance(entry, Mapping) and entry.get("source_id"):
            ids.add(str(entry["source_id"]))
    return ids


def _merge(calls: Sequence[list[dict[str, Any]]], *, k: int, budget: int, cpt: float) -> tuple[
    list[dict[str, Any]], int
]:  # fmt: skip
    """One context from the records several recall calls served (one per subject a question
    may be about): the best-scored copy of each record, ranked by score and packed again by
    the read path's own ``pack`` (budget, record limit, one statement not paid for twice), so
    the context measured is the one an agent asking the same classes would get."""
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for records in calls:
        for rec in records:
            key = (str(rec.get("table")), str(rec.get("record_id")))
            if key not in best or (rec.get("score") or 0) > (best[key].get("score") or 0):
                best[key] = rec
    ranked = sorted(
        best.values(),
        key=lambda r: (-(r.get("score") or 0), str(r.get("table")), str(r["record_id"])),
    )
    cands = [
        Candidate(
            str(r.get("table")), str(r["record_id"]), dict(r), score=float(r.get("score") or 0)
        )
        for r in ranked
    ]
    chosen, _, used = pack(cands, k=k, budget_tokens=budget, chars_per_token=cpt)
    return [c.row for c in chosen], used


def run_queries(
    memory: Recaller,
    queries: Sequence[Query],
    *,
    now: datetime,
    k: int,
    budget_tokens: int,
    detail: bool = False,
) -> RetrievalRun:
    """Ask every query in every arm; return the counts (see ``RetrievalRun.as_dict``).

    Each arm asks recall for its classes together (one ranking and one packing, as an agent
    asking those classes gets), once per subject the question may be about; ``detail`` keeps
    per query and arm what was served and whether it counted (``RetrievalRun.detail``)."""
    run = RetrievalRun(k=k, budget_tokens=budget_tokens, detail=[] if detail else None)
    cpt = memory.config.chars_per_token
    holds: dict[tuple[str, str], bool] = {}
    if isinstance(memory.embedder, MemoEmbedder):
        memory.embedder.prime([q.text or " " for q in queries])

    def has_rows(tenant: str, memory_type: str) -> bool:
        """Whether the tenant has any row of the class: asking an empty class serves nothing,
        so it is skipped (LoCoMo has no facts or procedures; this halves its queries)."""
        key = (tenant, memory_type)
        if key not in holds:
            where = f"tenant_id = {sql_quote(tenant)}"
            holds[key] = any(
                name in memory.store.table_names() and memory.store.count(name, where) > 0
                for name in CLASS_TABLES[MemoryType(memory_type)]
            )
        return holds[key]

    sensitivity = ["low", "medium", "high"]
    for query in queries:
        run.queries += 1
        run.with_relevant += bool(query.relevant)
        run.with_answer += bool(query.answers)
        kind = run.by_kind.setdefault(query.kind, {"queries": 0, "hits": 0, "answered": 0})
        kind["queries"] += 1
        served_by: dict[tuple[str, ...], list[list[dict[str, Any]]]] = {}
        for types in ARMS.values():
            asked = tuple(t for t in types if has_rows(query.tenant_id, t))
            if asked in served_by:
                continue  # an arm whose other classes hold nothing reads what another arm read
            calls = []
            for subject in query.subjects if asked else ():
                result = memory.recall(
                    query.text, tenant_id=query.tenant_id, subject_id=subject,
                    memory_type=asked, now=now, k=k, budget_tokens=budget_tokens,
                    state=dict(query.state), sensitivity=sensitivity,
                )  # fmt: skip
                for rec in result.records:
                    run.served += 1
                    run.stale += metrics.stale_record(rec, now)
                    run.out_of_scope += metrics.wrong_scope_record(rec, query.tenant_id, subject)
                calls.append(result.records)
            served_by[asked] = calls
        detail: dict[str, Any] = {}
        for arm, types in ARMS.items():
            asked = tuple(t for t in types if has_rows(query.tenant_id, t))
            packed, used = _merge(served_by[asked], k=k, budget=budget_tokens, cpt=cpt)
            served_ids = set().union(*(_sources(r) for r in packed)) if packed else set()
            ranked = [str(r["record_id"]) for r in packed]
            hit = bool(query.relevant) and bool(served_ids & query.relevant)
            context = "\n".join(display_text(str(r.get("table")), r) for r in packed)
            answered = bool(query.answers) and all(
                metrics.answer_in_context(a, context) for a in query.answers
            )
            run.hits[arm] = run.hits.get(arm, 0) + hit
            run.answered[arm] = run.answered.get(arm, 0) + answered
            if run.detail is not None:
                detail[arm] = {"hit": hit, "answered": answered, "served": ranked}
            if arm == FULL_ARM:
                run.utilisation.append(metrics.budget_utilisation(used, budget_tokens))
                kind["hits"] += hit
                kind["answered"] += answered
                if query.forbidden:
                    run.forbidden_asked += 1
                    run.forbidden_served += bool(set(ranked) & query.forbidden)
        if run.detail is not None:
            run.detail.append({"query": query.text, "relevant": sorted(query.relevant)} | detail)
    return run
