"""Procedural episodes: tickets that meet one problem under different root causes, and traps.

For each problem and each of its root causes the agent sometimes applies the right fix
(success) and sometimes the fix of another cause (failure). Every failed ticket may be
followed, in the same session, by the right fix. So each cause's fix pattern ends up with
support from several subjects *and* counterexamples whose conditions differ from the
supporting ones only in the cause flags: the flag is the separating precondition. Noise
conditions are drawn independently and then checked, so none of them separates by chance.

Traps (see :func:`generate_traps`) look like procedures but must not become candidates.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

from memory_core.demo._builder import Builder, Episode, Truth
from memory_core.demo.scenario import Cause, Problem

__all__ = ["SEED_SCENARIO", "generate_problem", "generate_traps"]

# (tenant, problem, pattern's cause, actual cause): must give >= 3 counterexamples.
SEED_SCENARIO = ("acme-it", "vpn_720", "adapter_mismatch", "cert_expired")

TRAP_KINDS = ("single_success", "coin_flip", "coin_flip", "two_successes", "one_subject")

_AGENT = {"it-support": "IT agent", "coding": "Coding agent"}
_SUCCESS_FEEDBACK = (
    "User confirmed it works now.",
    "Works, thanks!",
    "Confirmed fixed.",
    "All good on my side.",
    None,
)
_FAILURE_FEEDBACK = (
    "Still broken.",
    "No change, same error.",
    "That did not help.",
    None,
)
_OPEN_FEEDBACK = ("Waiting for the specialist team.", "Will check again tomorrow.", None)


def _steps_text(steps: tuple[str, ...]) -> str:
    return ", then ".join(steps)


def _attempt(
    b: Builder,
    truth: Truth,
    tenant_id: str,
    problem: Problem,
    cause: Cause,
    steps: tuple[str, ...],
    outcome: str,
    subject: str,
    *,
    when: datetime | None = None,
    session: str | None = None,
    noise: dict[str, str] | None = None,
) -> Episode:
    """One agent episode: ``steps`` applied to ``problem`` when ``cause`` is the root cause."""
    rng = b.rng
    goal = rng.choice(problem.goals)
    conditions = {"error_code": problem.error_code}
    conditions.update({c.key: "true" if c.key == cause.key else "false" for c in problem.causes})
    conditions.update(noise if noise is not None else b.noise(problem.namespace))
    observations = [cause.finding] if rng.random() < 0.7 else []
    agent = _AGENT[problem.namespace]
    done = _steps_text(steps)
    if outcome == "success":
        observations.append(problem.resolved_note)
        feedback = rng.choice(_SUCCESS_FEEDBACK)
        text = rng.choice(
            (
                f"{agent} resolved '{goal}' for {subject}: {done}.",
                f"Ticket for {subject} closed. Problem: {goal}. Fix: {done}.",
                f"Fixed {goal.lower()} for {subject} by doing: {done}.",
            )
        )
    elif outcome == "failure":
        observations.append(problem.failure_note)
        feedback = rng.choice(_FAILURE_FEEDBACK)
        text = rng.choice(
            (
                f"{agent} tried {done} for {subject} ({goal}); it did not help.",
                f"Attempted fix for '{goal}' failed for {subject}: {done}.",
            )
        )
    else:
        feedback = rng.choice(_OPEN_FEEDBACK)
        text = f"Could not resolve '{goal}' for {subject} yet: {done}. Handed over."
    sources = []
    if rng.random() < 0.15:
        sources.append({"source_id": f"kb/{problem.key}", "revision": rng.choice(("r2", "r3"))})
    episode = b.episode(
        tenant_id=tenant_id,
        subject_id=subject,
        namespace=problem.namespace,
        occurred_at=when if when is not None else b.moment(),
        source_role="agent",
        session_id=session or b.new_id("s"),
        goal=goal,
        actions=steps,
        outcome=outcome,
        conditions=conditions,
        observations=observations,
        feedback=feedback,
        text=text,
        sources=sources,
    )
    truth.intent_of_episode[episode["episode_id"]] = problem.key
    return episode


def _people(b: Builder, subjects: tuple[str, ...], count: int) -> list[str]:
    """``count`` subjects, the first three distinct, so support spans several people."""
    first = b.rng.sample(subjects, min(3, len(subjects), count))
    return first + [b.rng.choice(subjects) for _ in range(count - len(first))]


def _unseparate(
    b: Builder,
    problem: Problem,
    support: list[Episode],
    counter: list[Episode],
) -> bool:
    """Make sure no noise key splits ``support`` from ``counter``; True when it changed data.

    A noise key separates when the values seen in successes and in failures are disjoint.
    The fix copies a success value onto a failure (and gives successes a second value when
    they all share one), preferring single-episode sessions and keeping session mates equal.
    """
    changed = False
    pool = b.noise_pools[problem.namespace]
    sessions = Counter(ep["session_id"] for ep in b.episodes)
    for key, values in pool.items():
        seen_ok = {ep["conditions"][key] for ep in support}
        seen_bad = {ep["conditions"][key] for ep in counter}
        if not counter or not support:
            continue
        if len(seen_ok) == 1 and len(support) >= 3:
            other = b.rng.choice([v for v in values if v not in seen_ok])
            _set_noise(b, _pick(b, support, sessions), key, other)
            changed = True
        elif not seen_ok & seen_bad:
            _set_noise(b, _pick(b, counter, sessions), key, b.rng.choice(sorted(seen_ok)))
            changed = True
    return changed


def _pick(b: Builder, episodes: list[Episode], sessions: Counter[str]) -> Episode:
    alone = [ep for ep in episodes if sessions[ep["session_id"]] == 1]
    return b.rng.choice(alone or episodes)


def _set_noise(b: Builder, episode: Episode, key: str, value: str) -> None:
    for mate in b.episodes:
        if mate["session_id"] == episode["session_id"] and key in mate["conditions"]:
            mate["conditions"][key] = value


def generate_problem(
    b: Builder,
    truth: Truth,
    tenant_id: str,
    subjects: tuple[str, ...],
    problem: Problem,
    scale: int,
) -> None:
    """All tickets of one problem in one tenant, and one truth procedure per root cause."""
    rng = b.rng
    support: dict[str, list[Episode]] = {c.key: [] for c in problem.causes}
    counter: dict[str, list[Episode]] = {c.key: [] for c in problem.causes}
    for cause in problem.causes:
        for who in _people(b, subjects, rng.randint(10, 15) * scale):
            support[cause.key].append(
                _attempt(b, truth, tenant_id, problem, cause, cause.steps, "success", who)
            )
    for pattern in problem.causes:
        for actual in problem.causes:
            if actual is pattern:
                continue
            count = rng.randint(3, 5) * scale
            if (tenant_id, problem.key, pattern.key, actual.key) == SEED_SCENARIO:
                count = max(count, 4)
            for _ in range(count):
                who, when, session = rng.choice(subjects), b.moment(), b.new_id("s")
                noise = b.noise(problem.namespace)
                failed = _attempt(
                    b, truth, tenant_id, problem, actual, pattern.steps, "failure", who,
                    when=when, session=session, noise=noise,
                )  # fmt: skip
                counter[pattern.key].append(failed)
                if rng.random() < 0.7:  # the agent finds the real cause in the same session
                    later = when + timedelta(minutes=rng.randint(5, 45))
                    fixed = _attempt(
                        b, truth, tenant_id, problem, actual, actual.steps, "success", who,
                        when=later, session=session, noise=dict(noise),
                    )  # fmt: skip
                    support[actual.key].append(fixed)
    for _ in range(rng.randint(2, 4) * scale):  # unresolved tickets handed over
        cause = rng.choice(problem.causes)
        outcome = rng.choice(("unknown", "partial"))
        _attempt(
            b, truth, tenant_id, problem, cause, problem.escalation, outcome, rng.choice(subjects)
        )
    for _ in range(20):
        if not any(_unseparate(b, problem, support[k], counter[k]) for k in support):
            break
    for cause in problem.causes:
        others = [c for c in problem.causes if c is not cause]
        equivalent = [{others[0].key: "false"}] if len(others) == 1 else []
        truth.procedures.append(
            {
                "tenant_id": tenant_id,
                "namespace": problem.namespace,
                "problem_key": problem.key,
                "name": f"{problem.key}:{cause.key}",
                "goal": problem.goals[0],
                "goal_variants": list(problem.goals),
                "steps": list(cause.steps),
                "preconditions": {cause.key: "true"},
                "equivalent_preconditions": equivalent,
                "context": {"error_code": problem.error_code},
                "support_ids": [ep["episode_id"] for ep in support[cause.key]],
                "counterexample_ids": [ep["episode_id"] for ep in counter[cause.key]],
                "support_subjects": sorted({ep["subject_id"] for ep in support[cause.key]}),
            }
        )


def generate_traps(
    b: Builder,
    truth: Truth,
    tenant_id: str,
    subjects: tuple[str, ...],
    problems: list[Problem],
    scale: int,
) -> None:
    """Patterns that look like procedures but are not (one of each kind, coin flips twice).

    - ``single_success``: one success (and maybe one failure): one success is not a rule.
    - ``coin_flip``: pairs of episodes with identical conditions, one success and one
      failure each, so the pattern works half the time and no condition explains when.
    - ``two_successes``: two successes from two subjects plus a failure: too little support.
    - ``one_subject``: 3-4 separable successes, all from the same subject: not a tenant rule.
    """
    rng = b.rng
    options = [(p, d) for p in problems for d in p.distractors]
    rng.shuffle(options)
    used: list[tuple[Problem, tuple[str, ...]]] = []
    for problem, steps in options:  # spread kinds over problems before reusing one
        if len(used) < len(problems) and any(p is problem for p, _ in used):
            continue
        used.append((problem, steps))
    used += [o for o in options if o not in used]
    for kind, (problem, steps) in zip(TRAP_KINDS, used, strict=False):
        made = _trap(b, truth, tenant_id, subjects, problem, steps, kind, scale)
        truth.traps.append(
            {
                "tenant_id": tenant_id,
                "namespace": problem.namespace,
                "problem_key": problem.key,
                "steps": list(steps),
                "kind": kind,
                "episode_ids": [ep["episode_id"] for ep in made],
                "success_count": sum(ep["outcome"] == "success" for ep in made),
                "subject_ids": sorted({ep["subject_id"] for ep in made}),
            }
        )


def _trap(
    b: Builder,
    truth: Truth,
    tenant_id: str,
    subjects: tuple[str, ...],
    problem: Problem,
    steps: tuple[str, ...],
    kind: str,
    scale: int,
) -> list[Episode]:
    rng = b.rng
    cause = rng.choice(problem.causes)
    other = rng.choice([c for c in problem.causes if c is not cause])

    def attempt(c: Cause, outcome: str, who: str, noise: dict[str, str] | None = None) -> Episode:
        return _attempt(b, truth, tenant_id, problem, c, steps, outcome, who, noise=noise)

    made: list[Episode] = []
    if kind == "single_success":
        made.append(attempt(cause, "success", rng.choice(subjects)))
        if rng.random() < 0.5:
            made.append(attempt(other, "failure", rng.choice(subjects)))
    elif kind == "coin_flip":
        for i in range(rng.randint(4, 6) * scale):
            c = problem.causes[i % len(problem.causes)]
            noise = b.noise(problem.namespace)
            first, second = rng.sample(subjects, 2)
            made.append(attempt(c, "success", first, dict(noise)))
            made.append(attempt(c, "failure", second, dict(noise)))
    elif kind == "two_successes":
        for who in rng.sample(subjects, 2):
            made.append(attempt(cause, "success", who))
        made.append(attempt(other, "failure", rng.choice(subjects)))
    elif kind == "one_subject":
        only = rng.choice(subjects)
        for _ in range(rng.randint(3, 4)):
            made.append(attempt(cause, "success", only))
        for who in rng.sample([s for s in subjects if s != only], rng.randint(1, 2)):
            made.append(attempt(other, "failure", who))
    else:  # pragma: no cover - TRAP_KINDS is closed
        msg = f"unknown trap kind {kind}"
        raise ValueError(msg)
    return made
