"""Review under `memctl serve`, end to end: a real Prefect server, the served runner, a browser.

Each test runs `memctl serve --only review-dispatch --only promotion-review` in a subprocess
against a home with open review batches, so review-dispatch starts one top-level
promotion-review run per batch, which suspends on its form (the runner runs it again when
answered):

* with its own server (PREFECT_API_URL unset), the form is opened and submitted in headless
  Chromium through Playwright: a blank Reviewer is refused by the form and the run keeps
  waiting; a filled one with a blank edit row commits, and the run's stored inputs are gone;
  then `memctl serve` is SIGKILLed, and its server stops with it;
* against a server the user started (PREFECT_API_URL set), batches whose runs failed or were
  cancelled get new runs, `memctl review approve` resumes one, and an answer the batch cannot
  take (a rejection without a reason) is refused on the next form instead of failing the run.

Chromium is the system one (`apt-get install chromium`; .ci/run installs it); without it the
browser test skips locally and fails under CI.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

from memory_core.config import load_settings
from memory_core.context import Partition, RunContext
from memory_core.embed import HashEmbedder
from memory_core.stages.ingest import ingest_records
from memory_core.stages.mine import mine_partition
from memory_core.stages.review import build_review_batches
from memory_core.stages.score import score_candidates
from memory_core.stores import open_stores
from memory_core.stores.facts import list_rows
from memory_core.stores.review import get_batch, set_flow_run
from tests.kit import forkserver
from tests.kit.prefect import EVENT_SERVICES_OFF, local_prefect, seed_database
from tests.kit.schedule import LOCAL_PREFECT

# no DuckDB instance kept open by the test process (tests/kit/duckdb_instances.py):
# `memctl serve`'s runs open the home while the test polls it
KEEP_DUCKDB_INSTANCES = False

pytestmark = pytest.mark.slow
# its two tests (~2 min each, no module fixture) run on two xdist workers: the browser test is
# this file's unit, the user-server test is in the LOCAL_PREFECT unit (tests/kit/schedule.py).
# No XDIST_SPLIT: with one test left to deal, a split's second unit was empty

T = TypeVar("T")
MEMCTL = str(Path(sys.executable).with_name("memctl"))
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
PRIVATE = ("Jin", "Mina", "team-a", "team-b", "The owner is")  # memory text and subject ids


def _said(eid: str, subject: str, obj: str, when: datetime) -> str:
    text = f"The owner is {obj}."
    return json.dumps(
        {
            "episode_id": eid, "tenant_id": "acme", "subject_id": subject, "namespace": "it",
            "occurred_at": when.isoformat(), "source_role": "user", "text": text,
            "claims": [{"predicate": "owner", "object": obj, "span": text}],
        }
    )  # fmt: skip


def _home(root: Path, subjects: dict[str, str]) -> tuple[Path, list[str]]:
    """A home with one open batch per subject, on the wall clock (the runs wait until the
    batches expire, so they must lie ahead)."""
    home = root / "home"
    now = datetime.now(UTC).replace(microsecond=0)
    settings = load_settings(home=home, embed={"model": "hash"}, review={"max_batch_items": 1})
    stores = open_stores(settings)
    ctx = RunContext(now=now)
    lines = [
        _said(f"{subject}-{n}", subject, obj, now - timedelta(days=days))
        for subject, obj in subjects.items()
        for n, days in enumerate((8, 3))
    ]
    ingest_records(stores, settings, ctx, lines, embedder=HashEmbedder(384), source="t.jsonl")
    mine_partition(stores, settings, ctx, Partition("acme", "it"))
    score_candidates(stores, settings.score, ctx, sync=True)
    batches = build_review_batches(stores, settings, ctx).created
    assert len(batches) == len(subjects)
    return home, batches


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PREFECT_", "MEMCTL_", "ANTHROPIC_"))
    }
    env.update(
        MEMCTL_EMBED__MODEL="hash", PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1",
        PREFECT_LOGGING_LEVEL="WARNING", PREFECT_RUNNER_POLL_FREQUENCY="2",
    )  # fmt: skip
    env.update(extra)
    return env


@contextmanager
def _serve(
    home: Path, env: dict[str, str], log: Path, *args: str
) -> Iterator[tuple[Callable[[], str], subprocess.Popen[bytes]]]:
    """`memctl serve` for review, stopped with SIGTERM (it stops a server it started).

    The hourly interval never fires within a test: ``_dispatch`` starts review-dispatch by
    hand, as the UI's "Run" button does (it still takes the deployment's concurrency slot)."""
    cmd = [MEMCTL, "serve", "--home", str(home), "--only", "review-dispatch",
           "--only", "promotion-review", "--interval", "3600", *args]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield (lambda: log.read_text(errors="replace")[-4000:]), proc
    finally:
        proc.send_signal(signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=60)
        with suppress(ProcessLookupError):  # whatever is left of its group (a run, a server)
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def _until(what: str, check: Callable[[], T | None], log: Callable[[], str], timeout=240) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(1)
    pytest.fail(f"timed out waiting for {what}:\n{log()}")
    raise AssertionError  # unreachable


class Api:
    """Just the REST calls these tests need, on an explicit server (not the test harness's)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def call(self, path: str, body: Any = None) -> Any:
        """One request; a 503 (the SQLite server busy) is retried, as Prefect's client does."""
        data = None if body is None else json.dumps(body).encode()
        method = "GET" if body is None else "POST"
        for attempt in range(10):
            req = urllib.request.Request(
                self.url + path, data=data, method=method,
                headers={"content-type": "application/json"},
            )  # fmt: skip
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    raw = resp.read()
                return json.loads(raw) if raw else None
            except urllib.error.HTTPError as exc:
                if exc.code != 503 or attempt == 9:
                    raise
                time.sleep(1)
        raise AssertionError  # unreachable

    def state(self, run_id: str) -> dict[str, Any]:
        return self.call(f"/flow_runs/{run_id}")["state"] or {}

    def inputs(self, run_id: str) -> dict[str, str]:
        rows = self.call(f"/flow_runs/{run_id}/input/filter", {"prefix": "", "limit": 100})
        return {r["key"]: r["value"] for r in rows}

    def summary(self) -> str:
        """Every run's flow, name and state: what a failed wait prints."""
        try:
            runs = self.call("/flow_runs/filter", {"sort": "EXPECTED_START_TIME_ASC"})
        except OSError as exc:
            return f"(server unreachable: {exc})"
        return "\n".join(
            f"{r['name']} {r['state']['type']}/{r['state']['name']}: "
            f"{(r['state'].get('message') or '')[:200]}"
            for r in runs
            if r.get("state")
        )


def _dispatch(api: Api, log: Callable[[], str]) -> str:
    """Start a review-dispatch run of the served deployment once it is registered."""

    def deployment() -> str | None:
        try:
            return api.call("/deployments/name/review-dispatch/review-dispatch")["id"]
        except urllib.error.URLError:  # not up yet, or not registered yet
            return None

    dep = _until("the review-dispatch deployment", deployment, log)
    return api.call(f"/deployments/{dep}/create_flow_run", {})["id"]


def _waiting_run(home: Path, api: Api, batch_id: str, not_ids: tuple[str, ...] = ()) -> str | None:
    """The batch's run once it waits on its form (and is not one of ``not_ids``)."""
    try:
        run_id = get_batch(open_stores(load_settings(home=home)).meta, batch_id).flow_run_id
    except Exception:  # the served run has the meta file open this moment
        return None
    if not run_id or run_id in not_ids:
        return None
    if api.state(run_id).get("name") != "Suspended":
        return None
    keys = api.inputs(run_id)  # saved just after the state: until then the UI has no form
    return run_id if any(k.endswith("-description") for k in keys) else None


def _finished(api: Api, run_id: str) -> bool:
    return api.state(run_id).get("type") == "COMPLETED"


def _down(api: Api) -> bool:
    try:
        api.call("/health")
    except OSError:
        return True
    return False


def _batch(home: Path, batch_id: str) -> Any:
    return get_batch(open_stores(load_settings(home=home)).meta, batch_id)


def _memctl(home: Path, api_url: str, *args: str) -> dict[str, Any]:
    env = _env(PREFECT_API_URL=api_url)
    cli = forkserver.run(
        [MEMCTL, *args, "--home", str(home), "--format", "json"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    return json.loads(cli.stdout)


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing under CI: .ci/run installs it (apt-get)")
        pytest.skip("the browser test needs the system chromium: apt-get install -y chromium")
    return path


def _submit_form_in_browser(chromium: str, base: str, run_id: str, api: Api) -> str:
    """Open the run in the Prefect UI, resume it through its form; returns the form's text."""
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="chromium-")
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch_persistent_context(
                profile, executable_path=chromium, headless=True, args=CHROMIUM_FLAGS,
                viewport={"width": 1400, "height": 1600},
            )  # fmt: skip
            try:
                page = browser.new_page()
                page.set_default_timeout(120_000)
                page.goto(f"{base}/runs/flow-run/{run_id}", wait_until="domcontentloaded")
                page.get_by_role("button", name="Resume").click()
                form = page.get_by_role("dialog")
                # the dialog opens as a bare "resume?" prompt and becomes the run's form once
                # the UI has read its input schema (seen under load): wait for a form field
                form.locator("textarea").first.wait_for()
                form.get_by_role("button", name="Submit").wait_for()
                text = form.inner_text()
                # the Reviewer left blank: the form refuses it, nothing reaches the run
                form.get_by_role("button", name="Submit").click()
                form.get_by_text("'reviewer' is a required property").wait_for()
                assert api.state(run_id)["name"] == "Suspended"
                # filled in, with an edit row added and left blank (optional: changes nothing)
                form.locator("textarea").first.fill("carol")
                form.get_by_role("button", name="Add item").last.click()
                for _attempt in range(3):  # a busy SQLite server answers 503: click again
                    with page.expect_response(lambda r: r.url.endswith("/resume")) as answer:
                        form.get_by_role("button", name="Submit").click()
                    if answer.value.status != 503:
                        break
                assert answer.value.status == 201, answer.value.text()
                return text
            finally:
                browser.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def test_serve_with_its_own_server_review_form_in_a_browser(tmp_path: Path) -> None:
    chromium = _chromium()
    home, (batch_id,) = _home(tmp_path, {"team-a": "Jin"})
    # where memctl serve's own server keeps its database (cli_support.prefect_env): migrated
    # already, so that server skips Prefect's migrations (kit/prefect.py seed_database)
    seed_database(home / "prefect")
    port = _port()
    base = f"http://127.0.0.1:{port}"
    api = Api(f"{base}/api")
    # memctl serve's own server without the event services: the test reads flow runs, their
    # states and inputs, never task runs or events (kit/prefect.py EVENT_SERVICES_OFF)
    env = _env(**EVENT_SERVICES_OFF)
    with _serve(home, env, tmp_path / "serve.log", "--port", str(port)) as (serve_log, proc):

        def log() -> str:
            return f"memctl serve said:\n{serve_log()}\nflow runs:\n{api.summary()}"

        dispatch = _dispatch(api, log)
        run_id = _until("a suspended review run", lambda: _waiting_run(home, api, batch_id), log)
        inputs = api.inputs(run_id)
        assert not any(p in v for v in inputs.values() for p in PRIVATE)  # form: ids, counts
        text = _submit_form_in_browser(chromium, base, run_id, api)
        assert batch_id in text and f"memctl review show {batch_id}" in text
        assert not any(p in text for p in PRIVATE)
        _until("the answered run to finish", lambda: _finished(api, run_id), log)
        assert api.inputs(run_id) == {}  # the answer is deleted from Prefect
        assert api.state(dispatch)["type"] == "COMPLETED"  # was: cancelled, "slot lost"
        proc.kill()  # SIGKILL: no cleanup runs, yet the server it started goes with it
        _until("the server to stop with memctl serve", lambda: _down(api), log)
    batch = _batch(home, batch_id)
    assert (batch.status, batch.reviewer, batch.flow_run_id) == ("approved", "carol", None)
    (fact,) = list_rows(open_stores(load_settings(home=home)).lance, "facts")
    assert (fact["object"], fact["approver"]) == ("Jin", "carol")


def _stranded(api: Api, state: str) -> str:
    """A flow run in a final state, as a batch's crashed or cancelled review run leaves it."""
    flow = api.call("/flows/", {"name": "stranded-review"})
    run = api.call("/flow_runs/", {"flow_id": flow["id"], "state": {"type": state}})
    return run["id"]


@pytest.mark.xdist_group(LOCAL_PREFECT)  # with the schedule test: one local server started
def test_against_a_user_server_no_batch_is_stranded_and_answers_never_fail_the_run(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    server = local_prefect(tmp_path_factory.getbasetemp())
    api = Api(server.api_url)
    home, (first, second) = _home(tmp_path, {"team-a": "Jin", "team-b": "Mina"})
    meta = open_stores(load_settings(home=home)).meta
    old = (_stranded(api, "FAILED"), _stranded(api, "CANCELLED"))
    set_flow_run(meta, first, old[0])
    set_flow_run(meta, second, old[1])
    env = server.env(PREFECT_RUNNER_POLL_FREQUENCY="2")
    with _serve(home, env, tmp_path / "serve.log") as (serve_log, _proc):

        def log() -> str:
            return f"memctl serve said:\n{serve_log()}\nflow runs:\n{api.summary()}"

        _dispatch(api, log)
        run1 = _until(
            "a new run for the failed one", lambda: _waiting_run(home, api, first, old), log
        )
        run2 = _until("a new run for the cancelled one", lambda: _waiting_run(home, api, second, old), log)  # fmt: skip
        assert api.call(f"/flow_runs/{run1}")["parent_task_run_id"] is None  # top-level

        decided = _memctl(home, server.api_url, "review", "approve", first, "--reviewer", "alice")
        assert decided["flow_run"] == f"resumed flow run {run1}"
        _until("the resumed run to finish", lambda: _finished(api, run1), log)

        # a rejection without a reason: refused, and the run waits on a new form
        api.call(
            f"/flow_runs/{run2}/resume", {"run_input": {"reviewer": "dan", "decision": "reject"}}
        )

        def refused() -> str | None:
            state = api.state(run2)
            details = state.get("state_details") or {}
            if state.get("name") != "Suspended" or details.get("pause_key") != "decision-1":
                return None
            return api.inputs(run2).get("suspended-decision-1-description")

        note = _until("the run to wait again after a refused answer", refused, log)
        assert "not applied" in note and "reason" in note
        _memctl(home, server.api_url, "review", "reject", second, "--reason", "not ours",
                "--reviewer", "dan")  # fmt: skip
        _until("the rejected batch's run to finish", lambda: _finished(api, run2), log)
        assert api.inputs(run1) == {} and api.inputs(run2) == {}
    assert (_batch(home, first).status, _batch(home, second).status) == ("approved", "rejected")
    assert _batch(home, first).flow_run_id is None and _batch(home, second).flow_run_id is None
