"""Mining stage: clusters -> procedural and semantic candidates, stored with their evidence.

Per partition (one tenant, one namespace: nothing crosses it), after clustering:

1. every cluster is mined as a whole (``counterexamples.mine_cluster``): one procedural
   candidate per action pattern with repeated successes, ``pending_score`` when the policy
   passes, otherwise ``auto_rejected`` with the failed tests in ``reason``;
2. each passing procedural candidate gets a semantic *insight* twin ("error 720 was resolved
   by ..., 3 of 3 times when adapter_mismatch=true"); a twin whose procedure stops passing is
   kept in step as ``auto_rejected`` instead of being left pending;
3. users' claims are aggregated into preference candidates (``claims.aggregate_claims``);
4. candidates are upserted by deterministic id, so a rerun updates instead of duplicating and
   a rerun with nothing new writes nothing;
5. claims without authority (tool/agent) are counted in the audit log as blocked preference
   writes, each exactly once across runs: the audit event lists the episode ids it counted;
6. pending candidates of the partition that this run no longer produces (a recluster merged
   their cluster, evidence was forgotten, the policy version changed) are retired as
   ``auto_rejected`` with a ``stale: ...`` reason instead of going on to scoring.

Candidate ids: ``stable_id("cand", kind, tenant, namespace, subject or "", <content>, policy
version)``. For a procedure the content is (cluster id, steps): the same steps can solve two
different problems in one partition (two clusters), and must not collide; preconditions and
evidence are left out so the candidate updates in place as evidence grows. A twin's content is
its procedure's id (its claim text embeds the conditions, which may change).
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from memory_core.config import Settings
from memory_core.context import Partition, RunContext
from memory_core.crash import crash_point
from memory_core.models import (
    Authority,
    Candidate,
    CandidateKind,
    CandidateStatus,
    ClaimSpec,
    ProcedureSpec,
    pitfall_candidate_id,
    stable_id,
)
from memory_core.stages.extract.statements import extracted_claim_rows, proposal_rule
from memory_core.stages.mine.claims import aggregate_claims
from memory_core.stages.mine.counterexamples import (
    EpisodeGroup,
    PatternFinding,
    condition_values,
    format_conditions,
    mine_groups,
    policy_failures,
    wilson_lower_bound,
)
from memory_core.stages.mine.units import plan_units
from memory_core.stages.partitions import active_episodes_where
from memory_core.step_abstract import (
    AbstractStep,
    abstract_steps,
    pattern_of,
    policy_steps,
    step_signature,
)
from memory_core.stores import Stores
from memory_core.stores import clusters as cluster_store
from memory_core.stores.audit import record_audit
from memory_core.stores.candidates import (
    EpisodePins,
    candidate_hashes,
    episode_pins,
    existing_ids,
    get_candidates,
    ids_by_partition,
    pending_keys,
    upsert_candidates,
)
from memory_core.stores.extract import fact_partitions
from memory_core.stores.lance import LanceStore
from memory_core.stores.mine_units import (
    UnitSave,
    load_all_units,
    load_units,
    save_partitions_units,
)

__all__ = [
    "MineState",
    "MinedPartition",
    "MiningResult",
    "SharedMineState",
    "StagedMining",
    "compute_mining",
    "finish_mining",
    "mine_partition",
    "procedural_candidate_id",
    "read_mine_state",
    "read_shared_mine_state",
    "settle_twins",
    "stage_mining",
    "write_mining",
]

logger = logging.getLogger(__name__)

SCAN_COLUMNS = [
    "episode_id",
    "subject_id",
    "session_id",
    "occurred_at",
    "source_role",
    "goal",
    "actions",
    "outcome",
    "conditions",
    "claims",
    "content_hash",
    "text",
]
# what mining reads of the episodes of the units it mines (``_Evidence``)
_EVIDENCE_COLUMNS = ["episode_id", "subject_id", "session_id", "goal", "actions", "outcome",
                     "conditions", "content_hash"]  # fmt: skip
_SUPPORT_RUNS = 20  # supporting runs a procedure lists (their step signatures) in its stats


@dataclass
class MiningResult:
    """What one call mined in one partition; ``as_dict`` is what flows publish."""

    partition: str
    episodes: int = 0
    clusters: int = 0
    procedural: int = 0
    passed: int = 0
    auto_rejected: int = 0
    insights: int = 0
    pitfalls: int = 0
    preferences: int = 0
    blocked_claims: int = 0
    stale: int = 0
    units_mined: int = 0
    units_kept: int = 0
    upserted: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "episodes": self.episodes,
            "clusters": self.clusters,
            "procedural": self.procedural,
            "passed": self.passed,
            "auto_rejected": self.auto_rejected,
            "insights": self.insights,
            "pitfalls": self.pitfalls,
            "preferences": self.preferences,
            "blocked_claims": self.blocked_claims,
            "stale": self.stale,
            "units_mined": self.units_mined,
            "units_kept": self.units_kept,
            "upserted": dict(self.upserted),
        }


def procedural_candidate_id(
    partition: Partition, cluster_id: str, steps: list[str] | tuple[str, ...], version: str
) -> str:
    return stable_id(
        "cand",
        CandidateKind.procedural.value,
        partition.tenant_id,
        partition.namespace,
        "",
        [cluster_id, list(steps)],
        version,
    )


def _twin_id(partition: Partition, procedural_id: str, version: str) -> str:
    return stable_id(
        "cand",
        CandidateKind.semantic.value,
        partition.tenant_id,
        partition.namespace,
        "",
        ["insight", procedural_id],
        version,
    )


def _with_claims(table: Any) -> Any:
    """Rows whose claims column holds at least one claim (null and "[]" do not)."""
    return pc.fill_null(pc.not_equal(table.column("claims"), "[]"), fill_value=False)


def _scan(
    lance: LanceStore, partition: Partition, scanned: pa.Table | None = None
) -> tuple[int, Any, Any]:
    """(active episodes, those with actions or claims, which of those have actions);
    ``scanned``: the partition's active episodes as the caller read them."""
    if scanned is not None:
        table = scanned.select(SCAN_COLUMNS)
    else:
        where = active_episodes_where(partition)
        table = lance.scan("episodes", where=where, columns=SCAN_COLUMNS)
    total = table.num_rows
    has_actions = pc.greater(pc.list_value_length(table.column("actions")), 0)
    keep = pc.or_kleene(_with_claims(table), has_actions)
    return total, table.filter(keep), pc.fill_null(has_actions.filter(keep), fill_value=False)


