"""Clustering ARI/NMI and counterexample coverage on tau-bench (real agent trajectories).

    HF_HUB_OFFLINE=1 python bench/tau_cluster.py [--path ../shared/data/tau_bench_airline_tasks_00_24.json] [--embedder minilm|hash]

Runs the converter, ingest, clustering and mining on a fresh temporary home; the gold intents
are used only to score. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from memory_core.config import load_settings
from memory_core.embed import make_embedder
from memory_core.eval.tau_eval import evaluate_tau_bench

DEFAULT = Path(__file__).resolve().parents[2] / "shared/data/tau_bench_airline_tasks_00_24.json"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--path", type=Path, default=DEFAULT)
    parser.add_argument("--embedder", choices=["minilm", "hash"], default="minilm")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(home=Path(tmp), embed={"model": args.embedder})
        result = evaluate_tau_bench(args.path, settings, embedder=make_embedder(settings.embed))
    print(
        json.dumps(
            {"path": str(args.path), "embedder": args.embedder, **result.as_dict()}, indent=2
        )
    )


if __name__ == "__main__":
    main()
