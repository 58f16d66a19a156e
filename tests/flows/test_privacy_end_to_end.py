"""Issue 18, end to end: after forgetting, no byte under the home and nothing Prefect serves
names the subject or repeats what they said.

A real ``prefect server start`` keeps its database under the home (``<home>/prefect``, as
``memctl serve`` does), ``memctl serve`` is the worker for the nightly and deletion
deployments, and the review runs as ``memctl review wait`` does, paused on its form, answered
through Prefect's API with a reason that quotes the subject. The subject's statement is in
candidates, the review form and its answer, and a quarantined line whose JSON is cut right
after the subject's id. Then ``memctl forget --queue`` and a deletion-requests run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.kit import forkserver
from tests.kit.prefect import LocalPrefect, _free_port, _healthy, seed_database

# no DuckDB instance kept open by the test process (tests/kit/duckdb_instances.py):
# `memctl serve` and `review wait` open the home
KEEP_DUCKDB_INSTANCES = False

SUBJECT = "quentin.privacy"
SAID = "Please send my payslips to the Basel office from now on."
REASON = f"approved, the user wrote: {SAID}"
MEMCTL = str(Path(sys.executable).with_name("memctl"))
PREFECT = str(Path(sys.executable).with_name("prefect"))
DEADLINE_S = 150


def _api(server: LocalPrefect, path: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        f"{server.api_url}{path}", data=data, method="POST" if data is not None else "GET",
        headers={"content-type": "application/json"},
    )  # fmt: skip
    for attempt in range(5):
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                raw = resp.read()
            break
        except urllib.error.HTTPError as exc:
            # the server answers 503 when its database is briefly busy (seen once on a clean
            # clone): nothing was done, so asking again is safe; any other error is the test's
            if exc.code != 503 or attempt == 4:
                raise
            time.sleep(1.0)
    return json.loads(raw) if raw else None


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


@contextmanager
def _process(args: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    with log.open("wb") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
    try:
        yield proc
    finally:
        _stop(proc)


_watched: list[subprocess.Popen[bytes]] = []  # the server, while it should be up


def _wait(what: str, check: Any, *logs: Path) -> Any:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in _watched):
            break  # a process it depends on died: its log says why
        got = check()
        if got:
            return got
        time.sleep(1)
    tails = "\n".join(p.read_text(errors="replace")[-2500:] for p in logs if p.exists())
    pytest.fail(f"timed out waiting for {what}\n{tails}")


def _memctl(env: dict[str, str], *args: str) -> Any:
    done = forkserver.run([MEMCTL, *args, "--format", "json"], env=env, capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _episodes(now: datetime) -> str:
    day = now - timedelta(days=3)
    lines = [
        {"episode_id": f"q{i}", "tenant_id": "acme", "subject_id": SUBJECT, "namespace": "hr",
         "occurred_at": (day + timedelta(hours=i)).isoformat(), "source_role": "user",
         "text": SAID, "claims": [{"predicate": "payslip_office", "object": "Basel",
                                   "span": SAID}]}
        for i in range(3)
    ] + [
        {"episode_id": f"o{i}", "tenant_id": "acme", "subject_id": "olga.other",
         "namespace": "hr", "occurred_at": (day + timedelta(hours=i)).isoformat(),
         "source_role": "user", "text": "I like my payslips by post, thanks.",
         "claims": [{"predicate": "payslip_channel", "object": "post",
                     "span": "I like my payslips by post"}]}
        for i in range(3)
    ]  # fmt: skip
    cut = json.dumps({"episode_id": "cut", "tenant_id": "acme", "subject_id": SUBJECT})
    cut = cut[: cut.index(SUBJECT) + len(SUBJECT)]  # truncated right after the subject
    return "".join(json.dumps(x) + "\n" for x in lines) + cut + "\n"


def _deployment_run(server: LocalPrefect, name: str, home: Path) -> str:
    deps = _api(server, "/deployments/filter", {"deployments": {"name": {"any_": [name]}}})
    assert deps, f"deployment {name} is not served"
    run = _api(server, f"/deployments/{deps[0]['id']}/create_flow_run",
               {"parameters": {"home": str(home)}})  # fmt: skip
    return str(run["id"])


def _state(server: LocalPrefect, run_id: str) -> str | None:
    state = _api(server, f"/flow_runs/{run_id}").get("state") or {}
    return state.get("type")


def _everything_prefect_serves(server: LocalPrefect) -> str:
    """Artifacts, every flow run (names, parameters, state messages), their inputs and logs."""
    parts = [json.dumps(_api(server, "/artifacts/filter", {}))]
    runs = _api(server, "/flow_runs/filter", {})
    parts.append(json.dumps(runs))
    parts.append(json.dumps(_api(server, "/task_runs/filter", {})))
    for run in runs:
        parts.append(json.dumps(_api(server, f"/flow_runs/{run['id']}/input/filter",
                                     {"prefix": "", "limit": 1000, "exclude_keys": []})))  # fmt: skip
    parts.append(json.dumps(_api(server, "/logs/filter", {})))
    return "\n".join(parts)


def _files_holding(home: Path, needles: list[str]) -> list[tuple[str, str]]:
    return [
        (str(p.relative_to(home)), n)
        for p in sorted(home.rglob("*"))
        if p.is_file()
        for n in needles
        if n.encode() in p.read_bytes()
    ]


@pytest.mark.slow
def test_forgetting_reaches_prefect_and_every_byte_under_the_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    server = LocalPrefect(api_url=f"http://127.0.0.1:{_free_port()}/api", home=home / "prefect")
    server.home.mkdir(parents=True)
    seed_database(server.home)  # a migrated database, no run in it: kit/prefect.py
    # the runner looks for due runs every 2 s instead of Prefect's 10, and the paused review
    # run for its answer every 1 s instead of memctl's 10 (review.poll_interval_s), as the
    # other served tests do: the runs are the same, the test waits less for them to be seen
    env = server.env(
        MEMCTL_HOME=str(home), PREFECT_RUNNER_POLL_FREQUENCY="2", MEMCTL_REVIEW__POLL_INTERVAL_S="1"
    )
    logs = tmp_path / "logs"
    logs.mkdir()
    now = datetime.now(UTC)
    source = tmp_path / "episodes.jsonl"  # the user's own input file, outside the home
    source.write_text(_episodes(now))

    server_args = [PREFECT, "server", "start", "--host", "127.0.0.1", "--port",
                   server.api_url.rsplit(":", 1)[1].split("/")[0]]  # fmt: skip
    with _process(server_args, env, logs / "server.log") as srv:
        _watched[:] = [srv]
        _wait("the Prefect server", lambda: _healthy(server.api_url), logs / "server.log")
        ingested = _memctl(env, "ingest", str(source), "--quarantine")
        assert ingested["quarantined"] == 1
        serve_args = [MEMCTL, "serve", "--only", "nightly-consolidation",
                      "--only", "deletion-requests"]  # fmt: skip
        with _process(serve_args, env, logs / "serve.log"):
            # nightly, through the worker
            _wait("the served deployments",
                  lambda: len(_api(server, "/deployments/filter", {})) >= 2, logs / "serve.log")  # fmt: skip
            nightly = _deployment_run(server, "nightly-consolidation", home)
            _wait("the nightly run", lambda: _state(server, nightly) in ("COMPLETED", "FAILED",
                  "CRASHED"), logs / "serve.log")  # fmt: skip
            assert _state(server, nightly) == "COMPLETED"
            candidates = _memctl(env, "candidates")
            mine = [c for c in candidates if c["subject_id"] == SUBJECT]
            assert mine, candidates
            (batch,) = [b for b in _memctl(env, "review", "list")
                        if b["tenant_id"] == "acme" and b["status"] == "open"]  # fmt: skip

            # review: paused on its form, answered through the API with a quoting reason
            waiter = [MEMCTL, "review", "wait", batch["batch_id"]]
            with _process(waiter, env, logs / "review.log") as review:
                paused = _wait(
                    "the paused review run",
                    lambda: _api(server, "/flow_runs/filter",
                                 {"flow_runs": {"state": {"type": {"any_": ["PAUSED"]}}}}),
                    logs / "review.log",
                )  # fmt: skip
                answer = {"reviewer": "rita", "decision": "approve", "items": [],
                          "reason": REASON, "edits": []}  # fmt: skip
                _api(server, f"/flow_runs/{paused[0]['id']}/resume", {"run_input": answer})
                _wait("the review to finish", lambda: review.poll() is not None,
                      logs / "review.log")  # fmt: skip
                assert review.returncode == 0
            # (whether Prefect got any of it depends on the review form: the receipt lists
            # what it removed, and nothing may be left either way)

            # forgetting, through the worker
            queued = _memctl(env, "forget", "--subject", SUBJECT, "--queue")
            deletion = _deployment_run(server, "deletion-requests", home)
            _wait("the deletion run", lambda: _state(server, deletion) in ("COMPLETED", "FAILED",
                  "CRASHED"), logs / "serve.log")  # fmt: skip
            assert _state(server, deletion) == "COMPLETED"
            time.sleep(3)  # events of the last runs reach the database
            served = _everything_prefect_serves(server)
        for needle in (SUBJECT, SAID, REASON, "Basel"):
            assert needle not in served, needle
        _watched.clear()
    # the server is stopped: its database, WAL and every other file are at rest
    from memory_core.config import load_settings
    from memory_core.stores import forgetting as fstore
    from memory_core.stores import open_stores

    meta = open_stores(load_settings(home=home)).meta
    request = fstore.get_request(meta, queued["request_id"])
    assert request is not None and request.receipt_id
    with meta.connect() as con:
        (body,) = con.execute(
            "SELECT body FROM receipts WHERE receipt_id = ?", [request.receipt_id]
        ).fetchone()
    receipt = json.loads(body)
    assert _files_holding(home, [SUBJECT, SAID, REASON, "Basel"]) == []
    assert request.status == "done", receipt["verification"]  # its own byte scan agrees
    assert _memctl(env, "facts", "--subject", "olga.other") is not None  # the home still works