def _claim_rows(table: Any) -> list[dict[str, Any]]:
    """Episodes with claims as dicts, JSON fields parsed: what ``aggregate_claims`` reads.

    Episodes without claims give it nothing, so they are never materialised as dicts (mining
    reads columns: ``_Evidence``); the rest are built column by column (much faster than
    ``Table.to_pylist``).
    """
    table = table.filter(_with_claims(table))
    names = [name for name in SCAN_COLUMNS if name not in ("conditions", "claims")]
    rows = [
        dict(zip(names, values, strict=True))
        for values in zip(*(table.column(name).to_pylist() for name in names), strict=True)
    ]
    parsed: dict[str, dict[str, Any]] = {}  # episodes of one problem often repeat conditions
    conditions = table.column("conditions").to_pylist()
    claims = table.column("claims").to_pylist()
    for row, cond, claim in zip(rows, conditions, claims, strict=True):
        if cond:
            if cond not in parsed:
                parsed[cond] = json.loads(cond)
            value = parsed[cond]
            row["conditions"] = dict(value) if isinstance(value, dict) else value  # own copy
        else:
            row["conditions"] = {}
        row["claims"] = json.loads(claim)
    return rows


@dataclass(frozen=True)
class _Evidence:
    """The episodes of the units mined this run, as columns, and their groups by unit.

    Why columns: a partition of 10k episodes was 10k dicts built and read once each; mining
    decides per group of episodes it cannot tell apart (``EpisodeGroup``) and needs a few
    fields of the few episodes a candidate cites (its pins, its support's actions, subjects
    and goals), so those are looked up by id. An episode's actions are its group's (one list per
    group, from the group-by: converting the actions column per episode was ~70% of turning
    a partition's columns into lists).
    """

    groups: dict[str, list[EpisodeGroup]]  # by unit key, units in key order
    clusters: dict[str, list[str]]  # by unit key: its clusters holding an episode with actions
    subject: dict[str, str | None]  # by episode id
    actions: dict[str, tuple[str, ...]]  # by episode id: its group's action list
    pins: EpisodePins
    table: Any  # the episodes, in id order

    @classmethod
    def of(cls, table: Any, units: pl.DataFrame, settings: Settings, namespace: str) -> _Evidence:
        """The episodes of ``table`` in id order; ``units``: (episode_id, cluster_id, unit) of
        the episodes with actions in a cluster, the ones mining groups."""
        table = table.take(pc.sort_indices(table, sort_keys=[("episode_id", "ascending")]))
        ids = table.column("episode_id").to_pylist()
        subject = dict(zip(ids, table.column("subject_id").to_pylist(), strict=True))
        groups, clusters, actions = _groups(table, units, settings, namespace)
        # the evidence pins of the candidates mined from them, which ``upsert_candidates``
        # keeps in ``candidate_evidence`` only (``stores/candidates.PINS_IN_EVIDENCE``): a
        # partition's candidates cite ~1 episode per episode, and one ``Provenance`` object
        # per cited episode, built and validated each night a unit was touched, was ~30% of a
        # 1% night's partition CPU; columns, never Python objects (``EpisodePins``)
        pins = episode_pins(table)
        return cls(groups, clusters, subject, actions, pins, table)

    def actions_of(self, ids: tuple[str, ...]) -> list[tuple[str, ...]]:
        return [self.actions[e] for e in ids]

    def subjects_of(self, ids: tuple[str, ...]) -> list[str | None]:
        """Who made each run: runs of one subject agree with themselves, so a value they all
        gave is no constant of the procedure (``step_abstract.abstract_steps``)."""
        subject = self.subject
        return [subject[e] for e in ids]

    @functools.cached_property
    def goal(self) -> dict[str, str | None]:
        """Each episode's goal by id: read only when a procedure's problem has no error code
        to name it (``_problem``)."""
        ids = self.table.column("episode_id").to_pylist()
        return dict(zip(ids, self.table.column("goal").to_pylist(), strict=True))

    def goals_of(self, ids: tuple[str, ...]) -> list[tuple[str, str]]:
        """(goal, subject) of each episode: what names the problem (``_problem``)."""
        goal, subject = self.goal, self.subject
        return [(goal[e] or "", subject[e] or "") for e in ids]


