"""What a fresh interpreter imports: the test process may already hold a package another test
loaded, so "this never imports X" is checked in a child of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable

__all__ = ["packages_imported"]


def packages_imported(code: str, packages: Iterable[str]) -> list[str]:
    """Which of ``packages`` (a package or any of its submodules) are loaded after ``code`` runs
    in a new interpreter; ``code`` may assert what it computed (a failure names its stderr)."""
    wanted = sorted(set(packages))
    probe = (
        f"{code}\nimport json as _json, sys as _sys\n"
        f"print(_json.dumps(sorted({{m.split('.')[0] for m in _sys.modules}} & set({wanted!r}))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])
