"""``memctl eval``: every data set on a fresh temporary home, one JSON document out.

The document is the single source of every figure: the markdown and HTML reports and
EVALUATION.md are rendered from it (``report``), never written by hand. The three gates the
issue sets (sensitive false writes, wrong-scope retrievals, deletion residue) are summed over
data sets from what was measured; ``gates.ok`` is False when any is not 0.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["DATASETS", "SCHEMA_VERSION", "default_data_dir", "run_eval"]

SCHEMA_VERSION = 1
DATASETS = ("demo", "tau-bench", "locomo")
_FILES = {
    "tau-bench": "tau_bench_airline_tasks_00_24.json",
    "locomo": "locomo_5conv.json",
}


def default_data_dir() -> Path:
    """``$MEMCTL_EVAL_DATA``, else ``../shared/data`` beside the repository."""
    if env := os.environ.get("MEMCTL_EVAL_DATA"):
        return Path(env)
    return Path(__file__).resolve().parents[3] / "shared" / "data"


def _gates(datasets: dict[str, dict[str, Any]]) -> dict[str, Any]:
    ran = [d for d in datasets.values() if not d.get("skipped")]
    totals = {
        "sensitive_false_writes": sum(d["write_quality"]["sensitive_false_writes"] for d in ran),
        "wrong_scope_retrievals": sum(d["retrieval"]["wrong_scope_retrievals"] for d in ran),
        "deletion_residue": sum(d["update_forgetting"]["deletion_residue"] for d in ran),
    }
    return {**totals, "ok": bool(ran) and not any(totals.values())}


def run_eval(
    datasets: Sequence[str],
    *,
    embedder: str,
    path: Path | None = None,
    sample: int | None = None,
    k: int = 10,
    data_dir: Path | None = None,
    work_dir: Path | None = None,
    command: str = "",
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Evaluate ``datasets`` (names from ``DATASETS``); ``path`` replaces the data file of the
    single data set named. Data files that are absent are reported as skipped, with why."""
    from memory_core.eval.dataset_demo import evaluate_demo
    from memory_core.eval.dataset_locomo import evaluate_locomo_file
    from memory_core.eval.dataset_tau import evaluate_tau_bench_file

    unknown = [d for d in datasets if d not in DATASETS]
    if unknown:
        msg = f"unknown dataset(s) {unknown}; choose from {list(DATASETS)} or all"
        raise ValueError(msg)
    if path is not None and len(datasets) != 1:
        msg = "--path evaluates one data set: name it with --dataset"
        raise ValueError(msg)
    if path is not None and not Path(path).is_file():
        msg = f"--path {path}: no such file"
        raise FileNotFoundError(msg)
    data = data_dir or default_data_dir()
    root = Path(tempfile.mkdtemp(prefix="memctl-eval-", dir=work_dir))
    started = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    try:
        for name in datasets:
            if progress:
                progress(f"eval {name}: running")
            t0 = time.perf_counter()
            if name == "demo":
                results[name] = evaluate_demo(
                    root, embedder=embedder, path=path, sample=sample, k=k
                )
            else:
                file = path or data / _FILES[name]
                if not file.is_file():
                    results[name] = {
                        "dataset": name,
                        "skipped": f"{file} not found (see ../shared/data/README.md)",
                    }
                    continue
                run = evaluate_tau_bench_file if name == "tau-bench" else evaluate_locomo_file
                results[name] = run(root, file, embedder=embedder, sample=sample, k=k)
            results[name]["wall_seconds"] = round(time.perf_counter() - t0, 1)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "schema": SCHEMA_VERSION,
        "command": command,
        "embedder": ", ".join(sorted({r["embedder"] for r in results.values() if "embedder" in r}))
        or embedder,
        "scorer": "heuristic (the API is never called; Claude requests are estimated)",
        "review": "every review batch approved as `memctl review approve BATCH` would, "
        "reviewer memctl-eval; gold labels only score",
        "sample": sample,
        "k": k,
        "datasets": results,
        "gates": _gates(results),
        "wall_seconds": round(time.perf_counter() - started, 1),
        "machine": {"cpus": os.cpu_count(), "load_average_1m_at_end": round(load[0], 2)},
    }