def _groups(
    table: Any, units: pl.DataFrame, settings: Settings, namespace: str
) -> tuple[dict[str, list[EpisodeGroup]], dict[str, list[str]], dict[str, tuple[str, ...]]]:
    """Each unit's episodes (``table`` in id order) grouped by (actions, outcome, conditions
    text), in polars: the per-episode work is a group-by, not a Python loop. Each distinct
    action list is patterned once and each distinct conditions text parsed once (one shared
    object: ``counterexamples._weighted`` tells objects apart by identity). Also each grouped
    episode's actions (its group's list), by episode id."""
    frame = pl.from_arrow(
        table.select(["episode_id", "subject_id", "session_id", "actions", "outcome",
                      "conditions"])
    )  # fmt: skip
    assert isinstance(frame, pl.DataFrame)
    outcome = pl.col("outcome")
    joined = frame.join(units, on="episode_id", how="inner", maintain_order="left")
    clusters = {
        unit: sorted(cids)
        for unit, cids in joined.group_by("unit").agg(pl.col("cluster_id").unique()).iter_rows()
    }
    rows = (
        joined.with_columns(
            pl.when(outcome.is_null() | (outcome == ""))
            .then(pl.lit("unknown"))
            .otherwise(outcome)
            .alias("outcome")
        )
        .group_by(["unit", "actions", "outcome", "conditions"], maintain_order=True)
        .agg("episode_id", "subject_id", "session_id")
        .sort("unit", maintain_order=True)
    )
    patterns: dict[tuple[str, ...], tuple[str, ...]] = {}
    parsed: dict[str | None, dict[str, str]] = {}
    out: dict[str, list[EpisodeGroup]] = {}
    actions: dict[str, tuple[str, ...]] = {}
    for unit, acts, result, cond, ids, subjects, sessions in rows.iter_rows():
        key = tuple(acts or ())
        actions.update(dict.fromkeys(ids, key))  # a tuple: abstract_steps keys runs by it
        pattern = patterns.get(key)
        if pattern is None:
            pattern = patterns[key] = pattern_of(key, settings.steps, namespace)
        found = parsed.get(cond)
        if found is None:
            found = parsed[cond] = condition_values(cond or None)
        group = EpisodeGroup(pattern, result, found, bool(key), ids, subjects, sessions)
        out.setdefault(unit, []).append(group)
    return out, clusters, actions


def _slug(text: str, words: int = 8) -> str:
    tokens = re.findall(r"[a-z0-9]+", text.lower())[:words]
    return "-".join(tokens) or "unknown"


_STOP = frozenset(
    [
        "the",
        "and",
        "for",
        "you",
        "can",
        "with",
        "that",
        "this",
        "have",
        "need",
        "would",
        "like",
        "please",
        "could",
        "help",
        "hi",
        "hello",
        "there",
        "thanks",
        "thank",
        "want",
        "some",
        "about",
        "from",
        "into",
        "my",
        "our",
        "your",
        "its",
        "are",
        "was",
        "were",
        "will",
    ]
)


def _problem(
    context: dict[str, str], goals_of: Callable[[], list[tuple[str, str]]]
) -> tuple[str, str]:
    """(human phrase, short key) naming the problem a cluster is about.

    A tenant-scope procedure must not quote one person: a goal is used verbatim only when at
    least two subjects stated it; otherwise the phrase is the words most of the goals share
    (stated by two subjects or more), and failing that a neutral phrase. ``goals_of``: the
    (goal, subject) of each success, asked for only when no error code names the problem
    (one lookup per success: most procedures have a code).
    """
    code = context.get("error_code")
    if code:
        return f"error {code}", f"error_{code}"
    goals = goals_of()
    by_goal: dict[str, set[str]] = {}
    for goal, subject in goals:
        if goal and goal.strip():
            by_goal.setdefault(goal.strip(), set()).add(subject)
    shared = sorted((g for g, subs in by_goal.items() if len(subs) >= 2),
                    key=lambda g: (-len(by_goal[g]), g))  # fmt: skip
    if shared:
        return shared[0], _slug(shared[0])
    words: dict[str, set[str]] = {}
    docs = 0
    for goal, subject in goals:
        tokens = {t for t in re.findall(r"[a-z]{3,}", (goal or "").lower()) if t not in _STOP}
        docs += bool(tokens)
        for token in tokens:
            words.setdefault(token, set()).add(subject)
    counts = Counter(
        t for goal, _ in goals for t in set(re.findall(r"[a-z]{3,}", (goal or "").lower()))
    )
    common = [
        t
        for t in sorted(words, key=lambda t: (-counts[t], t))
        if len(words[t]) >= 2 and counts[t] * 2 >= max(docs, 1)
    ][:5]
    if common:
        phrase = "requests about " + " ".join(common)
        return phrase, _slug(" ".join(common))
    return "this problem", "problem"


