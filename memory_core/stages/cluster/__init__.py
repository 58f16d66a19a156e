"""Cluster: group a partition's episodes by the problem they are about.

Guarantees: per (tenant, namespace), never across; incremental (only new episodes are placed)
and deterministic; episodes with different error codes never share a cluster; cluster ids are
stable across ``--recluster``.

Modules: ``stage`` (I/O, ids, incremental and full runs), ``leader`` (the numpy core),
``selection`` (per-partition feature weights and threshold, chosen without labels).
"""

from memory_core.stages._exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__, {"stage": ["ClusterResult", "cluster_partition", "list_clusters"]}
)
