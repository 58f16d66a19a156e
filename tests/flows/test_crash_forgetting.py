"""Crash safety of the forgetting flow: SIGKILL at each kill point, rerun, compare.

Same harness as test_crash_nightly.py, on a home that was consolidated and is then forgotten
60 days later (episodes past their TTL are folded into digests, then deleted; Lance
compaction planned here and executed as tasks, then maintenance).

Kill points (7): the flow's boundaries and inside each writing step of the pass.
"""

from __future__ import annotations

import json
import shutil
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from flows.forgetting import run_forgetting_flow
from flows.nightly import run_nightly
from memory_core.config import load_settings
from memory_core.lease import current_holder
from memory_core.stores import open_stores
from tests.flows.crash_kit import diff, snapshot
from tests.flows.test_crash_nightly import NOW, template  # noqa: F401 (fixture)
from tests.kit import forkserver
from tests.kit.prefect import LocalPrefect, harness_prefect

LATER = NOW + timedelta(days=60)

KILL_POINTS = [
    "forgetting.leased",  # boundary: lease taken, nothing written
    "compact.digests_written",  # inside compaction: digests in Lance, lineage not written
    "compact.lineage_written",  # inside compaction: lineage written, episodes not deleted
    "forget.compacted",  # boundary compaction -> expiry
    "forget.expired",  # boundary expiry -> receipt
    "forgetting.pass_done",  # boundary pass -> Lance compaction on workers
    "forgetting.lance_compacted",  # inside maintenance: compaction committed, indices not
]

RUN = (
    "import sys\n"
    "from datetime import datetime\n"
    "from flows.forgetting import run_forgetting_flow\n"
    "from memory_core.config import load_settings\n"
    "run_forgetting_flow(load_settings(home=sys.argv[1]), now=datetime.fromisoformat(sys.argv[2]))\n"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> LocalPrefect:
    return harness_prefect(tmp_path_factory.mktemp("crash-forget-prefect"))


@pytest.fixture(scope="module")
def consolidated(template: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    home = tmp_path_factory.mktemp("crash-forget-template") / "home"
    shutil.copytree(template, home)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MEMCTL_EMBED__MODEL", "hash")
        run_nightly(load_settings(home=home), now=NOW)
    return home


def _snapshot(home: Path) -> dict[str, Any]:
    snap = snapshot(open_stores(load_settings(home=home)))
    # an `expire` receipt's id is the pass's clock (one per clock, a rerun after a kill stores
    # it once); its body reports the pass that stored it (a rerun after a kill finds less to
    # do), so only the ids are compared
    snap["receipts"] = sorted(
        json.dumps({"receipt_id": json.loads(r)["receipt_id"], "kind": "expire"})
        if '"kind": "expire"' in r
        else r
        for r in snap["receipts"]
    )
    return snap


@pytest.fixture(scope="module")
def baseline(consolidated: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    home = tmp_path_factory.mktemp("crash-forget-baseline") / "home"
    shutil.copytree(consolidated, home)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MEMCTL_EMBED__MODEL", "hash")
        receipt = run_forgetting_flow(load_settings(home=home), now=LATER)
    snap = _snapshot(home)
    assert receipt["compaction"]["digests"] > 0, (
        "nothing was compacted: the harness would prove little"
    )
    assert snap["lance.digests"] and len(snap["lance.episodes"]) < 13
    return snap


@pytest.mark.slow
@pytest.mark.parametrize("point", KILL_POINTS)
def test_killed_forgetting_converges_on_rerun(
    point: str,
    consolidated: Path,
    baseline: dict[str, Any],
    server: LocalPrefect,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    home = tmp_path / "home"
    shutil.copytree(consolidated, home)
    killed = forkserver.run(
        [sys.executable, "-c", RUN, str(home), LATER.isoformat()],
        env=server.env(MEMCTL_KILL_AT=point),
        capture_output=True,
        timeout=180,
        check=False,
        preload_prefect=True,  # a real process, forked from one that imported Prefect
    )
    assert killed.returncode == -9, (
        f"{point} was not reached (exit {killed.returncode}): {killed.stderr.decode()[-1500:]}"
    )
    stores = open_stores(load_settings(home=home))
    assert current_holder(stores.meta).flow == "forgetting"
    monkeypatch.setenv("MEMCTL_EMBED__MODEL", "hash")
    run_forgetting_flow(load_settings(home=home), now=LATER)
    problems = diff(baseline, _snapshot(home))
    assert not problems, f"after a kill at {point}:\n" + "\n".join(problems)
    assert current_holder(stores.meta) is None