def _procedural(
    finding: PatternFinding,
    partition: Partition,
    cluster_id: str,
    phrase: str,
    version: str,
    shown: list[AbstractStep],
    observed: dict[str, AbstractStep] | None = None,
    runs: list[list[str]] | None = None,
) -> Candidate:
    steps_text = ", then ".join(a.text() for a in shown)
    cond_text = format_conditions(finding.preconditions)
    trials = len(finding.support_ids) + len(finding.unexplained_ids)
    text = (
        f"In this environment {phrase} was resolved by {steps_text}, "
        f"{len(finding.support_ids)} of {trials} times"
        + (f" when {cond_text}" if cond_text else "")
    )
    if finding.counterexample_ids:
        text += f"; {len(finding.counterexample_ids)} failure(s) with the same steps"
    # no provenance: its pins (every cited episode) are written to candidate_evidence only
    return Candidate(
        candidate_id=procedural_candidate_id(partition, cluster_id, finding.steps, version),
        kind=CandidateKind.procedural,
        tenant_id=partition.tenant_id,
        subject_id=None,
        namespace=partition.namespace,
        procedure=ProcedureSpec(
            name=f"{phrase}: {steps_text}"[:200],
            steps=[a.text() for a in shown],
            preconditions=finding.preconditions,
        ),
        conditions=finding.conditions,
        support_ids=sorted(finding.support_ids),
        counterexample_ids=sorted(finding.counterexample_ids),
        confidence=round(finding.wilson_lower, 4),
        status=CandidateStatus.pending_score if finding.passed else CandidateStatus.auto_rejected,
        reason=finding.reason,
        authority=Authority.none,
        text=text,
        stats={
            **finding.stats(),
            "pattern": list(finding.steps),
            "abstract_steps": [a.as_dict() for a in shown],
            "world_changing_steps": [a.text() for a in shown if a.changes_world],
            "read_only_steps": [a.text() for a in shown if a.read_only],
            "control_steps": [a.text() for a in shown if a.control],
            # what workflow text may name (stages/score/workflow_text.py checks against these)
            "observed_steps": [a.text() for a in (observed or {}).values()],
            "support_runs": (runs or [])[:_SUPPORT_RUNS],
        },
        cluster_id=cluster_id,
        policy_version=version,
    )


def _pitfall_id(partition: Partition, procedural_id: str, version: str) -> str:
    return pitfall_candidate_id(partition.tenant_id, partition.namespace, procedural_id, version)


def _pitfall(
    finding: PatternFinding,
    proc: Candidate,
    partition: Partition,
    key: str,
    policy: Any,
) -> Candidate | None:
    """A failure lesson: the pattern's explained failures and the conditions they share.

    Goes through scoring, review and promotion like any semantic candidate; its conditions
    are what recall matches against an agent's stated state, and ``stats.pitfall_of`` names
    the procedure it qualifies.
    """
    pit = finding.pitfall
    if pit is None or proc.procedure is None:
        return None
    n = len(pit.failure_ids)
    trials = n + pit.successes_under_conditions
    wilson = wilson_lower_bound(n, trials, policy.wilson_z)
    failed = policy_failures(
        support_episodes=n, support_subjects=len(pit.subjects), wilson_lower=wilson,
        unexplained=0, policy=policy,
    )  # fmt: skip
    when = format_conditions(pit.conditions)
    steps = ", then ".join(s for s in proc.stats.get("world_changing_steps", []))
    steps = steps or ", then ".join(proc.procedure.steps)
    obj = f"{steps} failed {n} of {trials} times when {when}"
    return Candidate(
        candidate_id=_pitfall_id(partition, proc.candidate_id, policy.version),
        kind=CandidateKind.semantic,
        tenant_id=partition.tenant_id,
        subject_id=None,
        namespace=partition.namespace,
        claim=ClaimSpec(predicate=f"pitfall:{key}", object=obj),
        conditions={**finding.context, **pit.conditions},
        support_ids=sorted(pit.failure_ids),
        counterexample_ids=[],
        confidence=round(wilson, 4),
        status=CandidateStatus.auto_rejected if failed else CandidateStatus.pending_score,
        reason="; ".join(failed)
        if failed
        else (f"passed: {n} failures from {len(pit.subjects)} subjects explained by {when}"),
        authority=Authority.none,
        text=f"Pitfall: in this environment {obj}",
        stats={
            "pitfall": True,
            "pitfall_of": proc.candidate_id,
            "failures": n,
            "failure_subjects": len(pit.subjects),
            "wilson_lower": round(wilson, 4),
            "steps": proc.procedure.steps,
            "failed_tests": failed,
        },
        cluster_id=proc.cluster_id,
        policy_version=policy.version,
    )  # its pins (its failures) go to candidate_evidence only, as a procedure's


