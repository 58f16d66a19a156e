"""Semantic memory from raw conversations: Claude extracts atomic facts, code decides.

For episodes with text and no ``claims``, grouped by session, Claude returns atomic facts with
the turns that support them (structured output, Message Batches, one cached rubric for several
sessions). Code then enforces what the model cannot be trusted with -- evidence must be turns
of the request, authority comes from who said it -- and the facts enter the claims path
(``stages/mine``) as tentative evidence: a fact becomes a candidate only with enough distinct
evidence, or as one explicit, important statement of the user about themself.

    prompt.py      rubric, the request's user message, ExtractAnswer (validated answer)
    plan.py        which sessions, packed into which requests (custom_id = request hash)
    rules.py       evidence ids, subject, authority, times: enforced per fact
    merge.py       paraphrases of one subject merge (embedding similarity)
    replay.py      recorded answers (JSONL by custom_id) through the same path
    stage.py       extract_facts: plan, resume, cache, budget, batch or replay, write, merge
    statements.py  extracted facts as claims-path statements, and the proposal rule
"""

from memory_core.stages._exports import lazy_exports

# lazy (PEP 562): the claims path (stages/mine) imports ``statements`` on every consolidation,
# and an eager import here would load the anthropic SDK (~2 CPU s, +45 MB) into every night
__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "prompt": ["ExtractAnswer", "ExtractedFact", "prompt_version"],
        "replay": ["Replay", "load_replay"],
        "stage": ["NO_KEY_MESSAGE", "REPLAY_LABEL", "ExtractResult", "extract_facts"],
    },
)
