"""The named status groups, defined once and consistent; no status writer but the lifecycle's."""

import ast
import re
from pathlib import Path

from memory_core import lifecycle
from memory_core.models import Status


def test_served_stale_and_historical_are_disjoint():
    served, stale, hist = set(lifecycle.SERVED), set(lifecycle.STALE), set(lifecycle.HISTORICAL)
    assert not (served & stale or served & hist or stale & hist)


def test_nothing_served_or_current_is_final():
    assert not set(lifecycle.SERVED) & lifecycle.FINAL
    assert not lifecycle.CURRENT & lifecycle.FINAL
    assert lifecycle.WITHDRAWN <= lifecycle.FINAL
    assert set(lifecycle.HISTORICAL) <= lifecycle.FINAL


def test_a_canary_is_served_but_not_current():
    assert "canary" in lifecycle.SERVED and "canary" not in lifecycle.CURRENT


def test_every_status_is_in_a_group_and_rows_compare_as_strings():
    groups = [lifecycle.SERVED, lifecycle.STALE, lifecycle.HISTORICAL, lifecycle.CURRENT,
              lifecycle.FINAL]  # fmt: skip
    for status in Status:
        assert any(status.value in g for g in groups), status
    assert "stale" in lifecycle.CURRENT and "revoked" in lifecycle.WITHDRAWN


# -- one writer of statuses -----------------------------------------------------------------------
#
# Every status change is written by ``stores/status_writes.write_status``. The scan below reads
# every module of memory_core and fails on any other writer: SQL that sets a status column,
# a Lance ``update``/``upsert``/``merge_insert``/``write_versions`` call outside the writer, or
# code that puts a status into a dict. The last is allowed only in the places listed here, each
# of which either creates a record with its first status, decides a new status that it hands to
# ``write_status`` (directly or through a store function that calls it), or reports one.

_SQL_SETS_STATUS = re.compile(r"\bSET\b[^;]*?\bstatus\s*=|excluded\.status", re.I | re.S)
_ROW_WRITERS = {"update", "upsert", "merge_insert", "write_versions"}
_WRITER = "memory_core/stores/status_writes.py"
# (module:function) -> why it may put a status in a dict
_STATUS_IN_DICTS = {
    # creates a record with its first status (checked against the table's None row)
    "memory_core/stages/ingest/stage.py:_episode_rows": "episodes are created active",
    "memory_core/stages/compact/stage.py:_digest": "digests are created active",
    "memory_core/stages/promote/rows.py:_common": "promoted facts/procedures: created active",
    "memory_core/stages/promote/supersede.py:superseded_version": "history version, created",
    "memory_core/stages/promote/plan.py:hold_back_canaries": "new version created canary",
    "memory_core/stores/candidates.py:_write": "inserts mined candidates with their status",
    # decides a new status and hands the row or record to write_status
    "memory_core/stages/staleness/outcomes.py:_roll_back": "deprecated + restored versions",
    "memory_core/stages/staleness/canary.py:promote_canary": "canary -> active",
    "memory_core/stages/staleness/contested.py:detect_contests": "active -> contested",
    "memory_core/stages/staleness/revisions.py:apply_source_revisions": "-> stale",
    "memory_core/stages/staleness/revisions.py:revoke_deleted_source": "stale -> active",
    "memory_core/stages/staleness/settle.py:_apply": "contested -> active",
    "memory_core/stages/staleness/settle.py:_rebind": "stale -> active",
    "memory_core/stages/forget/revoke.py:remove_sources": "-> revoked",
    "memory_core/stages/forget/revoke.py:_recheck_candidates": "candidate -> revoked",
    "memory_core/stages/mine/stage.py:_stale": "candidate retired by the miner",
    "memory_core/stages/score/report.py:_scored_update": "candidate scored",
    "memory_core/stages/score/report.py:_pending_update": "candidate left to score",
    "memory_core/stages/score/stage.py:_follow_twins": "twin follows its procedure",
    "memory_core/stages/review/stage.py:decide_batch": "in-memory copies of decided items",
    "memory_core/stages/score/batches.py:_check": "in-memory copy of a polled LLM batch",
    "memory_core/stores/candidates.py:upsert_candidate_groups": "keeps a decided status",
    "memory_core/stores/status_writes.py:_write_meta": "the writer",
    "memory_core/stores/status_writes.py:write_status": "the writer",
    # reports a status (JSON output, review cards, the status command)
    "memory_core/commands/forget.py:forget": "report",
    "memory_core/mcp_server/memory.py:forget_me": "report",
    "memory_core/mcp_server/memory.py:deletion_status": "report",
    "memory_core/mcp_server/save.py:as_dict": "report",
    "memory_core/stages/review/card.py:card_rows": "report",
    "memory_core/stages/review/decisions.py:as_dict": "report",
    "memory_core/stages/review/summary.py:batch_summary": "report",
    "memory_core/stores/review.py:as_dict": "report",
    "memory_core/status.py:collect_status": "report",
    "memory_core/stores/folded.py:folded_episodes": "read: a folded turn as an episode-shaped row",
    "memory_core/stores/schemas.py:<module>": "index kind of the status column",
}
_OTHER_ROW_WRITERS = {
    # rewrite rows whose status they leave as it is (checked by the writer when it changes)
    "memory_core/stages/compact/digest_summary.py:run": "digest summaries, status unchanged",
    "memory_core/stores/facts.py:write_versions": "the merge primitive write_status uses",
    "memory_core/stores/lance.py:upsert": "the primitive",
    "memory_core/stores/lance.py:insert_new": "appends new rows (created)",
    "memory_core/stores/lance.py:merge_fills": "fill_vectors: vectors only, merges only rows whose status is unchanged",
}