def _twin(proc: Candidate, partition: Partition, key: str, version: str) -> Candidate:
    assert proc.procedure is not None  # built by _procedural
    cond_text = format_conditions(proc.procedure.preconditions)
    drop = ("abstract_steps", "pattern", "observed_steps", "support_runs")
    stats = {k: v for k, v in proc.stats.items() if k not in drop}
    proc = proc.model_copy(update={"stats": stats})
    obj = ", then ".join(proc.procedure.steps) + (f" when {cond_text}" if cond_text else "")
    return proc.model_copy(
        update={
            "candidate_id": _twin_id(partition, proc.candidate_id, version),
            "kind": CandidateKind.semantic,
            "procedure": None,
            "claim": ClaimSpec(predicate=f"resolution:{key}", object=obj),
            "stats": {**proc.stats, "twin_of": proc.candidate_id},
        }
    )


def _home_cluster(finding: PatternFinding, cluster_of: dict[str, str], cids: list[str]) -> str:
    """The cluster a finding of a mining unit belongs to: the one holding most of its
    successes (ties: the smaller id), so its candidate id stays keyed by one cluster."""
    if len(cids) == 1:
        return cids[0]
    counts = Counter(cluster_of[e] for e in finding.success_ids if e in cluster_of)
    return min(cids, key=lambda c: (-counts.get(c, 0), c))


@dataclass
class _UnitOut:
    """What mining one unit produced: procedural candidates, their kept twins, pitfalls."""

    procedural: list[Candidate] = field(default_factory=list)
    twins: list[Candidate] = field(default_factory=list)
    pitfalls: list[Candidate] = field(default_factory=list)

    def built(self) -> list[Candidate]:
        return [*self.procedural, *self.twins, *self.pitfalls]

    def produced(self) -> dict[str, Any]:
        """What ``stores/mine_units`` keeps of it: the ids and the counts a result reports."""
        procs = self.procedural
        return {
            "ids": sorted(c.candidate_id for c in self.built()),
            "procedural": len(procs),
            "passed": sum(c.status == CandidateStatus.pending_score for c in procs),
            "insights": len(self.twins),
            "pitfalls": len(self.pitfalls),
        }


def _mine_clusters(
    settings: Settings,
    partition: Partition,
    evidence: _Evidence,
    members: Any,
    stored_semantic: frozenset[str] | None = None,
) -> dict[str, _UnitOut]:
    """Candidates of every mining unit with episodes in ``evidence``, by unit key (twins of
    failing procedures not yet checked against the store: ``_keep_twins``).

    ``stored_semantic``: the ids of the partition's stored semantic candidates, when read
    (``MineState``): a failing procedure's twin is built only when it is among them, as
    ``_keep_twins`` keeps no other. Why: most of a 1M home's procedures fail the policy, and
    their twins, built, sent to the writer and checked only to be dropped, were ~9.5k of the
    ~23k candidates a 1% night's workers built (BENCHMARKS.md s46)."""
    cluster_of = dict(
        zip(
            members.column("episode_id").to_pylist(),
            members.column("cluster_id").to_pylist(),
            strict=True,
        )
    )
    version = settings.policy.version
    signatures: dict[tuple[str, ...], list[str]] = {}  # support runs repeat action lists
    out: dict[str, _UnitOut] = {}
    for key, groups in evidence.groups.items():
        unit = out.setdefault(key, _UnitOut())
        cids = evidence.clusters[key]
        for finding in mine_groups(groups, settings.policy):
            cid = _home_cluster(finding, cluster_of, cids)
            support_ids = finding.support_ids or finding.success_ids
            support = evidence.actions_of(support_ids)
            abstract = abstract_steps(
                support, settings.steps, partition.namespace,
                sources=evidence.subjects_of(support_ids),
            )  # fmt: skip
            shown = policy_steps(
                finding.steps, abstract, support, settings.steps, partition.namespace
            )
            if not shown:
                continue  # nothing done and nothing looked up: no procedure to show
            goals = functools.partial(evidence.goals_of, finding.success_ids)
            phrase, pkey = _problem(finding.conditions, goals)
            runs = [_signatures(acts, signatures) for acts in support[:_SUPPORT_RUNS]]
            proc = _procedural(finding, partition, cid, phrase, version, shown, abstract, runs)
            unit.procedural.append(proc)
            if (
                proc.status == CandidateStatus.pending_score
                or stored_semantic is None
                or _twin_id(partition, proc.candidate_id, version) in stored_semantic
            ):
                unit.twins.append(_twin(proc, partition, pkey, version))
            pit = _pitfall(finding, proc, partition, pkey, settings.policy)
            if pit is not None:
                unit.pitfalls.append(pit)
    return out


