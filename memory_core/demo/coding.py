"""Coding-agent problems, noise conditions, preferences and small talk for the demo data set.

Same shape as :mod:`memory_core.demo.it_support`: one error code per problem, 2-3 root causes,
each with its own ordered fix, plus distractor patterns the trap generator may use.
"""

from __future__ import annotations

from memory_core.demo.scenario import Cause, Problem

__all__ = [
    "CHATTER",
    "DEPENDENCY_CONFLICT",
    "FLAKY_TEST",
    "LINT_ERRORS",
    "MIGRATION_FAILURE",
    "NAMESPACE",
    "NOISE",
    "PREFERENCES",
    "SEGFAULT_BUILD",
]

NAMESPACE = "coding"

NOISE: dict[str, tuple[str, ...]] = {
    "os": ("ubuntu-22.04", "macos-14", "debian-12", "windows-11"),
    "python_version": ("3.10", "3.11", "3.12"),
    "tool_version": ("codeagent-0.9.4", "codeagent-1.0.0", "codeagent-1.0.2"),
    "ci": ("github-actions", "gitlab-ci", "local"),
    "region": ("eu-west", "us-east", "ap-south"),
}

FLAKY_TEST = Problem(
    key="flaky_test",
    namespace=NAMESPACE,
    error_code="pytest-exit-1",
    goals=(
        "Flaky test fails intermittently in CI",
        "test_checkout_total passes locally but fails on CI about one run in five",
        "Intermittent assertion failure in the integration suite",
        "CI is red again because of a flaky test",
        "Fix the nondeterministic failure in the orders test module",
    ),
    causes=(
        Cause(
            "test_order_dependent",
            ("run failing test in isolation", "add fixture teardown", "rerun test suite"),
            "The test passes alone and fails after test_refund, which leaves rows behind.",
        ),
        Cause(
            "uses_real_clock",
            ("freeze time with fake clock", "rerun test suite"),
            "The assertion compares against datetime.now() across a second boundary.",
        ),
        Cause(
            "network_in_test",
            ("mock external http calls", "rerun test suite"),
            "The test calls the sandbox payment API, which times out under load.",
        ),
    ),
    distractors=(
        ("add retry decorator", "rerun test suite"),
        ("increase test timeout", "rerun test suite"),
        ("mark test as xfail", "rerun test suite"),
        ("clear pytest cache", "rerun test suite"),
    ),
    escalation=("collect ci artifacts", "open issue for test owner"),
    resolved_note="Fifty consecutive CI runs passed.",
    failure_note="The test failed again on the next CI run.",
)

DEPENDENCY_CONFLICT = Problem(
    key="dependency_conflict",
    namespace=NAMESPACE,
    error_code="ResolutionImpossible",
    goals=(
        "Dependency conflict: pip cannot resolve versions",
        "Install fails with ResolutionImpossible after bumping requests",
        "Resolver error when adding the new SDK to the project",
        "Package versions conflict and the build cannot install requirements",
    ),
    causes=(
        Cause(
            "transitive_pin_conflict",
            ("relax version pin in requirements", "regenerate lockfile", "reinstall dependencies"),
            "urllib3<2 is pinned directly while the new SDK needs urllib3>=2.",
        ),
        Cause(
            "lockfile_stale",
            ("delete lockfile", "regenerate lockfile", "reinstall dependencies"),
            "The lockfile was generated before the last merge and lists removed packages.",
        ),
    ),
    distractors=(
        ("upgrade pip", "reinstall dependencies"),
        ("create fresh virtualenv", "reinstall dependencies"),
        ("install with no-deps flag", "reinstall dependencies"),
    ),
    escalation=("collect resolver output", "ask platform team about pins"),
    resolved_note="Dependencies install cleanly and the import check passes.",
    failure_note="The resolver still reports ResolutionImpossible.",
)