def _status_writers(root: Path) -> list[tuple[str, int, str]]:
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).as_posix()
        tree = ast.parse(path.read_text())
        owner: dict[int, str] = {}
        for node in ast.walk(tree):  # outer functions first: the innermost one names a node
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for sub in ast.walk(node):
                    owner[id(sub)] = node.name
        for node in ast.walk(tree):
            where = f"{rel}:{owner.get(id(node), '<module>')}"
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if _SQL_SETS_STATUS.search(node.value) and rel != _WRITER:
                    found.append((where, node.lineno, "SQL sets a status"))
            elif isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                base = ast.unparse(func.value) if isinstance(func, ast.Attribute) else ""
                if name == "update" and "lance" not in base:
                    continue  # dict.update, model updates: not a Lance write
                if name in _ROW_WRITERS and rel != _WRITER and where not in _OTHER_ROW_WRITERS:
                    found.append((where, node.lineno, f"Lance row write {name}"))
            elif isinstance(node, ast.Dict):
                keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
                if "status" in keys and where not in _STATUS_IN_DICTS:
                    found.append((where, node.lineno, "status put in a dict"))
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    key = target.slice if isinstance(target, ast.Subscript) else None
                    named = isinstance(key, ast.Constant) and key.value == "status"
                    if named and where not in _STATUS_IN_DICTS:
                        found.append((where, node.lineno, "status assigned"))
    return found


def test_no_status_is_written_outside_the_lifecycle_writer():
    root = Path(__file__).resolve().parents[1] / "memory_core"
    assert _status_writers(root) == []


def test_the_scan_finds_each_kind_of_writer(tmp_path):
    pkg = tmp_path / "memory_core"
    pkg.mkdir()
    (pkg / "rogue.py").write_text(
        "def a(con):\n    con.execute(\"UPDATE candidates SET status = 'approved'\")\n"
        "def b(stores):\n    stores.lance.update('facts', 'x', {'status': 'active'})\n"
        "def c(row):\n    row['status'] = 'stale'\n"
        "def d(row):\n    return {**row, 'status': 'revoked'}\n"
    )
    kinds = sorted(k for _, _, k in _status_writers(pkg))
    assert kinds == ["Lance row write update", "SQL sets a status", "status assigned",
                     "status put in a dict", "status put in a dict"]  # fmt: skip


def test_every_allowed_place_still_exists():
    """An entry left behind after its code moved would let a new writer in unnoticed."""
    root = Path(__file__).resolve().parents[1]
    for entry in [*_STATUS_IN_DICTS, *_OTHER_ROW_WRITERS]:
        path, func = entry.split(":")
        source = (root / path).read_text()
        assert func == "<module>" or re.search(rf"def {func}\(", source), entry
