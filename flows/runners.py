"""The task runner is configuration: threads on one machine, Dask or Ray when a team outgrows it.

``task_runner(settings.runner)`` builds the Prefect task runner a flow is run with
(``flow.with_options(task_runner=...)``). prefect-dask and prefect-ray are imported only when
chosen, so the default install needs neither (extras ``dask`` and ``ray``).

What runs where (and why it is safe on worker processes): flow tasks take plain values only
(the settings as a dict, partition keys, the clock) and open the stores themselves, so a task
pickles to any worker. A consolidation task reads its partition's episodes from Lance (local
disk or object store) and writes nothing to Lance; its DuckDB writes are its own partition's
clusters, members and candidates, upserted by deterministic ids, so two workers never write
the same rows and a retried task converges. DuckDB takes one writer process at a time: the
metadata store opens the file per partition and waits for it (``stores.lock_timeout_s``), so
DuckDB writes serialise across workers while the Lance reads and the numeric work run in
parallel. DuckDB therefore must be on a path every worker reaches (one machine, or a shared
volume); Lance may be anywhere the storage options reach.
"""

from __future__ import annotations

from typing import Any

from prefect.task_runners import ThreadPoolTaskRunner

from memory_core.config import RunnerConfig
from memory_core.errors import ConfigError

__all__ = ["describe", "task_runner"]

_KEY = "runner.kind"


def task_runner(config: RunnerConfig) -> Any:
    """A fresh Prefect task runner for one flow run, as configured."""
    if config.kind == "threads":
        return ThreadPoolTaskRunner(max_workers=config.max_workers)
    if config.kind == "dask":
        return _dask(config)
    return _ray(config)


def _dask(config: RunnerConfig) -> Any:
    try:
        from prefect_dask import DaskTaskRunner
    except ImportError as exc:
        msg = "prefect-dask is not installed: pip install 'memory-core[dask]'"
        raise ConfigError(_KEY, msg) from exc
    if config.address:
        return DaskTaskRunner(address=config.address)
    return DaskTaskRunner(
        cluster_class="distributed.LocalCluster",
        cluster_kwargs={
            "n_workers": config.max_workers,
            "processes": config.processes,
            "threads_per_worker": config.threads_per_worker,
            "dashboard_address": None,
        },
    )


def _ray(config: RunnerConfig) -> Any:
    try:
        from prefect_ray import RayTaskRunner
    except ImportError as exc:
        msg = "prefect-ray is not installed: pip install 'memory-core[ray]'"
        raise ConfigError(_KEY, msg) from exc
    if config.address:
        return RayTaskRunner(address=config.address)
    return RayTaskRunner(init_kwargs={"num_cpus": config.max_workers})


def describe(config: RunnerConfig) -> str:
    """One line for logs and reports: which runner, how wide, where."""
    where = config.address or "local"
    if config.kind == "threads":
        return f"threads x{config.max_workers}"
    return f"{config.kind} x{config.max_workers} ({where})"
