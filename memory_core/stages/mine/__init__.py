"""Mine: clusters -> candidates (procedures, insight twins, preferences) with their evidence.

Guarantees: a procedure needs repeated successes from several subjects and every failure of its
pattern explained by separating conditions (``counterexamples``); preferences come only from
the user's own statements, per subject (``claims``); candidates are upserted by deterministic
id, so a rerun updates instead of duplicating. Nothing here is served: candidates wait for
scoring and review.

Modules: ``stage`` (per partition), ``counterexamples`` and ``claims`` (pure logic, no I/O).
"""

from memory_core.stages._exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__, {"stage": ["MiningResult", "mine_partition", "procedural_candidate_id"]}
)
