"""A seeded, deterministic multi-tenant demo data set with its ground truth beside it.

See :mod:`memory_core.demo.generate` for why the data is shaped the way it is and for the
format of the truth; ``generate_demo`` builds it and ``write_demo`` writes
``episodes.jsonl`` and ``truth.json``.
"""

from __future__ import annotations

from memory_core.demo.generate import DemoData, generate_demo, write_demo

__all__ = ["DemoData", "generate_demo", "write_demo"]
