"""A fake Anthropic API behind httpx2.MockTransport: messages, Message Batches, tool use.

The real SDK talks to it: requests go through the SDK's serialisation, retries and error
mapping; bodies follow the API's shapes (message; message_batch; results JSONL lines), which
tests/stages/score/test_score_fakes.py checks against the SDK's own types. Nothing touches
the network: the transport is the only way out of the client (``anthropic_server`` puts the
same fake behind a loopback HTTP server for subprocesses).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import anthropic
import httpx2

from memory_core.models import Authority, Candidate, CandidateKind, CandidateStatus, ClaimSpec
from memory_core.models import Provenance as Prov
from memory_core.stages.score.prompt import RUBRIC

MODEL = "claude-haiku-5-5"
T0 = datetime(2026, 8, 1, 12, 0, tzinfo=UTC)
VALID = {
    "score": 4,
    "rationale": "Stated by the user in three sessions; no counterexamples.",
    "kind_check": "semantic",
    "risk_flags": [],
}


def candidate(i: int, **overrides: Any) -> Candidate:
    """A pending_score semantic candidate with three supporting episodes."""
    support = [f"ep{i}_{k}" for k in range(3)]
    base: dict[str, Any] = {
        "candidate_id": f"cand_{i:04d}",
        "kind": CandidateKind.semantic,
        "tenant_id": "acme",
        "subject_id": "u1",
        "namespace": "it",
        "claim": ClaimSpec(predicate="prefers_editor", object=f"editor number {i}"),
        "support_ids": support,
        "confidence": 0.8,
        "status": CandidateStatus.pending_score,
        "authority": Authority.user_statement,
        "text": f"u1 prefers editor number {i}",
        "provenance": [Prov(source_id=s, subject_id="u1") for s in support],
    }
    base.update(overrides)
    return Candidate(**base)


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_1"}


def message_body(
    text: str,
    *,
    msg_id: str = "msg_01",
    input_tokens: int = 120,
    output_tokens: int = 40,
    cache_read: int = 0,
    cache_write: int = 0,
    stop_reason: str = "end_turn",
) -> dict[str, Any]:
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [{"type": "text", "text": text}],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": cache_write,
            "cache_read_input_tokens": cache_read,
        },
    }


@dataclass
class FakeBatch:
    batch_id: str
    requests: list[dict[str, Any]]
    created_at: datetime
    polls_left: int
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    base_url: str = "https://api.anthropic.com"  # the SDK fetches results_url as given

    def body(self) -> dict[str, Any]:
        ended = self.polls_left <= 0
        counts = Counter(r["type"] for r in self.results.values()) if ended else Counter()
        return {
            "id": self.batch_id,
            "type": "message_batch",
            "processing_status": "ended" if ended else "in_progress",
            "request_counts": {
                "processing": 0 if ended else len(self.requests),
                "succeeded": counts["succeeded"],
                "errored": counts["errored"],
                "canceled": counts["canceled"],
                "expired": counts["expired"],
            },
            "created_at": self.created_at.isoformat().replace("+00:00", "Z"),
            "expires_at": (self.created_at + timedelta(hours=24)).isoformat(),
            "ended_at": (self.created_at + timedelta(minutes=5)).isoformat() if ended else None,
            "archived_at": None,
            "cancel_initiated_at": None,
            "results_url": (
                f"{self.base_url}/v1/messages/batches/{self.batch_id}/results" if ended else None
            ),
        }


AnswerFn = Callable[[dict[str, Any], int], str | dict[str, Any]]


class FakeAnthropic:
    """The API's HTTP surface for messages and batches; it records every request body.

    ``answer(params, attempt)`` returns the text (or a full message body) for a request;
    ``attempt`` counts requests with the same user message, so a test can answer badly once.
    ``fail_messages`` / ``fail_batch_create`` queue responses (or exceptions) served first.
    """

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.bodies: dict[str, list[dict[str, Any]]] = {}
        self.batches: dict[str, FakeBatch] = {}
        self.fail_messages: list[httpx2.Response | Exception] = []
        self.fail_batch_create: list[httpx2.Response | Exception] = []
        self.fail_retrieve: list[httpx2.Response | Exception] = []
        self.batch_results: dict[str, dict[str, Any]] = {}  # custom_id -> result override
        self.polls_before_end = 1
        self.answer: AnswerFn = lambda params, attempt: json.dumps(VALID)
        self.base_url = "https://api.anthropic.com"  # where results_url points (loopback: set)
        self._attempts: Counter[str] = Counter()
        self._cache_written = False

    def client(self) -> anthropic.Anthropic:
        transport = httpx2.MockTransport(self.handler)
        return anthropic.Anthropic(
            api_key="sk-test", http_client=httpx2.Client(transport=transport)
        )

    # -- handler -----------------------------------------------------------------------------

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        path, method = request.url.path, request.method
        body = json.loads(request.content) if request.content else {}
        if path == "/v1/messages" and method == "POST":
            return self._record("messages", body, self._message)
        if path == "/v1/messages/batches" and method == "POST":
            return self._record("batch_create", body, self._create)
        if path.endswith("/results") and method == "GET":
            return self._record("batch_results", body, lambda _: self._results(path))
        if path.startswith("/v1/messages/batches/") and method == "GET":
            return self._record("batch_retrieve", body, lambda _: self._retrieve(path))
        return httpx2.Response(404, json=error_body("not_found_error", f"no route {path}"))

    def _record(self, key: str, body: dict[str, Any], fn: Callable[..., Any]) -> httpx2.Response:
        self.counts[key] += 1
        self.bodies.setdefault(key, []).append(body)
        queue = {
            "messages": self.fail_messages,
            "batch_create": self.fail_batch_create,
            "batch_retrieve": self.fail_retrieve,
        }.get(key, [])
        if queue:
            failure = queue.pop(0)
            if isinstance(failure, Exception):
                raise failure
            return failure
        return fn(body)

    def _answer_message(self, params: dict[str, Any], msg_id: str) -> dict[str, Any]:
        key = json.dumps(params["messages"][0], sort_keys=True)
        attempt = self._attempts[key]
        self._attempts[key] += 1
        out = self.answer(params, attempt)
        if isinstance(out, dict):
            return out
        rubric_tokens = len(RUBRIC) // 4
        first = not self._cache_written
        self._cache_written = True
        return message_body(
            out,
            msg_id=msg_id,
            input_tokens=len(json.dumps(params["messages"])) // 4,
            output_tokens=len(out) // 4,
            cache_write=rubric_tokens if first else 0,
            cache_read=0 if first else rubric_tokens,
        )

    def _message(self, body: dict[str, Any]) -> httpx2.Response:
        return httpx2.Response(
            200, json=self._answer_message(body, f"msg_{self.counts['messages']:04d}")
        )

    def _create(self, body: dict[str, Any]) -> httpx2.Response:
        batch_id = f"msgbatch_{len(self.batches) + 1:04d}"
        batch = FakeBatch(
            batch_id, body["requests"], T0, polls_left=self.polls_before_end,
            base_url=self.base_url,
        )  # fmt: skip
        self.batches[batch_id] = batch
        return httpx2.Response(200, json=batch.body())

    def _retrieve(self, path: str) -> httpx2.Response:
        batch = self.batches.get(path.rsplit("/", 1)[-1])
        if batch is None:
            return httpx2.Response(404, json=error_body("not_found_error", "no such batch"))
        batch.polls_left -= 1
        if batch.polls_left <= 0 and not batch.results:
            self._finish(batch)
        return httpx2.Response(200, json=batch.body())

    def _finish(self, batch: FakeBatch) -> None:
        for n, req in enumerate(batch.requests):
            cid = req["custom_id"]
            if cid in self.batch_results:
                batch.results[cid] = self.batch_results[cid]
                continue
            message = self._answer_message(req["params"], f"msg_b{n:04d}")
            batch.results[cid] = {"type": "succeeded", "message": message}

    def _results(self, path: str) -> httpx2.Response:
        batch = self.batches[path.split("/")[-2]]
        lines = [json.dumps({"custom_id": c, "result": r}) for c, r in batch.results.items()]
        content = ("\n".join(reversed(lines)) + "\n").encode()  # order is not guaranteed
        return httpx2.Response(
            200, content=content, headers={"content-type": "application/x-jsonl"}
        )


def status_response(status: int, kind: str, message: str = "") -> httpx2.Response:
    """An error as the API sends it; ``retry-after-ms`` keeps the SDK's retries fast."""
    return httpx2.Response(
        status,
        json=error_body(kind, message or kind),
        headers={"retry-after-ms": "1", "request-id": "req_1"},
    )