def _signatures(actions: list[Any], cache: dict[tuple[str, ...], list[str]]) -> list[str]:
    """``step_signature`` of each action, computed once per distinct action list."""
    key = tuple(actions)
    if key not in cache:
        cache[key] = [step_signature(a) for a in actions]
    return list(cache[key])


def _keep_twins(stores: Stores, units: list[dict[str, _UnitOut]]) -> None:
    """A twin of a failing procedure is kept (in step, as auto_rejected) only when it was
    stored before; one that never passed is not written at all. ``units``: several
    partitions' units, looked up in one read."""
    failing = [
        t.candidate_id
        for by_key in units
        for unit in by_key.values()
        for t in unit.twins
        if t.status != CandidateStatus.pending_score
    ]
    existing = existing_ids(stores.meta, failing) if failing else set()
    for by_key in units:
        for unit in by_key.values():
            unit.twins = [
                t
                for t in unit.twins
                if t.status == CandidateStatus.pending_score or t.candidate_id in existing
            ]


def _count_blocked(
    stores: Stores, ctx: RunContext, partition: Partition, blocked: dict[str, int]
) -> int:
    """Audit blocked preference writes not counted by an earlier run; returns how many."""
    if not blocked:
        return 0
    seen = cluster_store.blocked_claim_episodes(
        stores.meta, partition.tenant_id, partition.namespace
    )
    fresh = sorted(e for e in blocked if e not in seen)
    if not fresh:
        return 0
    claims = sum(blocked[e] for e in fresh)
    with stores.meta.transaction() as con:
        record_audit(
            con,
            at=ctx.now,
            action=cluster_store.BLOCKED_PREFERENCE_ACTION,
            run_id=ctx.run_id,
            actor=ctx.actor,
            target=partition.key,
            tenant_id=partition.tenant_id,
            counts={"claims": claims, "episodes": len(fresh)},
            detail={"namespace": partition.namespace, "episode_ids": fresh},
        )
    return claims


def _stale(
    stores: Stores,
    partition: Partition,
    produced: set[str],
    clusters: set[str],
    version: str,
    pending: frozenset[str] | None = None,
) -> list[Candidate]:
    """Pending candidates of the partition this run no longer produces, as auto_rejected.

    A recluster can merge or split clusters (procedures are keyed by cluster), forgetting can
    remove evidence, a policy change re-keys everything: the old candidate must not go on to
    scoring and review as if it were current. Decided ones are never touched.
    """
    stale = []
    gone = pending_keys(stores.meta, partition.tenant_id, partition.namespace, produced=produced,
                        pending=pending)  # fmt: skip
    bodies = {c.candidate_id: c for c in get_candidates(stores.meta, [k[0] for k in gone])}
    for cid, policy_version, cluster_id in gone:
        cand = bodies[cid]
        if policy_version != version:
            why = f"stale: mined under policy version {policy_version}, now {version}"
        elif cluster_id is not None and cluster_id not in clusters:
            why = f"stale: cluster {cluster_id} was merged or re-clustered"
        else:
            why = "stale: no longer supported by the partition's episodes"
        stale.append(
            cand.model_copy(update={"status": CandidateStatus.auto_rejected, "reason": why})
        )
    return stale


def _mining_config(settings: Settings, partition: Partition) -> list[Any]:
    """What a unit's candidates depend on besides its episodes (``units.plan_units``)."""
    return [settings.policy.model_dump(), settings.steps.model_dump(), partition.namespace]


@dataclass
class MineState:
    """What mining a partition reads from DuckDB before its compute: the stored unit
    fingerprints (``stores/mine_units``) and the extracted facts as claim rows. Read by the
    process holding DuckDB and handed to ``compute_mining``, which may run in another one."""

    units: dict[str, tuple[str, dict[str, Any]]]
    extracted: list[dict[str, Any]]
    # the partition's stored semantic candidates (twins among them): None when not read
    semantic_ids: frozenset[str] | None = None