SEGFAULT_BUILD = Problem(
    key="segfault_build",
    namespace=NAMESPACE,
    error_code="SIGSEGV",
    goals=(
        "Segfault in build: native extension crashes with SIGSEGV",
        "Build step dies with exit code 139 (segmentation fault)",
        "Compiling the C extension segfaults on CI",
        "Import of the native module crashes the interpreter",
    ),
    causes=(
        Cause(
            "abi_mismatch",
            ("clear build cache", "rebuild native extensions"),
            "The cached wheel was built against a different NumPy ABI.",
        ),
        Cause(
            "compiler_outdated",
            ("upgrade compiler toolchain", "rebuild native extensions"),
            "gcc 9 miscompiles the vectorised loop; newer toolchains do not.",
        ),
    ),
    distractors=(
        ("increase stack size", "rebuild native extensions"),
        ("disable optimisations", "rebuild native extensions"),
        ("pin older numpy", "rebuild native extensions"),
    ),
    escalation=("collect core dump", "open issue with extension maintainers"),
    resolved_note="The build completes and the extension imports.",
    failure_note="The build still segfaults.",
)

MIGRATION_FAILURE = Problem(
    key="migration_failure",
    namespace=NAMESPACE,
    error_code="42701",
    goals=(
        "Database migration fails: duplicate column (42701)",
        "alembic upgrade head aborts with DuplicateColumn",
        "Deploy blocked because the schema migration errors out",
        "Migration step in the release pipeline fails with 42701",
    ),
    causes=(
        Cause(
            "schema_drift",
            ("stamp migration head", "rerun migrations"),
            "The column was added by hand in staging before the migration ran.",
        ),
        Cause(
            "multiple_heads",
            ("merge migration heads", "rerun migrations"),
            "Two feature branches each added a migration with the same parent.",
        ),
    ),
    distractors=(
        ("drop and recreate database", "rerun migrations"),
        ("downgrade one revision", "rerun migrations"),
        ("edit migration to skip column", "rerun migrations"),
    ),
    escalation=("collect migration history", "page database on-call"),
    resolved_note="Migrations reach head and the app starts.",
    failure_note="The migration still fails with 42701.",
)

LINT_ERRORS = Problem(
    key="lint_errors",
    namespace=NAMESPACE,
    error_code="lint-failed",
    goals=(
        "Lint errors block the merge request",
        "CI lint job fails with hundreds of style errors",
        "Pre-commit hooks reject the commit with lint failures",
        "Fix lint failures so the pipeline goes green",
    ),
    causes=(
        Cause(
            "formatter_not_run",
            ("run code formatter", "rerun linter"),
            "Most errors are line-length and quote-style issues the formatter fixes.",
        ),
        Cause(
            "lint_config_outdated",
            ("update lint config to new ruleset", "rerun linter"),
            "The linter was upgraded and the config uses renamed rule codes.",
        ),
    ),
    distractors=(
        ("add noqa comments", "rerun linter"),
        ("disable lint job", "rerun linter"),
        ("pin older linter version", "rerun linter"),
    ),
    escalation=("collect lint report", "ask tech lead about rules"),
    resolved_note="The lint job passes.",
    failure_note="The lint job still fails.",
)

PREFERENCES: dict[str, tuple[str, ...]] = {
    "preferred_language": ("Python", "Go", "TypeScript", "Rust"),
    "preferred_editor": ("VS Code", "Neovim", "PyCharm", "Emacs"),
    "timezone": ("Europe/Berlin", "America/Los_Angeles", "Asia/Kolkata", "Europe/London"),
    "code_review_style": ("summary first", "inline comments only", "one comment per issue"),
}

CHATTER: dict[str, tuple[str, ...]] = {
    "system": (
        "Nightly build #{n} finished in 14 minutes.",
        "Dependabot opened {n} pull requests this week.",
        "Coverage report published: 81.{n}% line coverage.",
        "Container registry garbage collection freed {n} GB.",
    ),
    "user": (
        "What does the release checklist say about changelogs?",
        "Who owns the payments service these days?",
        "Can you explain what the staging deploy job does?",
        "Is the main branch protected against force pushes?",
        "Where are the architecture decision records kept?",
    ),
    "agent": (
        "Summarised the open pull requests for {subject}.",
        "Explained the branching model to {subject}.",
        "Linked {subject} to the service ownership page.",
        "Answered {subject}'s question about the code owners file.",
    ),
}
