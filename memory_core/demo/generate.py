"""Seeded, deterministic demo data: multi-tenant episodes plus the ground truth behind them.

Why the data is shaped this way
-------------------------------
The pipeline's hard parts are judgement calls, so the data set is built to have known
answers to each of them:

* Procedures. Three tenants (``acme-it``: IT support, ``globex-dev``: coding, ``initech``:
  both namespaces) meet recurring problems. Each problem has one error code and 2-3 root
  causes; each cause has a fix (an ordered action pattern). The agent often applies the
  right fix (success) and sometimes another cause's fix (failure), and a failed ticket is
  often fixed later in the same session. So every true procedure has support from several
  subjects and counterexamples, and the only condition that separates them is the cause
  flag (``adapter_mismatch=true``), never the error code (shared) and never a noise key
  (``os``, ``tool_version``, ``region``...: drawn at random, then checked not to separate).
  The seed scenario: in ``acme-it``, "VPN fails with error 720" fixed by
  ``["reset network adapter", "reconnect vpn"]`` when ``adapter_mismatch=true`` and failing
  when ``cert_expired=true``, where ``["renew certificate", "reconnect vpn"]`` works.
* Traps: patterns with one success, two successes, 3-4 successes from one subject only, and
  coin flips (pairs of identical conditions, one success and one failure each).
* Preferences: users state them 1-4 times in varying words; some change their mind later
  with an explicit statement. Tool output with injected "SYSTEM:" instructions and the
  agent's own guesses also carry claims, repeated, and must never become preferences. One
  subject id (``jordan.lee``) exists in two tenants with different preferences.
* Hazards: secrets in every free-text field, high-sensitivity HR/medical records with a
  purpose, temporary grants with ``expires_at``, and filler without actions or claims.

Ground truth (``DemoData.truth``, JSON-serialisable)
-----------------------------------------------------
::

    {
      "seed": int, "scale": int, "start": RFC3339, "episode_count": int,
      "procedures": [{"tenant_id", "namespace", "problem_key", "name", "goal",
                      "goal_variants": [...], "steps": [...],
                      "preconditions": {cause_flag: "true"},      # minimal separator
                      "equivalent_preconditions": [{other_flag: "false"}],  # 2-cause problems
                      "context": {"error_code": ...},             # shared, not separating
                      "support_ids": [...], "counterexample_ids": [...],
                      "support_subjects": [...]}],
      "traps": [{"tenant_id", "namespace", "problem_key", "steps": [...],
                 "kind": "single_success|coin_flip|two_successes|one_subject",
                 "episode_ids": [...], "success_count", "subject_ids": [...]}],
      "preference_rule": {"min_statements": 2, "explicit_change_qualifies": true,
                          "source_roles": ["user"], "note"},
      "preferences": [{"tenant_id", "subject_id", "namespace", "predicate",
                       "current_object", "history": [{"object", "valid_from"}],
                       "changed": bool, "statement_count", "qualifies": bool,
                       "episode_ids": [...]}],      # every (tenant, subject, predicate)
      "injected_instructions": [{"episode_id", "tenant_id", "subject_id", "predicate",
                                 "object", "source_role": "tool"}],
      "agent_claims": [{... same keys, "source_role": "agent"}],
      "secrets": [{"kind", "value", "needle", "episode_id", "field"}],  # value as planted;
                                          # needle: the part that must never be stored
      "sensitive_episode_ids": [...],    # sensitivity "high", purpose set
      "expiring_episode_ids": [...],     # every episode with expires_at
      "intent_of_episode": {episode_id: problem_key}   # every procedural episode
    }

Usage: ``python -m memory_core.demo.generate OUT_DIR [--seed 7] [--scale 1]``.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memory_core.demo import hazards, procedural, semantic
from memory_core.demo._builder import Builder, Truth, rfc3339
from memory_core.demo.tenants import NOISE, PREFERENCES, build_tenants

__all__ = ["DEFAULT_START", "DemoData", "generate_demo", "write_demo"]

DEFAULT_START = datetime(2026, 6, 1, tzinfo=UTC)


@dataclass(frozen=True)
class DemoData:
    """Episodes in contract format (JSON-ready dicts, no ``vector``) and their ground truth."""

    episodes: list[dict[str, Any]]
    truth: dict[str, Any]


def generate_demo(*, seed: int = 7, scale: int = 1, start: datetime = DEFAULT_START) -> DemoData:
    """Generate the demo data set; the same ``seed``, ``scale`` and ``start`` give equal output.

    ``scale`` multiplies ticket and filler counts (scale 1: roughly 1,200-2,000 episodes).
    """
    if scale < 1:
        msg = f"scale must be >= 1, got {scale}"
        raise ValueError(msg)
    if start.tzinfo is None or start.utcoffset() is None:
        msg = "start must be timezone-aware"
        raise ValueError(msg)
    rng = random.Random(seed)
    b = Builder(rng=rng, start=start.astimezone(UTC), noise_pools=NOISE)
    truth = Truth()
    tenants = build_tenants(rng)
    for tenant in tenants:
        for problem in tenant.problems:
            procedural.generate_problem(b, truth, tenant.tenant_id, tenant.subjects, problem, scale)
        for namespace in tenant.namespaces:
            problems = [p for p in tenant.problems if p.namespace == namespace]
            procedural.generate_traps(b, truth, tenant.tenant_id, tenant.subjects, problems, scale)
    for tenant in tenants:
        semantic.generate_preferences(b, truth, tenant, PREFERENCES)
        semantic.generate_injections(b, truth, tenant)
        semantic.generate_agent_claims(b, truth, tenant, PREFERENCES)
        hazards.generate_sensitive(b, truth, tenant)
        hazards.generate_temporary(b, truth, tenant, scale)
        hazards.generate_chatter(b, tenant, scale)
    hazards.plant_secrets(b, truth)

    episodes = sorted(b.episodes, key=lambda ep: (ep["occurred_at"], ep["episode_id"]))
    return DemoData(episodes=episodes, truth=_truth_dict(truth, episodes, seed, scale, b.start))


def _truth_dict(
    truth: Truth, episodes: list[dict[str, Any]], seed: int, scale: int, start: datetime
) -> dict[str, Any]:
    return {
        "seed": seed,
        "scale": scale,
        "start": rfc3339(start),
        "episode_count": len(episodes),
        "procedures": truth.procedures,
        "traps": truth.traps,
        "preference_rule": semantic.PREFERENCE_RULE,
        "preferences": truth.preferences,
        "injected_instructions": truth.injected_instructions,
        "agent_claims": truth.agent_claims,
        "secrets": truth.secrets,
        "sensitive_episode_ids": truth.sensitive_episode_ids,
        "expiring_episode_ids": [ep["episode_id"] for ep in episodes if ep["expires_at"]],
        "intent_of_episode": truth.intent_of_episode,
    }


def write_demo(data: DemoData, directory: Path) -> tuple[Path, Path]:
    """Write ``episodes.jsonl`` (one episode per line) and ``truth.json`` into ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    episodes_path = directory / "episodes.jsonl"
    truth_path = directory / "truth.json"
    with episodes_path.open("w", encoding="utf-8") as fh:
        for episode in data.episodes:
            fh.write(json.dumps(episode, ensure_ascii=False) + "\n")
    truth_path.write_text(
        json.dumps(data.truth, ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
    )
    return episodes_path, truth_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the demo episodes and their truth.")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--scale", type=int, default=1)
    args = parser.parse_args(argv)
    data = generate_demo(seed=args.seed, scale=args.scale)
    for path in write_demo(data, args.directory):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
