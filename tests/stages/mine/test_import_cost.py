"""Consolidation (cluster + mine) must not load the anthropic SDK: it costs ~2 CPU s and ~45 MB
in every process that only clusters and mines (bench/consolidate.py measured it)."""

from __future__ import annotations

from tests.kit.imports import packages_imported


def test_cluster_and_mine_import_without_the_sdk():
    code = (
        "import memory_core.stages.cluster.stage, memory_core.stages.mine.stage\n"
        "from memory_core.stages.extract.statements import proposal_rule\n"
    )
    assert packages_imported(code, ["anthropic"]) == []


def test_the_extract_package_still_exports_its_names_and_schema():
    from memory_core.config import ExtractConfig
    from memory_core.stages import extract
    from memory_core.stages.extract import prompt

    assert extract.extract_facts.__name__ == "extract_facts"
    assert prompt.answer_schema() is prompt.answer_schema()  # built once
    assert prompt.answer_schema()["type"] == "object"
    assert prompt.prompt_fingerprint() in extract.prompt_version(ExtractConfig())
