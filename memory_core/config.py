"""Configuration: code defaults = configs/default.toml, then a TOML file, then MEMCTL_* env.

Resolution order (later wins): defaults here, the TOML file named by ``--config`` or
``MEMCTL_CONFIG`` (``configs/default.toml`` documents every key), ``MEMCTL_*`` environment
variables with ``__`` between section and key (``MEMCTL_EMBED__MODEL=hash``), then ``--home``.
Everything is validated at start, so a bad key fails before any store is touched.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from memory_core.cron import check_cron
from memory_core.errors import ConfigError

__all__ = [
    "ClaimsConfig",
    "ClusterConfig",
    "EmbedConfig",
    "ExtractConfig",
    "ForgetConfig",
    "ForgetPolicy",
    "IngestConfig",
    "LeaseConfig",
    "McpConfig",
    "McpToken",
    "PolicyConfig",
    "RecallConfig",
    "ReviewConfig",
    "RunnerConfig",
    "ScheduleConfig",
    "ScoreConfig",
    "Settings",
    "StalenessConfig",
    "StepRules",
    "StepsConfig",
    "StoresConfig",
    "load_settings",
]

_SECTION = ConfigDict(extra="forbid", frozen=True)


class StoresConfig(BaseModel):
    model_config = _SECTION
    lance_uri: str = Field(
        default="", description="Lance database URI; empty = <home>/lance. s3://bucket/path works"
    )
    meta_path: str = Field(default="", description="DuckDB file; empty = <home>/meta.duckdb")
    storage_options: dict[str, str] = Field(
        default_factory=dict, description="object store options (endpoint, region, keys)"
    )
    lock_timeout_s: float = Field(default=10.0, ge=0, description="wait for the metadata lock")


class EmbedConfig(BaseModel):
    model_config = _SECTION
    model: Literal["minilm", "hash"] = Field(
        default="minilm", description="minilm = all-MiniLM-L6-v2 offline; hash = fast, tests"
    )
    dim: int = Field(default=384, ge=8, le=4096, description="dimension of the hash embedder")
    batch_size: int = Field(default=32, ge=1, le=4096)
    backend: Literal["torch", "onnx", "onnx-int8"] = Field(
        default="torch",
        description="MiniLM runtime: torch, onnx (same vectors), onnx-int8 (own version)",
    )
    onnx_cache_dir: str = Field(
        default="", description="where the ONNX export is cached; empty = ~/.cache/memory-core/onnx"
    )
    at_ingest: bool = Field(
        default=False,
        description="embed episodes that arrive without a vector during ingest (the old, "
        "blocking behaviour); false = write them at once with no vector (the full-text leg "
        "finds them) and let `memctl embed` / the nightly's embed task fill vectors in bulk",
    )
    embed_batch_rows: int = Field(
        default=20_000, ge=100, description="episodes per commit of the embed task"
    )


class IngestConfig(BaseModel):
    model_config = _SECTION
    redact_secrets: bool = True
    write_batch_rows: int = Field(default=50_000, ge=100)


class ClusterConfig(BaseModel):
    model_config = _SECTION
    threshold: float = Field(
        default=0.35, gt=0, le=2, description="cosine distance to join an existing cluster"
    )
    goal_weight: float = Field(default=0.5, ge=0, description="weight of the goal-text feature")
    error_code_weight: float = Field(
        default=0.25, ge=0, description="extra distance when error codes differ"
    )
    steps_weight: float = Field(
        default=0.5, ge=0, description="weight of the abstract step-signature feature"
    )
    select: bool = Field(
        default=True, description="choose weights and threshold per partition by silhouette"
    )
    select_goal_weights: list[float] = Field(default_factory=lambda: [0.5, 1.0])
    select_steps_weights: list[float] = Field(default_factory=lambda: [0.0, 0.5, 1.0, 2.0])
    select_thresholds: list[float] = Field(default_factory=lambda: [0.2, 0.3, 0.35, 0.45])
    select_sample: int = Field(default=200, ge=4, le=5000, description="episodes scored")
    seed: int = 0


_READ_ONLY_PREFIXES = [
    "get_", "list_", "search_", "find_", "lookup", "fetch_", "read_", "query_", "show_",
    "view_", "describe_", "check_", "count_", "calculate", "compute_", "think",
]  # fmt: skip

#: Hand-offs and escalations: they pass the conversation on rather than read or change data.
_CONTROL_PREFIXES = [
    "transfer_to_human", "transfer_to_agent", "transfer_to_live", "handoff", "hand_off",
    "escalate", "connect_to_human", "connect_to_agent", "route_to_human", "request_human",
]  # fmt: skip


class StepRules(BaseModel):
    """Which tools only read (lookups), which hand control on (hand-offs, escalations) and
    which change the world; one namespace's view. Explicit lists beat prefixes
    (``world_changing_tools`` first), read-only prefixes beat control prefixes."""

    model_config = _SECTION
    read_only_prefixes: list[str] = Field(
        default_factory=lambda: list(_READ_ONLY_PREFIXES),
        description="a tool whose name starts with one of these only reads",
    )
    read_only_tools: list[str] = Field(default_factory=list, description="always read-only")
    world_changing_tools: list[str] = Field(
        default_factory=list, description="always world-changing (beats prefixes)"
    )
    control_prefixes: list[str] = Field(
        default_factory=lambda: list(_CONTROL_PREFIXES),
        description="a tool whose name starts with one of these hands the conversation on",
    )
    control_tools: list[str] = Field(
        default_factory=list, description="always a hand-off/escalation (control) step"
    )


class StepsConfig(StepRules):
    """Step rules for every namespace, with per-namespace overrides (replace, not merge)."""

    namespaces: dict[str, StepRules] = Field(default_factory=dict)

    def for_namespace(self, namespace: str | None) -> StepRules:
        if namespace is not None and namespace in self.namespaces:
            return self.namespaces[namespace]
        return self


class PolicyConfig(BaseModel):
    """Promotion policy (invariant 4): one success is not a rule."""

    model_config = _SECTION
    version: str = "1"
    min_support: int = Field(default=3, ge=1, description="distinct supporting episodes")
    min_subjects_tenant_scope: int = Field(default=2, ge=1)
    wilson_z: float = Field(default=1.645, gt=0)
    min_wilson_lower: float = Field(default=0.5, ge=0, le=1)
    max_condition_keys: int = Field(default=3, ge=1, le=6)
    ignore_condition_keys: list[str] = Field(default_factory=list)


class ClaimsConfig(BaseModel):
    model_config = _SECTION
    min_statements: int = Field(default=2, ge=1, description="statements before a preference")
    explicit_change_markers: list[str] = Field(
        default_factory=lambda: ["from now on", "actually", "instead", "changed", "no longer"]
    )


class ExtractConfig(BaseModel):
    """Fact extraction from raw conversations (stages/extract): what is sent, how facts count.

    The model, timeouts, polling, prices and the per-run budget are ``[score]``'s: one
    Anthropic account, one price table, one ceiling per stage run.
    """

    model_config = _SECTION
    enabled: bool = Field(default=True, description="run when ANTHROPIC_API_KEY or replay is set")
    replay: str = Field(
        default="", description="JSONL of recorded answers keyed by custom_id (no API call)"
    )
    prompt_version: str = "1"
    max_tokens: int = Field(default=4096, ge=64, description="output tokens per request")
    roles: list[Literal["user", "agent", "tool", "system"]] = Field(
        default_factory=lambda: ["user", "agent"],
        description="episodes of these roles are sent (tool output and system prompts are not)",
    )
    max_chars_user: int = Field(default=2000, ge=20, description="a user turn is cut here")
    max_chars_other: int = Field(
        default=160, ge=0, description="an agent turn keeps its last this many characters"
    )
    max_request_chars: int = Field(
        default=24_000, ge=500, description="sessions are packed into one request up to this"
    )
    max_sessions_per_request: int = Field(default=20, ge=1)
    min_sessions: int = Field(default=2, ge=1, description="distinct sessions before proposal")
    min_episodes: int = Field(default=2, ge=1, description="distinct episodes before proposal")
    single_statement_min_importance: int = Field(
        default=4, ge=1, le=6, description="a lone self-statement this important is proposed"
    )
    merge_similarity: float = Field(
        default=0.9, ge=0, le=1, description="cosine of predicate+object at which facts merge"
    )


class ScoreConfig(BaseModel):
    model_config = _SECTION
    model: str = "claude-haiku-5-5"
    max_tokens: int = Field(default=400, ge=16)
    timeout_s: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=2, ge=0)
    batch_min_requests: int = Field(default=20, ge=1, description="below this, Messages API")
    batch_deadline_s: float = Field(default=3600.0, gt=0)
    poll_initial_s: float = Field(default=5.0, gt=0)
    poll_max_s: float = Field(default=120.0, gt=0)
    max_input_tokens_per_run: int = Field(default=2_000_000, ge=0)
    max_output_tokens_per_run: int = Field(default=200_000, ge=0)
    max_cost_usd_per_run: float = Field(default=5.0, ge=0)
    prompt_version: str = "1"
    price_input_per_mtok: float = Field(default=1.0, ge=0)
    price_output_per_mtok: float = Field(default=5.0, ge=0)
    price_cache_read_per_mtok: float = Field(default=0.1, ge=0)
    price_cache_write_per_mtok: float = Field(default=1.25, ge=0)
    batch_discount: float = Field(default=0.5, ge=0, le=1)
    extract_claims: bool = False
    workflow_text: bool = Field(
        default=True,
        description=(
            "Claude words passing procedures (checked against the support), one Message "
            "Batches request each, answers cached by the request's content hash"
        ),
    )
    llm_kinds: list[Literal["semantic", "procedural"]] = Field(
        default_factory=lambda: ["procedural"],
        description="candidate kinds Claude scores; the others get the labelled heuristic",
    )


class ReviewConfig(BaseModel):
    """Promotion review: batches for people, their expiry, and the optional auto-approval."""

    model_config = _SECTION
    max_batch_items: int = Field(default=25, ge=1, description="items per review batch")
    expire_after_days: float = Field(
        default=14.0, gt=0, description="undecided batches expire; candidates re-queue"
    )
    auto_approve_user_semantic: bool = Field(
        default=False, description="auto-approve preferences from the user's own statements"
    )
    auto_approve_min_confidence: float = Field(default=0.9, ge=0, le=1)
    pause_timeout_hours: float = Field(
        default=24.0, gt=0, description="how long a local promotion-review run waits"
    )
    poll_interval_s: int = Field(
        default=10, ge=1, description="how often a paused promotion-review run looks for input"
    )


MemoryClass = Literal["episodic", "semantic", "procedural", "digest"]


class ForgetPolicy(BaseModel):
    """What forgetting does to one (namespace, memory class); unset fields use the defaults.

    Keys of ``ForgetConfig.policies`` are ``"<namespace>/<class>"`` with ``*`` for any
    namespace, e.g. ``"*/episodic"`` or ``"support/semantic"``; the most specific key wins.
    """

    model_config = _SECTION
    ttl_days: float | None = Field(default=None, gt=0, description="age of valid time")
    grace_days: float | None = Field(default=None, ge=0, description="expired -> hard delete")
    max_per_subject: int | None = Field(
        default=None, ge=1, description="keep the best N per subject, expire the rest"
    )
    decay_floor: float | None = Field(
        default=None, ge=0, description="expire when importance x recency x access < this"
    )


class ForgetConfig(BaseModel):
    """Forgetting and compaction (DESIGN.md sections 1 and 4, invariant 7)."""

    model_config = _SECTION
    episodic_ttl_days: float = Field(default=30.0, gt=0)
    grace_days: float = Field(default=7.0, ge=0)
    version_retention_hours: float = Field(default=0.0, ge=0)
    policies: dict[str, ForgetPolicy] = Field(
        default_factory=dict, description='per "<namespace>/<class>" overrides'
    )
    purpose_ttl_days: dict[str, Annotated[float, Field(gt=0)]] = Field(
        default_factory=dict,
        description="records stored for a purpose expire after N days (N > 0: 0 or less "
        "would expire them at once)",
    )
    decay_half_life_days: float = Field(default=30.0, gt=0)
    default_importance: float = Field(default=0.5, ge=0, le=1)
    compact_on_ttl: bool = Field(
        default=True, description="fold clustered episodes past TTL into digests"
    )
    digest_max_sources: int = Field(default=8, ge=2, description="episodes per digest")
    session_digest_max_sources: int = Field(
        default=64,
        ge=2,
        description="turns per digest when a whole extracted session is folded (one digest "
        "per session up to this many turns)",
    )
    digest_summary: Literal["template", "llm"] = Field(
        default="template",
        description="llm: Claude adds a summary to each digest's header (Batches API; "
        "needs ANTHROPIC_API_KEY, else the template stays)",
    )
    digest_summary_max_per_run: int = Field(default=2000, ge=0)
    digest_vector: Literal["mean", "embed"] = Field(
        default="mean", description="digest vector: mean of its sources' vectors, or embed text"
    )
    access_log_min_age_s: float = Field(
        default=60.0, ge=0, description="fold access-log files untouched this long"
    )
    keep_folded_access_logs: bool = False
    vector_index_max_build_rows: int = Field(
        default=300_000,
        ge=0,
        description="nightly maintenance builds a first vector index (recall.vector_index_*) "
        "only below this many rows; 0 = never",
    )
    fts_tables: list[Literal["episodes", "facts", "procedures", "digests"]] = Field(
        default_factory=lambda: ["episodes", "facts", "procedures", "digests"],
        description="tables nightly maintenance gives the read path's full-text index when "
        "missing (digests are found by their words: bench/compaction_locomo.py). The index "
        "makes deletion's fragment rewrites slower on a big table (bench/forget.py): leave "
        "episodes out if deletion latency matters more than keyword recall",
    )
    layout_fragment_rows: int = Field(
        default=100_000,
        ge=0,
        description="maintenance lays tables out grouped by tenant and subject in fragments "
        "of this many rows (also every compaction's target), so one subject's deletion "
        "rewrites a fragment or two, not the table (stores/layout.py); 0 = Lance's default",
    )
    layout_max_share: float = Field(
        default=0.25,
        gt=0,
        le=1,
        description="regroup a table once one subject's deletion would rewrite more than this "
        "share of its rows on average",
    )
    drop_tags: bool = Field(
        default=False, description="delete Lance tags that would keep forgotten rows; else refuse"
    )
    delete_unverified: bool = Field(
        default=False, description="also delete leftover files of failed writes (no writers!)"
    )

    def policy(self, namespace: str, memory_class: MemoryClass) -> ForgetPolicy:
        """The effective policy: built-in defaults, then ``*/class``, then ``namespace/class``."""
        ttl = self.episodic_ttl_days if memory_class == "episodic" else None
        merged: dict[str, object] = {"ttl_days": ttl, "grace_days": self.grace_days}
        for key in (f"*/{memory_class}", f"{namespace}/{memory_class}"):
            override = self.policies.get(key)
            if override is not None:
                merged.update(override.model_dump(exclude_unset=True))
        return ForgetPolicy(**merged)


class RecallConfig(BaseModel):
    """The read path agents embed (memory_core.recall): ranking weights, budgets, indices."""

    model_config = _SECTION
    default_k: int = Field(default=10, ge=1, le=1000, description="results when --k is absent")
    budget_tokens: int = Field(default=2000, ge=1, description="token budget of packed results")
    chars_per_token: float = Field(default=4.0, gt=0, description="tokenizer-free estimate")
    candidates_per_table: int = Field(
        default=20, ge=1, description="rows each search leg fetches per table before ranking"
    )
    rrf_k: int = Field(default=60, ge=1, description="reciprocal rank fusion constant")
    weight_relevance: float = Field(default=1.0, ge=0)
    weight_entity: float = Field(default=0.3, ge=0, description="query terms in key fields")
    weight_recency: float = Field(default=0.15, ge=0)
    weight_importance: float = Field(default=0.15, ge=0)
    weight_authority: float = Field(default=0.1, ge=0)
    weight_outcome: float = Field(default=0.1, ge=0)
    penalty_conflict: float = Field(default=0.3, ge=0)
    penalty_stale: float = Field(default=0.2, ge=0)
    recency_half_life_days: float = Field(default=30.0, gt=0)
    allowed_sensitivity: list[Literal["low", "medium", "high"]] = Field(
        default_factory=lambda: ["low", "medium"],
        description="sensitivities served when the caller names none",
    )
    vector_nprobes: int = Field(
        default=0,
        ge=0,
        description="0 = exact search of the prefiltered rows; N = use a vector index, N probes",
    )
    vector_index_min_rows: int = Field(
        default=1_000_000, ge=1, description="build a vector index from this many rows on"
    )
    vector_index_partitions: int = Field(
        default=0, ge=0, description="IVF partitions; 0 = about sqrt(rows)"
    )
    access_log: bool = Field(default=True, description="append served ids to <home>/access_log")
    access_log_flush_s: float = Field(default=1.0, gt=0)
    access_log_roll_s: float = Field(
        default=30.0, gt=0, description="start a new file after this long idle"
    )


class RunnerConfig(BaseModel):
    """Where flow tasks run (flows/runners.py): threads here, or a Dask / Ray cluster."""

    model_config = _SECTION
    kind: Literal["threads", "dask", "ray"] = Field(
        default="threads", description="task runner: threads, dask (prefect-dask), ray"
    )
    max_workers: int = Field(default=2, ge=1, description="threads, or local Dask workers")
    address: str = Field(
        default="", description="existing Dask scheduler / Ray cluster; empty = start a local one"
    )
    processes: bool = Field(default=True, description="local Dask cluster: worker processes")
    threads_per_worker: int = Field(default=1, ge=1, description="local Dask cluster")
    # Threads runner only. N > 0: a night whose partitions with new episodes hold at least N
    # episodes clusters and mines them in ``max_workers`` worker processes, with one DuckDB
    # writer in the flow's process (stages/consolidate_pool.py): the compute is Python under
    # the GIL, and threads kept ~1.3 of 2 cores busy at 1M. From 500k by default: at 1M the
    # first night took 49-60 s with it against 64-81 s in threads (the 1% night 33-44 s vs
    # 38-43), for the same CPU, the process tree at 1.9 GB (BENCHMARKS.md s34); below
    # that it is not measured to pay for the workers' start (~1.3 CPU s each, the stages'
    # imports), which outweighs a 100k night's gain (s31). 0 = never.
    processes_from_episodes: int = Field(
        default=500_000,
        ge=0,
        description="threads runner: episodes (in partitions with new ones) from which "
        "partitions are clustered and mined in worker processes; 0 = never",
    )


class StalenessConfig(BaseModel):
    """Taking back what is no longer true (stages/staleness): revisions, contests, outcomes."""

    model_config = _SECTION
    enabled: bool = Field(default=True, description="run the staleness stage in the nightly flow")
    outcome_min: int = Field(
        default=5, ge=1, description="reported outcomes of a procedure version before judging it"
    )
    outcome_z: float = Field(default=1.645, gt=0, description="z of the Wilson upper bound")
    outcome_threshold: float = Field(
        default=0.5, ge=0, le=1, description="deprecate when the success rate's upper bound < this"
    )
    canary_fraction: float = Field(
        default=0.0, ge=0, le=1, description="share of subjects a new version is served to first"
    )
    canary_successes: int = Field(
        default=5, ge=1, description="successes with no breach before a canary serves everyone"
    )


class ScheduleConfig(BaseModel):
    """Cron schedules ``memctl serve`` and prefect.yaml use, in the top-level ``timezone``."""

    model_config = _SECTION
    nightly_cron: str = Field(default="0 2 * * *", description="nightly consolidation")
    forgetting_cron: str = Field(
        default="30 3 * * *", description="forgetting; waits for consolidation's lease"
    )
    deletion_cron: str = Field(default="*/15 * * * *", description="queued user deletions")
    review_cron: str = Field(
        default="0 8 * * 1-5", description="open a promotion-review run per undecided batch"
    )

    @field_validator("nightly_cron", "forgetting_cron", "deletion_cron", "review_cron")
    @classmethod
    def _check_cron(cls, value: str) -> str:
        """Parsed here, so an invalid cron never reaches prefect.yaml or a deployment."""
        return check_cron(value)


class LeaseConfig(BaseModel):
    """One pipeline run per home at a time (memory_core/lease.py)."""

    model_config = _SECTION
    ttl_s: float = Field(
        default=120.0, gt=0, description="a holder that stops renewing loses it after this"
    )
    wait_s: float = Field(
        default=0.0, ge=0, description="how long a second run waits before giving up"
    )
    forgetting_wait_s: float = Field(
        default=7200.0, ge=0, description="how long forgetting waits for consolidation"
    )


class McpToken(BaseModel):
    """One HTTP caller of ``memctl mcp --http``: its bearer token, stored only as a hash.

    Generate a token with ``memctl mcp --new-token NAME --tenant T``, which prints the token
    once and the ``[[mcp.tokens]]`` entry to paste here.
    """

    model_config = _SECTION
    name: str = Field(min_length=1, max_length=100, description="who holds it (logs, audit)")
    sha256: str = Field(
        pattern=r"^[0-9a-f]{64}$", description="hex SHA-256 of the token; never the token"
    )
    tenant: str = Field(min_length=1, max_length=200, description="the only tenant it reaches")
    subject: str | None = Field(
        default=None, max_length=200, description="bound to this subject only (none = any)"
    )
    tools: list[str] = Field(
        default_factory=list, description="tools it may call; empty = every tool"
    )
    save_roles: list[Literal["agent", "tool", "user"]] = Field(
        default_factory=lambda: ["agent", "tool"],
        description="roles its saves may carry; 'user' only for a front-end relaying the "
        "user's own words",
    )


class McpConfig(BaseModel):
    """``memctl mcp``: the memory server agents reach over MCP (memory_core/mcp_server)."""

    model_config = _SECTION
    tenant: str = Field(default="", description="tenant of a stdio server; --tenant wins")
    save_roles: list[Literal["agent", "tool", "user"]] = Field(
        default_factory=lambda: ["agent", "tool"], description="roles a stdio caller may save as"
    )
    max_k: int = Field(default=50, ge=1, le=1000, description="largest k a caller may ask")
    max_budget_tokens: int = Field(default=16000, ge=1, description="largest token budget")
    save_retries: int = Field(
        default=8, ge=0, description="Lance commit-conflict retries of one save"
    )
    index_every: int = Field(
        default=50,
        ge=0,
        description="fold saved rows into the episodes' indices after this many saves "
        "(in the background; 0 = leave it to the nightly maintenance)",
    )
    tokens: list[McpToken] = Field(default_factory=list, description="HTTP callers")


class Settings(BaseSettings):
    """All of memctl's configuration; sections mirror configs/default.toml."""

    model_config = SettingsConfigDict(
        env_prefix="MEMCTL_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    home: Path = Field(default=Path("data"), description="where the embedded default lives")
    timezone: str = "UTC"
    stores: StoresConfig = Field(default_factory=StoresConfig)
    embed: EmbedConfig = Field(default_factory=EmbedConfig)
    ingest: IngestConfig = Field(default_factory=IngestConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    steps: StepsConfig = Field(default_factory=StepsConfig)
    claims: ClaimsConfig = Field(default_factory=ClaimsConfig)
    extract: ExtractConfig = Field(default_factory=ExtractConfig)
    score: ScoreConfig = Field(default_factory=ScoreConfig)
    review: ReviewConfig = Field(default_factory=ReviewConfig)
    forget: ForgetConfig = Field(default_factory=ForgetConfig)
    recall: RecallConfig = Field(default_factory=RecallConfig)
    runner: RunnerConfig = Field(default_factory=RunnerConfig)
    staleness: StalenessConfig = Field(default_factory=StalenessConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    lease: LeaseConfig = Field(default_factory=LeaseConfig)
    mcp: McpConfig = Field(default_factory=McpConfig)

    @field_validator("timezone")
    @classmethod
    def _check_timezone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            msg = f"unknown timezone {value!r}"
            raise ValueError(msg) from exc
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings)

    @property
    def lance_uri(self) -> str:
        return self.stores.lance_uri or str(self.home / "lance")

    @property
    def meta_path(self) -> Path:
        return Path(self.stores.meta_path) if self.stores.meta_path else self.home / "meta.duckdb"


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def load_settings(
    *, config_file: Path | None = None, home: Path | None = None, **overrides: Any
) -> Settings:
    """Build Settings; any invalid key raises ConfigError naming the key and the reason."""
    file_values: dict[str, Any] = {}
    path = config_file or (
        Path(os.environ["MEMCTL_CONFIG"]) if "MEMCTL_CONFIG" in os.environ else None
    )
    if path is not None:
        file_values = _read_toml(path)
    check_env_names(os.environ)
    # The file is the lowest layer; environment variables must beat it, so only keys that the
    # environment does not set are passed as init values (init would otherwise win).
    env_keys = {k[len("MEMCTL_") :].lower() for k in os.environ if k.startswith("MEMCTL_")}
    values = _strip_env_overridden(file_values, env_keys)
    values = _merge(values, overrides)
    if home is not None:
        values["home"] = home
    try:
        return Settings(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"]) or "config"
        reason = err["msg"].removeprefix("Value error, ")
        source = _env_source(err["loc"])
        raise ConfigError(key, reason + (f" (from {source})" if source else "")) from exc
    except SettingsError as exc:  # an env value that must be JSON (a list, a table) is not
        raise _env_json_error(exc) from exc


def _read_toml(path: Path) -> dict[str, Any]:
    """The file's values; ConfigError (one line) when it is missing, not UTF-8 or not TOML."""
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        msg = "config"
        raise ConfigError(msg, f"file {path} not found") from exc
    except OSError as exc:
        raise ConfigError(str(path), f"cannot be read: {exc.strerror or exc}") from exc
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        reason = f"not UTF-8 text (TOML must be): {exc.reason} at byte {exc.start}, line {line}"
        raise ConfigError(str(path), reason) from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), f"not valid TOML: {exc}") from exc
    except RecursionError as exc:  # arrays or tables nested thousands deep
        raise ConfigError(str(path), "not valid TOML: nested too deeply") from exc


# MEMCTL_ variables that are not settings: read directly by the code that needs them
NON_SETTING_ENV = frozenset(
    {"MEMCTL_CONFIG", "MEMCTL_LOG_FORMAT", "MEMCTL_LOG_LEVEL", "MEMCTL_KILL_AT", "MEMCTL_EVAL_DATA"}
)


def _known_env_names() -> tuple[set[str], set[str]]:
    """(exact names, prefixes of open tables) of every MEMCTL_ variable Settings reads."""
    exact: set[str] = set()
    prefixes: set[str] = set()
    for name, info in Settings.model_fields.items():
        top = f"MEMCTL_{name.upper()}"
        exact.add(top)
        section = info.annotation
        if isinstance(section, type) and issubclass(section, BaseModel):
            for sub, sub_info in section.model_fields.items():
                exact.add(f"{top}__{sub.upper()}")
                if getattr(sub_info.annotation, "__origin__", None) is dict:
                    prefixes.add(f"{top}__{sub.upper()}__")
    return exact, prefixes


def check_env_names(environ: Any) -> None:
    """Refuse a MEMCTL_ variable that no setting reads (a typo would be silently ignored)."""
    exact, prefixes = _known_env_names()
    for var in sorted(environ):
        upper = var.upper()
        if not upper.startswith("MEMCTL_") or upper in NON_SETTING_ENV or upper in exact:
            continue
        if any(upper.startswith(p) for p in prefixes):
            continue
        import difflib

        close = difflib.get_close_matches(upper, sorted(exact | NON_SETTING_ENV), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        msg = f"no setting reads this variable (a misspelt key?){hint} Unset it to go on"
        raise ConfigError(var, msg)


def _env_source(loc: tuple[Any, ...]) -> str | None:
    """The MEMCTL_ variable that set the value at ``loc``, if one did."""
    names = [str(p).upper() for p in loc if not isinstance(p, int)]
    for end in range(len(names), 0, -1):
        var = "MEMCTL_" + "__".join(names[:end])
        if any(k.upper() == var for k in os.environ):
            return var
    return None


def _json_valued(var: str) -> bool:
    """Whether pydantic-settings parses this variable's value as JSON: a whole section, or a
    list or table key of one (a plain string or number is taken as it is)."""
    parts = var.removeprefix("MEMCTL_").lower().split("__")
    info = Settings.model_fields.get(parts[0])
    if info is None:
        return False
    section = info.annotation
    if len(parts) == 1:
        return isinstance(section, type) and issubclass(section, BaseModel)
    if len(parts) > 2 or not (isinstance(section, type) and issubclass(section, BaseModel)):
        return False
    sub = section.model_fields.get(parts[1])
    return sub is not None and getattr(sub.annotation, "__origin__", None) in (list, dict)


def _env_json_error(exc: SettingsError) -> ConfigError:
    """pydantic-settings reads a list or table from the environment as JSON; name the variable
    whose value is not JSON, with an example."""
    import json
    import re

    match = re.search(r'field "(\w+)"', str(exc))
    section = f"MEMCTL_{match.group(1).upper()}" if match else "MEMCTL_"
    suspects = sorted(
        k for k in os.environ if k.upper().startswith(section) and _json_valued(k.upper())
    )
    for var in suspects:
        try:
            json.loads(os.environ[var])
        except ValueError:
            reason = (
                f"{os.environ[var][:80]!r} is not valid JSON; lists and tables are written as "
                'JSON in the environment, e.g. \'["low", "medium"]\' or \'{"k": "v"}\''
            )
            return ConfigError(var, reason)
    return ConfigError(", ".join(suspects) or section, f"cannot be read: {exc}")


def _strip_env_overridden(values: dict[str, Any], env_keys: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for section, value in values.items():
        if isinstance(value, dict):
            inner = {k: v for k, v in value.items() if f"{section}__{k}".lower() not in env_keys}
            if f"{section}".lower() not in env_keys:
                out[section] = inner
        elif section.lower() not in env_keys:
            out[section] = value
    return out
