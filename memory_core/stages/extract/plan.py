"""Which sessions to send, and how they are packed into requests.

Selected: active episodes with text and no ``claims`` (an episode with claims was already
structured by the agent that wrote it), of the roles in ``extract.roles``, grouped by session
(an episode without a session is a session of its own); a session in which no user speaks is
not sent (no fact from it could have authority), nor are agent episodes that carry tool calls
(their text restates the calls; the user's words are the evidence). Other agent turns are
context for the user's answers, and their end is kept (where the question to the user is).
Only stored text is read, and stored text was redacted at ingest: nothing else can reach a
request body.

A session is sent again only when its content hash, the model or the prompt version changed
(``extract_sessions``). Sessions of one partition (tenant, namespace) are packed in valid-time
order into requests of at most ``max_request_chars`` and ``max_sessions_per_request``
sessions; partitions never share a request, so nothing of one tenant is shown next to
another's. A request's hash covers its sessions' hashes, which makes its ``custom_id`` and its
cache key deterministic: replanning unchanged sessions yields the same requests.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow.compute as pc

from memory_core.config import ExtractConfig
from memory_core.models import content_hash
from memory_core.stages.extract.prompt import Turn, render_sessions, request_params
from memory_core.stores import Stores
from memory_core.stores.extract import DoneSession

__all__ = ["RequestPlan", "SessionPlan", "load_sessions", "pack_requests", "session_key"]

_COLUMNS = [
    "episode_id", "tenant_id", "namespace", "subject_id", "session_id", "occurred_at",
    "source_role", "text", "claims", "content_hash", "actions",
]  # fmt: skip


def session_key(session_id: str | None, episode_id: str) -> str:
    return session_id if session_id else f"episode:{episode_id}"


@dataclass
class SessionPlan:
    """One session's turns as they would be sent, and the hash of exactly that."""

    tenant_id: str
    namespace: str
    session_key: str
    first_at: datetime
    turns: list[dict[str, Any]] = field(default_factory=list)
    content_hash: str = ""

    @property
    def chars(self) -> int:
        return sum(len(t["text"]) + 24 for t in self.turns)


@dataclass
class RequestPlan:
    """One request: its sessions, the turns it shows (by ref) and the exact params."""

    custom_id: str
    request_hash: str
    tenant_id: str
    namespace: str
    sessions: list[SessionPlan]
    turns: dict[str, Turn]
    params: dict[str, Any]

    def episode_refs(self) -> dict[str, str]:
        """episode id -> ref, for answers that cite episode ids instead of refs."""
        return {t.episode_id: ref for ref, t in self.turns.items()}


def _cut(text: str, role: str, config: ExtractConfig) -> str:
    """A user turn keeps its start; any other turn its end (the question the user answers)."""
    text = " ".join(text.split())
    if role == "user":
        limit = config.max_chars_user
        return text if len(text) <= limit else text[: max(0, limit - 1)].rstrip() + "…"
    limit = config.max_chars_other
    if limit <= 0:
        return ""
    return text if len(text) <= limit else "…" + text[-(limit - 1) :].lstrip()


def load_sessions(
    stores: Stores,
    config: ExtractConfig,
    *,
    model: str,
    prompt_version: str,
    done: dict[tuple[str, str, str], DoneSession],
) -> tuple[list[SessionPlan], int]:
    """(sessions to extract, sessions already done under this key) over every partition."""
    if "episodes" not in stores.lance.table_names():
        return [], 0
    table = stores.lance.scan(
        "episodes", where="status = 'active' AND text IS NOT NULL", columns=_COLUMNS
    )
    if table.num_rows == 0:
        return [], 0
    no_claims = pc.fill_null(pc.equal(table.column("claims"), "[]"), fill_value=True)
    roles = pc.is_in(table.column("source_role"), value_set=pa_strings(config.roles))
    table = table.filter(pc.and_(no_claims, roles))
    sessions: dict[tuple[str, str, str], SessionPlan] = {}
    for row in table.to_pylist():
        if row["source_role"] != "user" and row["actions"]:
            continue  # an agent's tool calls (or a whole trajectory): no statement to extract
        text = _cut(row["text"] or "", row["source_role"], config)
        if not text:
            continue
        key = (
            row["tenant_id"],
            row["namespace"],
            session_key(row["session_id"], row["episode_id"]),
        )
        plan = sessions.get(key)
        if plan is None:
            plan = sessions[key] = SessionPlan(*key, first_at=row["occurred_at"])
        plan.first_at = min(plan.first_at, row["occurred_at"])
        row.pop("actions")
        plan.turns.append({**row, "text": text})
    todo: list[SessionPlan] = []
    skipped = 0
    for key, plan in sessions.items():
        if not any(t["source_role"] == "user" for t in plan.turns):
            continue  # nobody speaks for themself: no fact could have authority; not sent
        plan.turns.sort(key=lambda t: (t["occurred_at"], t["episode_id"]))
        plan.content_hash = content_hash(
            [list(key), [[t["episode_id"], t["content_hash"], t["source_role"],
                          t["subject_id"], t["text"]] for t in plan.turns]]
        )  # fmt: skip
        prior = done.get(key)
        if (
            prior is not None
            and prior.content_hash == plan.content_hash
            and prior.model == model
            and prior.prompt_version == prompt_version
        ):
            skipped += 1
            continue
        todo.append(plan)
    todo.sort(key=lambda s: (s.tenant_id, s.namespace, s.first_at, s.session_key))
    return todo, skipped


def pa_strings(values: Iterable[str]) -> Any:
    import pyarrow as pa

    return pa.array(sorted(set(values)), pa.string())


def _chunks(sessions: list[SessionPlan], config: ExtractConfig) -> Iterable[list[SessionPlan]]:
    current: list[SessionPlan] = []
    size = 0
    for s in sessions:
        full = len(current) >= config.max_sessions_per_request
        if current and (full or size + s.chars > config.max_request_chars):
            yield current
            current, size = [], 0
        current.append(s)
        size += s.chars
    if current:
        yield current


def pack_requests(
    sessions: list[SessionPlan], config: ExtractConfig, *, model: str, prompt_version: str
) -> list[RequestPlan]:
    """Requests per partition, in a deterministic order."""
    by_partition: dict[tuple[str, str], list[SessionPlan]] = {}
    for s in sessions:
        by_partition.setdefault((s.tenant_id, s.namespace), []).append(s)
    plans: list[RequestPlan] = []
    for (tenant, namespace), items in sorted(by_partition.items()):
        items.sort(key=lambda s: (s.first_at, s.session_key))  # same sessions, same requests
        for chunk in _chunks(items, config):
            turns: dict[str, Turn] = {}
            shown = []
            for index, s in enumerate(chunk, start=1):
                shown_turns = []
                for t in s.turns:
                    ref = f"t{len(turns) + 1}"
                    turn = Turn(
                        ref=ref, episode_id=t["episode_id"], session_key=s.session_key,
                        role=t["source_role"], subject_id=t["subject_id"],
                        occurred_at=t["occurred_at"].isoformat(), text=t["text"],
                    )  # fmt: skip
                    turns[ref] = turn
                    shown_turns.append(turn)
                shown.append((f"s{index}", s.first_at.date().isoformat(), shown_turns))
            request_hash = content_hash([[s.content_hash for s in chunk], prompt_version])
            plans.append(
                RequestPlan(
                    custom_id=f"x_{request_hash}",
                    request_hash=request_hash,
                    tenant_id=tenant,
                    namespace=namespace,
                    sessions=chunk,
                    turns=turns,
                    params=request_params(render_sessions(shown), config, model=model),
                )
            )
    return plans
