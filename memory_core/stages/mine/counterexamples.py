"""Counterexample mining over ONE cluster: pure logic, no I/O (invariant 4).

What counts
-----------
An *action pattern* is the exact, ordered tuple of an episode's actions (order matters: the
demo's fixes share steps and differ only in the whole sequence). For a pattern:

* successes are its episodes with outcome ``success``;
* counterexamples are its episodes with outcome ``failure`` (same actions, failed);
* ``partial`` and ``unknown`` are neither: they say nothing about whether the actions work
  (a hand-over, an open ticket), so they never support and never contradict.

Only patterns with at least :data:`MIN_PATTERN_SUCCESSES` distinct successes are proposed:
one success is an anecdote, not a pattern, so it yields no candidate at all.

Condition separation
--------------------
Conditions are ``key=value`` pairs compared as strings; a pair *holds* for an episode only when
the episode records that key with that value (an unrecorded key does not satisfy a
precondition). We search sets of 1..``max_condition_keys`` pairs that hold for ALL successes
(the default; ``min_success_coverage`` can relax it) and for NO counterexample. Only pairs that
exclude at least one counterexample are tried, so a pair that holds everywhere in the cluster
(``error_code=720``) can never be part of a separator. Preference: a perfect separator before
an imperfect one (among imperfect ones, the one leaving fewer counterexamples); then fewer
pairs; then fewer successes excluded; then the more specific set (fewer cluster episodes
satisfy it: ``adapter_mismatch=true`` beats ``cert_expired=false`` when a third root cause
also has ``cert_expired=false``); then lexicographic order, for determinism. Without a
perfect separator the best one is reported with its separation score (fraction of
counterexamples it excludes); the rest stay unexplained and the policy rejects the candidate.

With no counterexamples there is nothing to separate and no evidence about which conditions
matter, so the preconditions are the whole observed envelope: every pair shared by all
successes, except the cluster's key ``error_code`` (context by construction of the cluster).
That is deliberately narrow: a too-narrow procedure is merely retrieved less often, a
too-broad one ("error 720 -> reset", whatever the cause) is applied where it fails.

``context`` lists the pairs every episode of the cluster shares (e.g. ``error_code=720``); the
candidate's ``conditions`` are context plus preconditions.

Statistics and policy
---------------------
Support = successes under the preconditions (distinct episodes, subjects, sessions; an episode
without a session counts as its own session). Success rate and the Wilson lower bound use
successes / (successes + failures) under the preconditions. The policy (``PolicyConfig``):
``min_support`` distinct supporting episodes, ``min_subjects_tenant_scope`` subjects (mined
procedures are always tenant scope), Wilson lower bound (z = ``wilson_z``) >=
``min_wilson_lower`` (3 of 3: 0.53 passes; 3 of 4: 0.36 does not), and no unexplained
counterexample. Each failed test is named in the reason, so a reviewer sees why.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import polars as pl

from memory_core.config import PolicyConfig, StepsConfig
from memory_core.step_abstract import pattern_of

__all__ = [
    "CONTEXT_KEYS",
    "MIN_PATTERN_SUCCESSES",
    "EpisodeGroup",
    "MiningEpisode",
    "PatternFinding",
    "Pitfall",
    "Separation",
    "condition_values",
    "find_separator",
    "group_episodes",
    "mine_cluster",
    "mine_episodes",
    "mine_groups",
    "policy_failures",
    "separate",
    "wilson_lower_bound",
    "wilson_upper_bound",
]

MIN_PATTERN_SUCCESSES = 2
CONTEXT_KEYS = frozenset({"error_code"})
_MAX_ITEMS = 40
_MAX_SUBSETS = 50_000

Pair = tuple[str, str]


def _wilson(successes: int, trials: int, z: float) -> tuple[float, float]:
    p = successes / trials
    z2 = z * z
    centre = p + z2 / (2 * trials)
    margin = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials))
    scale = 1 + z2 / trials
    return (centre - margin) / scale, (centre + margin) / scale


def wilson_lower_bound(successes: int, trials: int, z: float) -> float:
    """Lower end of the Wilson score interval of successes/trials (0 when nothing was tried)."""
    if trials <= 0:
        return 0.0
    return max(0.0, _wilson(successes, trials, z)[0])


def wilson_upper_bound(successes: int, trials: int, z: float) -> float:
    """Upper end of the interval: how good the success rate could still be (1 if untried)."""
    if trials <= 0:
        return 1.0
    return min(1.0, _wilson(successes, trials, z)[1])


@dataclass(frozen=True)
class Separation:
    """The best condition set found and how well it separates successes from failures."""

    conditions: dict[str, str]
    counterexamples: int
    excluded: int
    successes_excluded: int = 0

    @property
    def score(self) -> float:
        """Fraction of counterexamples the conditions exclude (1.0 when there are none)."""
        return 1.0 if self.counterexamples == 0 else self.excluded / self.counterexamples

    @property
    def perfect(self) -> bool:
        return self.excluded == self.counterexamples


def _holds(conditions: Mapping[str, str], pairs: Iterable[Pair]) -> bool:
    return all(conditions.get(k) == v for k, v in pairs)


def _weighted(rows: Sequence[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], int]]:
    """Each conditions object once with how many rows hold it (episodes of one problem share
    one parsed dict: ``stages/mine/stage._groups``), so pairs are counted per distinct object."""
    times: dict[int, int] = {}
    first: dict[int, Mapping[str, Any]] = {}
    for row in rows:
        key = id(row)
        if key in times:
            times[key] += 1
        else:
            times[key], first[key] = 1, row
    return [(first[key], n) for key, n in times.items()]


def _runs(entries: Sequence[tuple[Mapping[str, Any], int]]) -> list[int]:
    """Each entry's run of bits: ``times`` consecutive bits, entries one after another.

    Why runs: an entry stands for ``times`` episodes sharing one conditions object, and every
    count the search takes is a popcount, which does not care where an episode's bit sits. So
    a mask is built per distinct object (a handful per cluster), not per episode."""
    runs, offset = [], 0
    for _, times in entries:
        runs.append(((1 << times) - 1) << offset)
        offset += times
    return runs


def _mask(entries: Sequence[tuple[Mapping[str, Any], int]], runs: Sequence[int], pair: Pair) -> int:
    """The bits of the episodes for which ``pair`` holds (values compared as strings)."""
    key, value = pair
    bits = 0
    for (row, _), run in zip(entries, runs, strict=True):
        got = row.get(key)
        if got is not None and str(got) == value:
            bits |= run
    return bits


def find_separator(
    successes: Sequence[Mapping[str, Any]],
    counterexamples: Sequence[Mapping[str, Any]],
    *,
    max_keys: int,
    ignore: Iterable[str] = (),
    population: Sequence[Mapping[str, Any]] | None = None,
    min_success_coverage: float = 1.0,
) -> Separation:
    """The smallest condition set holding for the successes and for no counterexample.

    Bitmasks over the episodes make each candidate set a handful of integer ANDs. Ties on
    (perfect, counterexamples left, size, successes excluded) are broken by specificity,
    computed over ``population`` (the cluster) only for the tied sets, then lexicographically.
    """
    return separate(
        _weighted(successes),
        _weighted(counterexamples),
        max_keys=max_keys,
        ignore=ignore,
        population=None if population is None else _weighted(population),
        min_success_coverage=min_success_coverage,
    )


Weighted = Sequence[tuple[Mapping[str, Any], int]]


def separate(
    successes: Weighted,
    counterexamples: Weighted,
    *,
    max_keys: int,
    ignore: Iterable[str] = (),
    population: Weighted | None = None,
    min_success_coverage: float = 1.0,
) -> Separation:
    """``find_separator`` over (conditions, how many episodes hold them) entries: the same
    answer as over the episodes one by one (``mine_groups`` passes its groups' counts)."""
    m = sum(times for _, times in counterexamples)
    n_s = sum(times for _, times in successes)
    if n_s == 0 or m == 0:
        return Separation({}, m, m)
    ignored = set(ignore)
    need = max(1, math.ceil(min_success_coverage * n_s - 1e-9))
    counts: Counter[Pair] = Counter()
    for row, times in successes:
        for k, v in row.items():
            if k not in ignored and v is not None:
                counts[(k, str(v))] += times
    s_runs, c_runs = _runs(successes), _runs(counterexamples)
    full_c, full_s = (1 << m) - 1, (1 << n_s) - 1
    items = []
    for pair in sorted(p for p, c in counts.items() if c >= need):
        c_mask = _mask(counterexamples, c_runs, pair)
        if c_mask != full_c:  # excludes at least one counterexample
            items.append((pair, _mask(successes, s_runs, pair), c_mask))
    items.sort(key=lambda it: (it[2].bit_count(), it[0]))  # most exclusive first
    items = items[:_MAX_ITEMS]
    best: tuple[int, ...] | None = None
    tied: list[tuple[Pair, ...]] = []
    for size in range(1, max_keys + 1):
        pool = items
        while len(pool) > size and math.comb(len(pool), size) > _MAX_SUBSETS:
            pool = pool[:-1]
        for combo in itertools.combinations(pool, size):
            s_bits, c_bits = full_s, full_c
            for _, s_mask, c_mask in combo:
                s_bits &= s_mask
                c_bits &= c_mask
            covered = s_bits.bit_count()
            if covered < need or len({pair[0] for pair, _, _ in combo}) < size:
                continue  # too few successes, or two values of one key
            left = c_bits.bit_count()
            rank = (int(left > 0), left, size, n_s - covered)
            pairs = tuple(sorted(pair for pair, _, _ in combo))
            if best is None or rank < best:
                best, tied = rank, [pairs]
            elif rank == best:
                tied.append(pairs)
        if best is not None and best[0] == 0:
            break  # a perfect separator of this size: larger ones are never preferred
    if best is None:
        return Separation({}, m, 0)
    pop = list(population) if population is not None else [*successes, *counterexamples]
    p_runs = _runs(pop)
    masks: dict[Pair, int] = {}

    def specificity(pairs: tuple[Pair, ...]) -> int:
        bits = -1
        for pair in pairs:
            if pair not in masks:
                masks[pair] = _mask(pop, p_runs, pair)
            bits &= masks[pair]
        return bits.bit_count()

    chosen = min(tied, key=lambda pairs: (specificity(pairs), pairs))
    _, left, _, s_excluded = best
    return Separation(dict(chosen), m, m - left, s_excluded)


def policy_failures(
    *,
    support_episodes: int,
    support_subjects: int,
    wilson_lower: float,
    unexplained: int,
    policy: PolicyConfig,
    tenant_scope: bool = True,
) -> list[str]:
    """Names of the failed policy tests, each with the numbers that failed it."""
    failed = []
    if support_episodes < policy.min_support:
        failed.append(
            f"min_support: {support_episodes} distinct supporting episodes < {policy.min_support}"
        )
    if tenant_scope and support_subjects < policy.min_subjects_tenant_scope:
        noun = "subject" if support_subjects == 1 else "subjects"
        failed.append(
            f"min_subjects: {support_subjects} {noun} < "
            f"{policy.min_subjects_tenant_scope} at tenant scope"
        )
    if wilson_lower < policy.min_wilson_lower:
        failed.append(f"wilson_lower: {wilson_lower:.2f} < {policy.min_wilson_lower:.2f}")
    if unexplained:
        failed.append(f"unexplained_counterexamples: {unexplained}")
    return failed


@dataclass(frozen=True)
class Pitfall:
    """Failures of a pattern explained by conditions: when the same steps do not work.

    ``conditions`` hold for every failure in ``failure_ids`` and for no success of the
    pattern; at least two failures are needed (one failure is an anecdote).
    """

    conditions: dict[str, str]
    failure_ids: tuple[str, ...]
    subjects: tuple[str, ...]
    successes_under_conditions: int = 0


@dataclass(frozen=True)
class PatternFinding:
    """What mining found for one action pattern of one cluster."""

    steps: tuple[str, ...]
    success_ids: tuple[str, ...]
    counterexample_ids: tuple[str, ...]
    neither_ids: tuple[str, ...]
    preconditions: dict[str, str]
    context: dict[str, str]
    separation: Separation
    support_ids: tuple[str, ...]
    unexplained_ids: tuple[str, ...]
    support_subjects: tuple[str, ...]
    support_sessions: int
    wilson_lower: float
    failed_tests: tuple[str, ...] = field(default_factory=tuple)
    pitfall: Pitfall | None = None

    @property
    def passed(self) -> bool:
        return not self.failed_tests

    @property
    def success_rate(self) -> float:
        trials = len(self.support_ids) + len(self.unexplained_ids)
        return len(self.support_ids) / trials if trials else 0.0

    @property
    def conditions(self) -> dict[str, str]:
        return {**self.context, **self.preconditions}

    @property
    def reason(self) -> str:
        if self.failed_tests:
            return "; ".join(self.failed_tests)
        explained = len(self.counterexample_ids)
        why = format_conditions(self.preconditions) or "no conditions"
        return (
            f"passed: {len(self.support_ids)} supporting episodes from "
            f"{len(self.support_subjects)} subjects, wilson_lower {self.wilson_lower:.2f}, "
            f"{explained} counterexamples explained by {why}"
        )

    def stats(self) -> dict[str, Any]:
        return {
            "support_episodes": len(self.support_ids),
            "support_subjects": len(self.support_subjects),
            "support_sessions": self.support_sessions,
            "counterexamples": len(self.counterexample_ids),
            "unexplained_counterexamples": len(self.unexplained_ids),
            "pattern_successes": len(self.success_ids),
            "neither": len(self.neither_ids),
            "wilson_lower": round(self.wilson_lower, 4),
            "success_rate": round(self.success_rate, 4),
            "separation": round(self.separation.score, 4),
            "failed_tests": list(self.failed_tests),
        }


def format_conditions(conditions: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(conditions.items()))


class MiningEpisode(NamedTuple):
    """One episode as mining reads it (a named tuple: built for every row of every cluster).

    ``conditions`` may be shared between episodes: mining only reads it.
    """

    episode_id: str
    subject_id: str | None
    session_id: str | None
    steps: tuple[str, ...]
    outcome: str
    conditions: dict[str, str]
    has_actions: bool = True


def condition_values(value: Any) -> dict[str, str]:
    """An episode's conditions (a dict, its JSON text or nothing) as string pairs."""
    if isinstance(value, str):
        value = json.loads(value) if value else None
    if value is None:
        return {}
    return {str(k): str(v) for k, v in dict(value).items() if v is not None}


def _episodes(
    episodes: Iterable[Mapping[str, Any]] | pl.DataFrame,
    steps: StepsConfig,
    namespace: str | None,
) -> list[MiningEpisode]:
    rows = episodes.to_dicts() if isinstance(episodes, pl.DataFrame) else episodes
    out: dict[str, MiningEpisode] = {}
    patterns: dict[tuple[str, ...], tuple[str, ...]] = {}  # episodes repeat action lists
    for row in rows:
        eid = row["episode_id"]
        actions = tuple(row.get("actions") or ())
        if actions not in patterns:
            patterns[actions] = pattern_of(actions, steps, namespace)
        out.setdefault(
            eid,
            MiningEpisode(
                eid,
                row.get("subject_id"),
                row.get("session_id"),
                patterns[actions],
                str(row.get("outcome") or "unknown"),
                condition_values(row.get("conditions")),
                bool(actions),
            ),
        )
    return sorted(out.values(), key=lambda e: e.episode_id)


class EpisodeGroup(NamedTuple):
    """Episodes of one cluster (or mining unit) that mining cannot tell apart: the same steps,
    outcome and conditions object. ``ids`` in id order, ``subjects``/``sessions`` aligned.

    Why groups: every decision mining makes (patterns, separators, splits, the policy's counts)
    is the same for all episodes of a group, so it is made once per group; only the id,
    subject and session lists grow with the episodes (``mine_groups``)."""

    steps: tuple[str, ...]
    outcome: str
    conditions: dict[str, str]
    has_actions: bool
    ids: Sequence[str]
    subjects: Sequence[str | None]
    sessions: Sequence[str | None]


def group_episodes(eps: Sequence[MiningEpisode]) -> list[EpisodeGroup]:
    """``eps`` (sorted by id) as groups; conditions objects are told apart by identity, so
    episodes group together only when they share one (the stage's ``_groups`` shares one per
    distinct conditions text)."""
    found: dict[tuple[Any, ...], tuple[list[str], list[str | None], list[str | None]]] = {}
    first: dict[tuple[Any, ...], MiningEpisode] = {}
    for e in eps:
        key = (e.steps, e.outcome, id(e.conditions), e.has_actions)
        lists = found.get(key)
        if lists is None:
            lists = found[key] = ([], [], [])
            first[key] = e
        lists[0].append(e.episode_id)
        lists[1].append(e.subject_id)
        lists[2].append(e.session_id)
    return [
        EpisodeGroup(first[k].steps, first[k].outcome, first[k].conditions, first[k].has_actions,
                     ids, subjects, sessions)
        for k, (ids, subjects, sessions) in found.items()
    ]  # fmt: skip


def _entries(groups: Sequence[EpisodeGroup]) -> list[tuple[Mapping[str, Any], int]]:
    return [(g.conditions, len(g.ids)) for g in groups]


def _ids(groups: Sequence[EpisodeGroup]) -> tuple[str, ...]:
    """The groups' episode ids in id order (each group's are already)."""
    if len(groups) == 1:
        return tuple(groups[0].ids)
    return tuple(sorted(itertools.chain.from_iterable(g.ids for g in groups)))


def _pitfall(
    wins: Sequence[EpisodeGroup],
    explained: Sequence[EpisodeGroup],
    policy: PolicyConfig,
    ignore: set[str],
    population: Sequence[tuple[Mapping[str, Any], int]],
) -> Pitfall | None:
    """Conditions shared by the explained failures and by no success: a failure lesson.

    The same separator search, roles swapped: the failures must all satisfy the conditions
    and no success may. Fewer than two explained failures teach nothing (no pitfall).
    """
    if sum(len(g.ids) for g in explained) < MIN_PATTERN_SUCCESSES or not wins:
        return None
    found = separate(
        _entries(explained),
        _entries(wins),
        max_keys=policy.max_condition_keys,
        ignore=ignore | CONTEXT_KEYS,
        population=population,
    )
    if not found.conditions or not found.perfect:
        return None
    subjects = tuple(sorted({s or "" for g in explained for s in g.subjects}))
    return Pitfall(dict(sorted(found.conditions.items())), _ids(explained), subjects)


def _shared(rows: Sequence[Mapping[str, str]], ignore: set[str]) -> dict[str, str]:
    rows = [row for row, _ in _weighted(rows)]  # an intersection: repeats change nothing
    if not rows:
        return {}
    shared = {k: v for k, v in rows[0].items() if k not in ignore}
    for row in rows[1:]:
        shared = {k: v for k, v in shared.items() if row.get(k) == v}
    return dict(sorted(shared.items()))


def _split(
    groups: Sequence[EpisodeGroup], pre: Mapping[str, str]
) -> tuple[list[EpisodeGroup], list[EpisodeGroup]]:
    """(groups for which every pair of ``pre`` holds, the others), order kept."""
    pairs = list(pre.items())
    if not pairs:
        return list(groups), []
    yes: list[EpisodeGroup] = []
    no: list[EpisodeGroup] = []
    for g in groups:
        (yes if _holds(g.conditions, pairs) else no).append(g)
    return yes, no


def _sessions(groups: Sequence[EpisodeGroup]) -> int:
    return len(
        {s or f"episode:{e}" for g in groups for e, s in zip(g.ids, g.sessions, strict=True)}
    )


def mine_cluster(
    episodes: Iterable[Mapping[str, Any]] | pl.DataFrame,
    policy: PolicyConfig,
    *,
    min_success_coverage: float = 1.0,
    steps: StepsConfig | None = None,
    namespace: str | None = None,
) -> list[PatternFinding]:
    """Findings for every action pattern with >= MIN_PATTERN_SUCCESSES successes, by steps.

    ``episodes`` are the cluster's episodes (dicts or a polars frame) with ``episode_id``,
    ``subject_id``, ``session_id``, ``actions``, ``outcome`` and ``conditions`` (dict or JSON).
    The pattern is the episode's world-changing abstract steps (``step_abstract.pattern_of``;
    free-text actions are all world-changing, so v1 patterns are the whole action list); an
    episode whose steps are all lookups has the empty pattern, one without actions none.
    """
    eps = _episodes(episodes, steps if steps is not None else StepsConfig(), namespace)
    return mine_episodes(eps, policy, min_success_coverage=min_success_coverage)


def mine_episodes(
    eps: Sequence[MiningEpisode], policy: PolicyConfig, *, min_success_coverage: float = 1.0
) -> list[PatternFinding]:
    """``mine_cluster`` over episodes already built (unique ids, sorted by id)."""
    return mine_groups(group_episodes(eps), policy, min_success_coverage=min_success_coverage)


def mine_groups(
    groups: Sequence[EpisodeGroup], policy: PolicyConfig, *, min_success_coverage: float = 1.0
) -> list[PatternFinding]:
    """``mine_episodes`` over the episodes' groups (``EpisodeGroup``): the same findings, each
    decision made once per group instead of once per episode."""
    ignore = set(policy.ignore_condition_keys)
    population = _entries(groups)
    context = _shared([g.conditions for g in groups], ignore)
    patterns: dict[tuple[str, ...], list[EpisodeGroup]] = {}
    for g in groups:
        if g.has_actions:
            patterns.setdefault(g.steps, []).append(g)
    findings = []
    for steps in sorted(patterns):
        group = patterns[steps]
        wins = [g for g in group if g.outcome == "success"]
        if sum(len(g.ids) for g in wins) < MIN_PATTERN_SUCCESSES:
            continue
        fails = [g for g in group if g.outcome == "failure"]
        neither = [g for g in group if g.outcome not in ("success", "failure")]
        separation = separate(
            _entries(wins),
            _entries(fails),
            max_keys=policy.max_condition_keys,
            ignore=ignore,
            population=population,
            min_success_coverage=min_success_coverage,
        )
        if fails:
            pre = separation.conditions
        else:
            pre = _shared([g.conditions for g in wins], ignore | CONTEXT_KEYS)
        support, _ = _split(wins, pre)
        unexplained, explained = _split(fails, pre)
        pitfall = _pitfall(wins, explained, policy, ignore, population)
        subjects = tuple(sorted({s or "" for g in support for s in g.subjects}))
        support_ids, unexplained_ids = _ids(support), _ids(unexplained)
        wilson = wilson_lower_bound(
            len(support_ids), len(support_ids) + len(unexplained_ids), policy.wilson_z
        )
        failed = policy_failures(
            support_episodes=len(support_ids),
            support_subjects=len(subjects),
            wilson_lower=wilson,
            unexplained=len(unexplained_ids),
            policy=policy,
        )
        findings.append(
            PatternFinding(
                steps=steps,
                success_ids=_ids(wins),
                counterexample_ids=_ids(fails),
                neither_ids=_ids(neither),
                preconditions=dict(sorted(pre.items())),
                context={k: v for k, v in context.items() if k not in pre},
                separation=separation,
                support_ids=support_ids,
                unexplained_ids=unexplained_ids,
                support_subjects=subjects,
                support_sessions=_sessions(support),
                wilson_lower=wilson,
                failed_tests=tuple(failed),
                pitfall=pitfall,
            )
        )
    return findings
