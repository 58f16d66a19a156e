"""Procedures from real trajectories, through the CLI contract, scored with tau-bench's intents.

    HF_HUB_OFFLINE=1 python bench/tau_cluster.py [--path FILE] [--embedder minilm|hash]
        [--config extra.toml] [--recluster]

What runs is what a data team runs: the runs are converted (``convert_tau_bench``: the
openai-chat adapter, one trajectory episode per run with its ``{tool, args}`` calls plus one
text-only episode per message), written as JSON lines, then ``memctl ingest``, ``memctl
consolidate``, ``memctl clusters --format json`` and ``memctl candidates --format json`` in
subprocesses on a fresh home. The gold intents (set of gold action names of the run's task)
are read only here, after the fact, to score:

- ARI / NMI of the trajectories' clusters against the intents, next to k-means told the true
  number of intents on the same episode vectors;
- the issue's procedure checks (``memory_core.eval.tau_checks``, the same function the
  evaluation reports): learnable intents with a procedure whose world-changing steps equal
  the intent's, procedure precision (passing / all candidates), failed runs linked as
  counterexamples or pitfall evidence.

Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

DEFAULT = Path(__file__).resolve().parents[2] / "shared/data/tau_bench_airline_tasks_00_24.json"


def memctl(home: Path, *args: str, config: Path | None, env: dict[str, str]) -> str:
    cmd = [sys.executable, "-m", "memory_core.cli", "--home", str(home)]
    if config is not None:
        cmd += ["--config", str(config)]
    done = subprocess.run([*cmd, *args], capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"memctl {' '.join(args)} failed: {done.stderr[-2000:]}")
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--path", type=Path, default=DEFAULT)
    parser.add_argument("--embedder", choices=["minilm", "hash"], default="hash")
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--recluster", action="store_true")
    parser.add_argument("--keep", type=Path, default=None, help="keep the home here")
    args = parser.parse_args()

    from sklearn.cluster import KMeans
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    from memory_core.config import load_settings
    from memory_core.eval.tau_bench import convert_tau_bench, load_tau_bench
    from memory_core.eval.tau_checks import procedure_checks

    items = load_tau_bench(args.path)
    conversion = convert_tau_bench(items)
    trajectories = conversion.trajectories
    intent = conversion.intent_of_episode
    session_of = {t["episode_id"]: t["session_id"] for t in trajectories}

    env = {**os.environ, "MEMCTL_EMBED__MODEL": args.embedder, "HF_HUB_OFFLINE": "1"}
    env.pop("MEMCTL_HOME", None)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        home = root / "home"
        data = root / "episodes.jsonl"
        data.write_text("".join(json.dumps(e) + "\n" for e in conversion.episodes))
        last = max(e["occurred_at"] for e in conversion.episodes)
        now = last[:10] + "T23:00:00Z"
        memctl(home, "init", config=args.config, env=env)
        memctl(home, "ingest", str(data), config=args.config, env=env)
        memctl(home, "consolidate", "--now", now, config=args.config, env=env)
        if args.recluster:
            memctl(home, "consolidate", "--now", now, "--recluster", config=args.config, env=env)
        clusters = json.loads(memctl(home, "clusters", "--format", "json",
                                     config=args.config, env=env))  # fmt: skip
        candidates = json.loads(memctl(home, "candidates", "--format", "json",
                                       config=args.config, env=env))  # fmt: skip
        settings = load_settings(home=home, config_file=args.config, embed={"model": args.embedder})
        from memory_core.stores import open_stores

        stores = open_stores(settings)
        ids = [t["episode_id"] for t in trajectories]
        quoted = ", ".join("'" + i + "'" for i in ids)
        table = stores.lance.scan("episodes", where=f"episode_id IN ({quoted})",
                                  columns=["episode_id", "vector"])  # fmt: skip
        vec_of = dict(zip(table.column("episode_id").to_pylist(),
                          np.asarray(table.column("vector").to_pylist()), strict=True))  # fmt: skip
        selection = []
        with stores.meta.connect() as con:
            for (detail,) in con.execute(
                "SELECT detail FROM audit_log WHERE action = 'cluster_selection' ORDER BY logged_at"
            ).fetchall():
                selection.append(json.loads(detail)["choice"])

    members = {m: c["cluster_id"] for c in clusters for m in c["member_ids"]}
    gold = [intent[i] for i in ids]
    ours = [members.get(i, f"unclustered:{i}") for i in ids]
    k = len(set(gold))
    vectors = np.stack([vec_of[i] for i in ids])
    km = KMeans(n_clusters=k, n_init=10, random_state=0).fit_predict(vectors)
    message_clustered = sum(1 for e in conversion.episodes if e["episode_id"] in members
                            and e["episode_id"] not in session_of)  # fmt: skip

    checks = procedure_checks(candidates, trajectories, intent, settings.steps)
    result = {
        "path": str(args.path),
        "embedder": args.embedder,
        "config": str(args.config) if args.config else None,
        "recluster": args.recluster,
        "trajectories": len(ids),
        "message_episodes": len(conversion.episodes) - len(ids),
        "message_episodes_clustered": message_clustered,
        "intents": k,
        "clusters": len(set(ours)),
        "ari": round(float(adjusted_rand_score(gold, ours)), 4),
        "nmi": round(float(normalized_mutual_info_score(gold, ours)), 4),
        "kmeans_true_k_ari": round(float(adjusted_rand_score(gold, km)), 4),
        "kmeans_true_k_nmi": round(float(normalized_mutual_info_score(gold, km)), 4),
        "selection": selection,
        **{k: v for k, v in checks.items() if "promoted" not in k},  # nothing is promoted
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
