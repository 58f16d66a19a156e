"""The kit's fake Anthropic API (tests/kit/anthropic.py) serves the API's real shapes.

Every LLM test drives the real SDK through that fake, so its bodies must parse as the SDK's
own types: a message, a message batch, a results line.
"""

from __future__ import annotations

import json
from collections import Counter

from anthropic.types import Message
from anthropic.types.messages import MessageBatch, MessageBatchIndividualResponse

from tests.kit.anthropic import MODEL, T0, VALID, FakeAnthropic, FakeBatch, error_body, message_body

# -- the fake's bodies are the API's shapes ----------------------------------------------------


def test_message_body_parses_as_sdk_message() -> None:
    msg = Message.model_validate(message_body('{"a": 1}', cache_read=7))
    assert msg.usage.cache_read_input_tokens == 7
    assert msg.content[0].type == "text"


def test_batch_and_result_bodies_parse_as_sdk_types() -> None:
    fake = FakeAnthropic()
    fake.batch_results["c2"] = {
        "type": "errored",
        "error": error_body("overloaded_error", "Overloaded"),
    }
    batch = FakeBatch("msgbatch_x", [{"custom_id": "c2", "params": {}}], T0, polls_left=1)
    assert MessageBatch.model_validate(batch.body()).processing_status == "in_progress"
    batch.polls_left = 0
    fake._finish(batch)
    parsed = MessageBatch.model_validate(batch.body())
    assert parsed.processing_status == "ended"
    assert parsed.request_counts.errored == 1
    line = MessageBatchIndividualResponse.model_validate(
        {"custom_id": "c2", "result": batch.results["c2"]}
    )
    assert line.result.type == "errored"


def test_sdk_round_trip_through_the_fake() -> None:
    fake = FakeAnthropic()
    client = fake.client()
    msg = client.messages.create(
        model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}]
    )
    assert json.loads(msg.content[0].text) == VALID
    batch = client.messages.batches.create(
        requests=[
            {
                "custom_id": "c1",
                "params": {
                    "model": MODEL,
                    "max_tokens": 10,
                    "messages": [{"role": "user", "content": "x"}],
                },
            }
        ]
    )
    assert batch.id.startswith("msgbatch_")
    assert client.messages.batches.retrieve(batch.id).processing_status == "ended"
    results = list(client.messages.batches.results(batch.id))
    assert [r.custom_id for r in results] == ["c1"]
    assert results[0].result.type == "succeeded"
    assert fake.counts == Counter(
        {"messages": 1, "batch_create": 1, "batch_retrieve": 2, "batch_results": 1}
    )