@dataclass
class MinedPartition:
    """What ``compute_mining`` leaves for the writer (``write_mining``): the candidates of the
    touched units (twins not yet checked against the store), the claims, the units carried
    forward, the fingerprints and evidence pins to store, and the candidates' hashes
    (``candidates.candidate_hashes``: computed where the candidates are built, a worker
    process on the pool's path, not by its one writer)."""

    result: MiningResult
    units: dict[str, _UnitOut]
    kept: dict[str, dict[str, Any]]
    fingerprints: dict[str, str]
    claims: list[Candidate]
    blocked: dict[str, int]
    cluster_ids: set[str]
    pins: EpisodePins
    hashes: dict[str, tuple[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class SharedMineState:
    """The small parts of every partition's ``MineState``, each read once for a night of many
    partitions (``read_shared_mine_state``) instead of once per partition: unit fingerprints,
    stored semantic ids, and which partitions hold extracted facts (the others read none).

    Why, and why they stay valid through the night: ``stages/shared_state.py``."""

    units: dict[tuple[str, str], dict[str, tuple[str, dict[str, Any]]]]
    semantic_ids: dict[tuple[str, str], frozenset[str]]
    with_facts: set[tuple[str, str]]
    pending_ids: dict[tuple[str, str], frozenset[str]]  # pending_score: what ``_stale`` checks


def read_shared_mine_state(stores: Stores) -> SharedMineState:
    return SharedMineState(
        units=load_all_units(stores.meta),
        semantic_ids=ids_by_partition(stores.meta, kind=CandidateKind.semantic.value),
        with_facts=fact_partitions(stores.meta),
        pending_ids=ids_by_partition(stores.meta, status=CandidateStatus.pending_score.value),
    )


def read_mine_state(
    stores: Stores, partition: Partition, shared: SharedMineState | None = None
) -> MineState:
    """The partition's stored unit fingerprints and extracted claims; ``shared``: the small
    parts as read once for the night."""
    key = (partition.tenant_id, partition.namespace)
    if shared is None:
        units = load_units(stores.meta, partition.tenant_id, partition.namespace)
        semantic_ids = ids_by_partition(
            stores.meta, kind=CandidateKind.semantic.value, partition=key
        )
        semantic = semantic_ids.get(key, frozenset())
        extracted = extracted_claim_rows(stores, partition)
    else:
        units = dict(shared.units.get(key, {}))
        semantic = shared.semantic_ids.get(key, frozenset())
        extracted = extracted_claim_rows(stores, partition) if key in shared.with_facts else []
    return MineState(units=units, extracted=extracted, semantic_ids=semantic)


def compute_mining(
    lance: LanceStore,
    settings: Settings,
    partition: Partition,
    state: MineState,
    clustering: tuple[pa.Table, pa.Table],
    scanned: pa.Table | None = None,
) -> MinedPartition:
    """Mine the partition's changed units and its claims from Lance and ``state``: no DuckDB,
    so it runs in any process (``stages/consolidate_pool.py``). ``clustering``: the partition's
    (clusters, members) as stored after clustering; ``scanned``: its active episodes as the
    caller read them (at least ``SCAN_COLUMNS``), instead of a scan of its own."""
    total, table, has_actions = _scan(lance, partition, scanned)
    result = MiningResult(partition.key, episodes=total)
    info, members = clustering
    plan = plan_units(table, has_actions, info, members, _mining_config(settings, partition))
    stored = state.units
    kept = {u: stored[u][1] for u, fp in plan.fingerprints.items() if stored.get(u, ("",))[0] == fp}
    touched = set(plan.fingerprints) - set(kept)
    # only the units to mine are read: a kept unit's episodes (claims or not) are not re-mined
    ids = plan.episode_ids(touched)
    evidence_columns = table.select(_EVIDENCE_COLUMNS)  # not texts nor claims: ~1M rows a night
    remined = evidence_columns.filter(pc.is_in(table.column("episode_id"), value_set=ids))
    evidence = _Evidence.of(remined, plan.episodes, settings, partition.namespace)
    units = _mine_clusters(settings, partition, evidence, members, state.semantic_ids)
    result.clusters = plan.clusters
    result.units_mined, result.units_kept = len(units), len(kept)
    # facts extracted from conversations (stages/extract) enter as claims on their evidence
    claims = aggregate_claims(
        [*_claim_rows(table), *state.extracted],
        settings.claims,
        tenant_id=partition.tenant_id,
        namespace=partition.namespace,
        policy_version=settings.policy.version,
        proposal=proposal_rule(settings.extract),
    )
    built = [c for unit in units.values() for c in unit.built()]
    return MinedPartition(
        result=result,
        units=units,
        kept=kept,
        fingerprints=plan.fingerprints,
        claims=list(claims.candidates),
        blocked=dict(claims.blocked),
        cluster_ids=set(info.column("cluster_id").to_pylist()),
        pins=evidence.pins,
        hashes=candidate_hashes([*built, *claims.candidates]),
    )


@dataclass
class StagedMining:
    """A partition's mining after its DuckDB reads and before its candidates' upsert: what
    ``write_mining`` upserts (``candidates``) and what it finishes with. Why apart: the
    process pool's one writer upserts a whole commit group's candidates in one call, and
    checks their twins against the store in one read (``stages/consolidate_pool.py``)."""

    mined: MinedPartition  # its ``result`` holds the counts so far
    stale: list[Candidate]
    candidates: list[Candidate] = field(default_factory=list)  # set by ``settle_twins``
    done_units: dict[str, dict[str, Any]] = field(default_factory=dict)

    def _settled(self) -> None:
        """The candidates to upsert and the counts, once the twins are settled."""
        mined = self.mined
        result, units, kept = mined.result, mined.units, mined.kept
        procedural = [c for unit in units.values() for c in unit.procedural]
        twins = [c for unit in units.values() for c in [*unit.twins, *unit.pitfalls]]
        self.candidates = [*procedural, *twins, *mined.claims, *self.stale]
        self.done_units = {key: unit.produced() for key, unit in units.items()}
        for done in [*self.done_units.values(), *kept.values()]:
            result.procedural += done["procedural"]
            result.passed += done["passed"]
            result.pitfalls += done["pitfalls"]
            result.insights += done["insights"]
        result.auto_rejected = result.procedural - result.passed
        result.preferences = len(mined.claims)
        result.stale = len(self.stale)


def stage_mining(
    stores: Stores,
    settings: Settings,
    partition: Partition,
    mined: MinedPartition,
    shared: SharedMineState | None = None,
) -> StagedMining:
    """``write_mining`` up to the upsert, but for the twins (``settle_twins``): stale pending
    candidates retired.

    What counts as produced includes every twin built, kept or not: one the store does not
    hold (or one not built, ``_mine_clusters``) is no pending candidate ``_stale`` could
    retire, so the stale ones are the same either way."""
    units, kept = mined.units, mined.kept
    produced = {c.candidate_id for unit in units.values() for c in unit.built()}
    produced.update(c.candidate_id for c in mined.claims)
    produced.update(cid for done in kept.values() for cid in done["ids"])
    pending = None
    if shared is not None:
        pending = shared.pending_ids.get((partition.tenant_id, partition.namespace), frozenset())
    stale = _stale(stores, partition, produced, mined.cluster_ids, settings.policy.version,
                   pending)  # fmt: skip
    return StagedMining(mined, stale)


def settle_twins(stores: Stores, staged: list[StagedMining]) -> None:
    """Twins kept in step with the store (``_keep_twins``) for several partitions' staged
    mining in one read; then each one's candidates and counts."""
    _keep_twins(stores, [item.mined.units for item in staged])
    for item in staged:
        item._settled()


def finish_mining(
    stores: Stores, ctx: RunContext, partition: Partition, staged: StagedMining,
    upserted: dict[str, int] | None, *, unit_saves: list[UnitSave] | None = None,
) -> MiningResult:  # fmt: skip
    """``write_mining`` after the upsert (``upserted``: its counts; None on a dry run): unit
    state saved (or added to ``unit_saves``, for the caller to save with other partitions'
    in the same transaction: ``mine_units.save_partitions_units``), blocked claims audited;
    the result."""
    mined = staged.mined
    result = mined.result
    if upserted is not None:
        result.upserted = upserted
        done_units = staged.done_units
        fingerprints = {key: (mined.fingerprints[key], done_units[key]) for key in done_units}
        save = UnitSave(partition.tenant_id, partition.namespace, fingerprints, set(mined.kept))
        if unit_saves is not None:
            unit_saves.append(save)
        else:
            save_partitions_units(stores.meta, [save], run_id=ctx.run_id, now=ctx.now)
        result.blocked_claims = _count_blocked(stores, ctx, partition, mined.blocked)
    logger.info(
        "mine %s run=%s episodes=%d clusters=%d procedural=%d passed=%d preferences=%d "
        "blocked_claims=%d upserted=%s",
        partition.key,
        ctx.run_id,
        result.episodes,
        result.clusters,
        result.procedural,
        result.passed,
        result.preferences,
        result.blocked_claims,
        result.upserted,
    )
    return result


def write_mining(
    stores: Stores, settings: Settings, ctx: RunContext, partition: Partition,
    mined: MinedPartition, shared: SharedMineState | None = None,
) -> MiningResult:  # fmt: skip
    """Store what ``compute_mining`` found (DuckDB reads and writes): twins kept in step with
    the store, stale pending candidates retired, candidates upserted, unit state saved,
    blocked claims audited; the result."""
    staged = stage_mining(stores, settings, partition, mined, shared)
    settle_twins(stores, [staged])
    upserted = None
    if not ctx.dry_run:
        upserted = upsert_candidates(
            stores.meta, staged.candidates, run_id=ctx.run_id, now=ctx.now, pins=mined.pins,
            hashes=mined.hashes,
        )  # fmt: skip
        crash_point("mine.upserted")
    return finish_mining(stores, ctx, partition, staged, upserted)


def mine_partition(
    stores: Stores,
    settings: Settings,
    ctx: RunContext,
    partition: Partition,
    *,
    clustering: tuple[pa.Table, pa.Table] | None = None,
    shared: SharedMineState | None = None,
) -> MiningResult:
    """Mine one partition's changed units and its claims into candidates; idempotent per input.

    Units whose input fingerprint is the one stored when they were last mined are carried
    forward (``units.py``): their candidates stay as stored and count as produced, so the
    result (and what is stored) is the same as mining every unit again. ``clustering``: the
    partition's (clusters, members) as stored now, when the caller just clustered it
    (``ClusterResult.clustering``); otherwise they are read. The same three steps the
    process pool runs apart (``stages/consolidate_pool.py``): read, compute, write."""
    clustering = clustering or cluster_store.load_partition(
        stores.meta, partition.tenant_id, partition.namespace, centroids=False
    )
    state = read_mine_state(stores, partition, shared)
    mined = compute_mining(stores.lance, settings, partition, state, clustering)
    return write_mining(stores, settings, ctx, partition, mined, shared)
