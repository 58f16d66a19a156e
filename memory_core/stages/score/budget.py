"""Per-run token and cost budget: reserve before sending, settle with what the API reports.

A request is admitted only if its *estimate* fits under every limit (input tokens, output
tokens, cost). Estimates err high on purpose so the budget is a ceiling, not a hope:

* input tokens = characters of the request JSON / 4 (the rubric included), rounded up;
* output tokens = ``max_tokens`` (the most the API may bill);
* input is priced at the dearer of the plain and cache-write rates (the first request writes
  the rubric to the cache), output at the output rate, with the batch discount in batch mode.

In sync mode each reservation is replaced by the real usage once the answer arrives, so room
freed by short answers and cache reads goes to the next candidates. A candidate that does not
fit stays ``pending_score``: it never receives a made-up score.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from memory_core.config import ScoreConfig
from memory_core.stages.score.results import Usage

__all__ = ["Budget", "estimate_usage"]

CHARS_PER_TOKEN = 4


def estimate_usage(params: dict[str, Any]) -> Usage:
    """A high estimate of one request's usage, from its params alone (no API call)."""
    chars = len(json.dumps(params, ensure_ascii=False, separators=(",", ":")))
    return Usage(
        requests=1,
        input_tokens=math.ceil(chars / CHARS_PER_TOKEN),
        output_tokens=int(params.get("max_tokens", 0)),
    )


@dataclass
class Budget:
    """What this run may still spend; shared by the sync path, the batch and the retries."""

    config: ScoreConfig
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    refused: int = 0

    def estimate_cost(self, usage: Usage, *, batch: bool) -> float:
        cfg = self.config
        in_rate = max(cfg.price_input_per_mtok, cfg.price_cache_write_per_mtok)
        cost = (usage.total_input * in_rate + usage.output_tokens * cfg.price_output_per_mtok) / 1e6
        return cost * ((1.0 - cfg.batch_discount) if batch else 1.0)

    def why_not(self, estimate: Usage, *, batch: bool) -> str | None:
        """The limit this request would break, or None if it fits."""
        cfg = self.config
        if self.input_tokens + estimate.total_input > cfg.max_input_tokens_per_run:
            return f"input-token budget ({cfg.max_input_tokens_per_run}) reached"
        if self.output_tokens + estimate.output_tokens > cfg.max_output_tokens_per_run:
            return f"output-token budget ({cfg.max_output_tokens_per_run}) reached"
        if self.cost_usd + self.estimate_cost(estimate, batch=batch) > cfg.max_cost_usd_per_run:
            return f"cost budget (${cfg.max_cost_usd_per_run:.2f}) reached"
        return None

    def reserve(self, estimate: Usage, *, batch: bool) -> str | None:
        """Reserve room for a request; returns the refusal reason instead when it does not fit."""
        reason = self.why_not(estimate, batch=batch)
        if reason is not None:
            self.refused += 1
            return reason
        self.input_tokens += estimate.total_input
        self.output_tokens += estimate.output_tokens
        self.cost_usd += self.estimate_cost(estimate, batch=batch)
        return None

    def settle(self, estimate: Usage, actual: Usage, *, batch: bool) -> None:
        """Swap a reservation for what the API reported (real prices, cache reads included)."""
        self.input_tokens += actual.total_input - estimate.total_input
        self.output_tokens += actual.output_tokens - estimate.output_tokens
        self.cost_usd += actual.cost_usd(self.config, batch=batch) - self.estimate_cost(
            estimate, batch=batch
        )

    def as_dict(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": round(self.cost_usd, 6),
            "limits": {
                "input_tokens": cfg.max_input_tokens_per_run,
                "output_tokens": cfg.max_output_tokens_per_run,
                "cost_usd": cfg.max_cost_usd_per_run,
            },
            "refused": self.refused,
        }
