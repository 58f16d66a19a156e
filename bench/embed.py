"""MiniLM backends side by side (issue 19): texts/s and LoCoMo retrieval, in ONE run; prints JSON.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/embed.py [--data FILE] [--texts 2000] [--reps 3]
        [--cache-dir DIR]

Speed: the first ``--texts`` LoCoMo turns (real short texts) are embedded by each backend
(torch = sentence-transformers today, onnx = the same weights on ONNX Runtime, onnx-int8 =
dynamically quantised), repetitions interleaved so the machine's load hits every backend alike;
the median texts/s per backend and its ratio to torch are reported with the load average
before and after. Quality: every LoCoMo turn and question is embedded by each backend and each
question ranks its own conversation's turns by cosine (the vector leg alone, the strictest test
of the embedder); QA evidence recall@k is ``memory_core.eval.metrics.recall_at_k`` over the
questions with evidence. Also the cosine between each backend's turn vectors and torch's.
The ONNX export (once, cached) happens before any timing; its cost is reported separately.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from memory_core.embed import BACKENDS, MiniLMEmbedder
from memory_core.eval.locomo import convert_locomo, load_locomo
from memory_core.eval.metrics import recall_at_k

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo_5conv.json"
KS = (1, 5, 10, 20)


def _recall(emb: MiniLMEmbedder, conversion, turn_vecs: np.ndarray) -> dict[str, float | None]:
    ids = [e["episode_id"] for e in conversion.episodes]
    tenants = np.array([e["tenant_id"] for e in conversion.episodes])
    questions = [q for q in conversion.questions if q.evidence_ids]
    qvecs = emb.embed([q.question for q in questions])
    ranked = []
    for q, qv in zip(questions, qvecs, strict=True):
        rows = np.flatnonzero(tenants == q.conversation_id)
        order = rows[np.argsort(-(turn_vecs[rows] @ qv), kind="stable")]
        ranked.append([ids[i] for i in order[: max(KS)]])
    relevant = [q.evidence_ids for q in questions]
    return {f"recall@{k}": recall_at_k(ranked, relevant, k) for k in KS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--cache-dir", default="")
    args = parser.parse_args(argv)

    load_before = os.getloadavg()
    conversion = convert_locomo(load_locomo(args.data))
    turns = [e["text"] for e in conversion.episodes]
    speed_texts = turns[: args.texts]

    embedders, setup = {}, {}
    for backend in BACKENDS:
        start = time.perf_counter()
        emb = MiniLMEmbedder(args.batch_size, backend=backend, cache_dir=args.cache_dir)
        setup[backend] = {"load_s": round(time.perf_counter() - start, 2), "exported": emb.exported}
        emb.embed(speed_texts[:64])  # warm-up: allocator, thread pools, kernels
        embedders[backend] = emb

    times: dict[str, list[float]] = {b: [] for b in BACKENDS}
    head: dict[str, np.ndarray] = {}
    for _ in range(args.reps):
        for backend, emb in embedders.items():
            start = time.perf_counter()
            head[backend] = emb.embed(speed_texts)
            times[backend].append(time.perf_counter() - start)

    # The timed texts are the first turns: reuse their vectors, embed only the rest.
    rest = turns[len(speed_texts) :]
    vectors = {b: np.vstack([head[b], emb.embed(rest)]) for b, emb in embedders.items()}
    result: dict[str, object] = {
        "command": "bench/embed.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "texts": len(speed_texts),
        "reps": args.reps,
        "batch_size": args.batch_size,
        "cores": os.cpu_count(),
        "setup": setup,
        "backends": {},
    }
    median_torch = len(speed_texts) / statistics.median(times["torch"])
    for backend, emb in embedders.items():
        rate = len(speed_texts) / statistics.median(times[backend])
        cos = (vectors[backend] * vectors["torch"]).sum(axis=1)
        result["backends"][backend] = {
            "embedding_version": emb.version,
            "texts_per_s_median": round(rate, 1),
            "texts_per_s_runs": [round(len(speed_texts) / t, 1) for t in times[backend]],
            "speedup_vs_torch": round(rate / median_torch, 2),
            "cos_to_torch_min": round(float(cos.min()), 4),
            "cos_to_torch_mean": round(float(cos.mean()), 5),
            "locomo_vector_leg": _recall(emb, conversion, vectors[backend]),
        }
    result["loadavg_before"] = [round(x, 2) for x in load_before]
    result["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