def tool_use_body(
    name: str, tool_input: dict[str, Any], *, msg_id: str, model: str = MODEL
) -> dict[str, Any]:
    """A message whose one content block calls the tool ``name`` with ``tool_input``."""
    return {
        "id": msg_id, "type": "message", "role": "assistant", "model": model,
        "stop_reason": "tool_use", "stop_sequence": None,
        "content": [{"type": "tool_use", "id": "tu_1", "name": name, "input": tool_input}],
        "usage": {"input_tokens": 300, "output_tokens": 80,
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
    }  # fmt: skip


class ToolUseAnthropic:
    """The Messages API answering every request with one forced tool call; records bodies."""

    def __init__(self, tool: str, answer: dict[str, Any]) -> None:
        self.tool = tool
        self.answer = answer
        self.bodies: list[dict[str, Any]] = []

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/v1/messages"
        body = json.loads(request.content)
        self.bodies.append(body)
        msg_id = f"msg_{len(self.bodies)}"
        return httpx2.Response(
            200, json=tool_use_body(self.tool, self.answer, msg_id=msg_id, model=body["model"])
        )

    def client(self) -> anthropic.Anthropic:
        transport = httpx2.MockTransport(self.handler)
        return anthropic.Anthropic(
            api_key="sk-test", http_client=httpx2.Client(transport=transport)
        )
