"""Build an expensive fixture directory once per test session, shared by the xdist workers.

``built_once(factory, name, build)`` returns a directory that ``build(path)`` filled. The
first process to ask builds it (under an exclusive ``flock``); every other worker of the same
``pytest`` run waits for it, then reads the same directory. The directory lives in the run's
own temporary root (the parent of each worker's ``basetemp``, fresh for every run), so it
never outlives the code that built it and needs no cache key. A build that fails leaves a
``<name>.failed`` note: the other workers fail with its message instead of building again.

Tests copy what they write to (``shutil.copytree``); the built directory is read-only by
convention.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest


def session_root(factory: pytest.TempPathFactory) -> Path:
    """The temporary root that every worker of this run shares."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    root = session_root(factory) / "built-once"
    root.mkdir(parents=True, exist_ok=True)
    target = root / name
    failed = root / f"{name}.failed"
    with (root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if failed.exists():
            pytest.fail(f"building {name} failed in another worker:\n{failed.read_text()}")
        if not (target / ".built").exists():
            partial = root / f"{name}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir()
            try:
                build(partial)
            except BaseException:
                failed.write_text(traceback.format_exc()[-4000:])
                raise
            shutil.rmtree(target, ignore_errors=True)
            partial.rename(target)
            (target / ".built").touch()
    return target


__all__ = ["built_once", "session_root"]
