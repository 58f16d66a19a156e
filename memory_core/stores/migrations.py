"""Versioned DuckDB schema. Append a new (version, statements) entry; never edit an old one.

Files written by an older memctl are migrated forward on open; a file from a newer memctl is
refused (``SchemaTooNew``) rather than guessed at.
"""

from __future__ import annotations

MIGRATIONS: list[tuple[int, list[str]]] = [
    (
        1,
        [
            """CREATE TABLE runs (
                run_id VARCHAR PRIMARY KEY, flow VARCHAR NOT NULL, started_at TIMESTAMPTZ,
                finished_at TIMESTAMPTZ, status VARCHAR, clock TIMESTAMPTZ,
                params JSON, summary JSON)""",
            """CREATE TABLE stage_ledger (
                stage VARCHAR NOT NULL, partition_key VARCHAR NOT NULL,
                input_hash VARCHAR NOT NULL, run_id VARCHAR, status VARCHAR,
                started_at TIMESTAMPTZ, finished_at TIMESTAMPTZ, result JSON,
                PRIMARY KEY (stage, partition_key, input_hash))""",
            """CREATE TABLE watermarks (
                tenant_id VARCHAR NOT NULL, namespace VARCHAR NOT NULL, stage VARCHAR NOT NULL,
                recorded_at TIMESTAMPTZ, run_id VARCHAR, updated_at TIMESTAMPTZ,
                PRIMARY KEY (tenant_id, namespace, stage))""",
            """CREATE TABLE lineage (
                derived_id VARCHAR NOT NULL, derived_kind VARCHAR NOT NULL,
                source_id VARCHAR NOT NULL, source_kind VARCHAR NOT NULL,
                source_hash VARCHAR, tenant_id VARCHAR, subject_id VARCHAR,
                created_at TIMESTAMPTZ, PRIMARY KEY (derived_id, source_id))""",
            "CREATE INDEX lineage_source ON lineage (source_id)",
            """CREATE TABLE audit_log (
                event_id VARCHAR PRIMARY KEY, logged_at TIMESTAMPTZ NOT NULL, run_id VARCHAR,
                actor VARCHAR, action VARCHAR NOT NULL, target VARCHAR, tenant_id VARCHAR,
                counts JSON, detail JSON)""",
            """CREATE TABLE quarantine (
                quarantine_id VARCHAR PRIMARY KEY, file VARCHAR, line_no INTEGER,
                episode_id VARCHAR, tenant_id VARCHAR, subject_id VARCHAR,
                errors JSON, raw VARCHAR, quarantined_at TIMESTAMPTZ)""",
            """CREATE TABLE embedding_cache (
                content_hash VARCHAR NOT NULL, embedding_version VARCHAR NOT NULL,
                vector FLOAT[] NOT NULL, created_at TIMESTAMPTZ,
                PRIMARY KEY (content_hash, embedding_version))""",
        ],
    ),
    (
        2,
        [
            """CREATE TABLE clusters (
                cluster_id VARCHAR PRIMARY KEY, tenant_id VARCHAR NOT NULL,
                namespace VARCHAR NOT NULL, centroid FLOAT[], size INTEGER, label VARCHAR,
                error_code VARCHAR, created_at TIMESTAMPTZ, updated_at TIMESTAMPTZ)""",
            """CREATE TABLE cluster_members (
                episode_id VARCHAR PRIMARY KEY, cluster_id VARCHAR NOT NULL,
                tenant_id VARCHAR NOT NULL, namespace VARCHAR NOT NULL, subject_id VARCHAR,
                distance DOUBLE, assigned_at TIMESTAMPTZ)""",
            "CREATE INDEX cluster_members_cluster ON cluster_members (cluster_id)",
            """CREATE TABLE candidates (
                candidate_id VARCHAR PRIMARY KEY, kind VARCHAR NOT NULL,
                tenant_id VARCHAR NOT NULL, subject_id VARCHAR, namespace VARCHAR NOT NULL,
                status VARCHAR NOT NULL, body JSON NOT NULL, content_hash VARCHAR,
                confidence DOUBLE, importance DOUBLE, scorer VARCHAR, reason VARCHAR,
                run_id VARCHAR, created_at TIMESTAMPTZ, updated_at TIMESTAMPTZ)""",
            """CREATE TABLE candidate_evidence (
                candidate_id VARCHAR NOT NULL, episode_id VARCHAR NOT NULL,
                role VARCHAR NOT NULL, subject_id VARCHAR,
                PRIMARY KEY (candidate_id, episode_id))""",
            "CREATE INDEX candidate_evidence_episode ON candidate_evidence (episode_id)",
        ],
    ),
    (
        3,
        [
            """CREATE TABLE review_batches (
                batch_id VARCHAR PRIMARY KEY, tenant_id VARCHAR NOT NULL,
                namespace VARCHAR NOT NULL, kind VARCHAR NOT NULL, status VARCHAR NOT NULL,
                item_count INTEGER, created_at TIMESTAMPTZ, expires_at TIMESTAMPTZ,
                decided_at TIMESTAMPTZ, reviewer VARCHAR, reason VARCHAR, flow_run_id VARCHAR)""",
            """CREATE TABLE review_items (
                batch_id VARCHAR NOT NULL, candidate_id VARCHAR NOT NULL, decision VARCHAR,
                edits JSON, reason VARCHAR, reviewer VARCHAR, decided_at TIMESTAMPTZ,
                PRIMARY KEY (batch_id, candidate_id))""",
            """CREATE TABLE score_cache (
                content_hash VARCHAR NOT NULL, model VARCHAR NOT NULL,
                prompt_version VARCHAR NOT NULL, candidate_id VARCHAR, score DOUBLE,
                body JSON, created_at TIMESTAMPTZ,
                PRIMARY KEY (content_hash, model, prompt_version))""",
            """CREATE TABLE llm_batches (
                batch_id VARCHAR PRIMARY KEY, run_id VARCHAR, status VARCHAR,
                custom_ids JSON, created_at TIMESTAMPTZ, ended_at TIMESTAMPTZ,
                collected_at TIMESTAMPTZ)""",
            """CREATE TABLE llm_ledger (
                entry_id VARCHAR PRIMARY KEY, run_id VARCHAR, logged_at TIMESTAMPTZ, mode VARCHAR,
                batch_id VARCHAR, requests INTEGER, input_tokens BIGINT, output_tokens BIGINT,
                cache_read_tokens BIGINT, cache_write_tokens BIGINT, cost_usd DOUBLE,
                fallbacks INTEGER, detail JSON)""",
            """CREATE TABLE deletion_requests (
                request_id VARCHAR PRIMARY KEY, kind VARCHAR NOT NULL, target VARCHAR NOT NULL,
                tenant_id VARCHAR, requested_at TIMESTAMPTZ, status VARCHAR,
                done_at TIMESTAMPTZ, receipt_id VARCHAR)""",
            """CREATE TABLE receipts (
                receipt_id VARCHAR PRIMARY KEY, kind VARCHAR NOT NULL, issued_at TIMESTAMPTZ,
                run_id VARCHAR, body JSON)""",
            """CREATE TABLE access_stats (
                record_id VARCHAR PRIMARY KEY, table_name VARCHAR, tenant_id VARCHAR,
                subject_id VARCHAR, hits BIGINT, last_access TIMESTAMPTZ)""",
        ],
    ),
    (
        4,
        [
            # staleness: current revision of each corpus source, and what the nightly made of it
            """CREATE TABLE source_revisions (
                source_id VARCHAR PRIMARY KEY, revision VARCHAR NOT NULL,
                changed_at TIMESTAMPTZ NOT NULL, deleted BOOLEAN NOT NULL,
                updated_at TIMESTAMPTZ, handled_at TIMESTAMPTZ, receipt_id VARCHAR)""",
            # contradicting statements already seen per record, and how a reviewer settled them
            """CREATE TABLE contest_evidence (
                record_id VARCHAR NOT NULL, episode_id VARCHAR NOT NULL, tenant_id VARCHAR,
                detected_at TIMESTAMPTZ, settled_at TIMESTAMPTZ, settlement VARCHAR,
                PRIMARY KEY (record_id, episode_id))""",
            # procedure versions served to a fraction of subjects first
            """CREATE TABLE canaries (
                procedure_id VARCHAR PRIMARY KEY, tenant_id VARCHAR, namespace VARCHAR,
                name VARCHAR, version VARCHAR, stable_id VARCHAR, fraction DOUBLE,
                started_at TIMESTAMPTZ, status VARCHAR, decided_at TIMESTAMPTZ, detail JSON)""",
        ],
    ),
    (
        5,
        [
            # one row per lease name: which run works on this home, and until when
            """CREATE TABLE leases (
                name VARCHAR PRIMARY KEY, holder VARCHAR NOT NULL, pid INTEGER,
                host VARCHAR, flow VARCHAR, acquired_at TIMESTAMPTZ, renewed_at TIMESTAMPTZ,
                expires_at TIMESTAMPTZ NOT NULL)""",
        ],
    ),
    (
        6,
        [
            # fact extraction (stages/extract): sessions done, under which model and prompt
            """CREATE TABLE extract_sessions (
                tenant_id VARCHAR NOT NULL, namespace VARCHAR NOT NULL,
                session_key VARCHAR NOT NULL, content_hash VARCHAR NOT NULL,
                model VARCHAR NOT NULL, prompt_version VARCHAR NOT NULL, custom_id VARCHAR,
                facts INTEGER, run_id VARCHAR, extracted_at TIMESTAMPTZ,
                PRIMARY KEY (tenant_id, namespace, session_key))""",
            # extracted facts: tentative evidence for the claims path, never read by agents
            """CREATE TABLE extracted_facts (
                fact_id VARCHAR PRIMARY KEY, tenant_id VARCHAR NOT NULL,
                namespace VARCHAR NOT NULL, subject_id VARCHAR NOT NULL,
                session_key VARCHAR NOT NULL, predicate VARCHAR NOT NULL, object VARCHAR NOT NULL,
                kind VARCHAR NOT NULL, valid_from TIMESTAMPTZ, valid_to TIMESTAMPTZ,
                evidence JSON NOT NULL, self_evidence JSON NOT NULL, authority VARCHAR NOT NULL,
                speaker_role VARCHAR, importance INTEGER, source VARCHAR NOT NULL,
                custom_id VARCHAR, model VARCHAR, prompt_version VARCHAR,
                group_predicate VARCHAR, group_object VARCHAR,
                run_id VARCHAR, created_at TIMESTAMPTZ)""",
            "CREATE INDEX extracted_facts_scope ON extracted_facts (tenant_id, namespace)",
        ],
    ),
    (
        7,
        [
            # Stage-ledger partition keys were "tenant/namespace", which two partitions can
            # share (tenant "team/a" + namespace "b", tenant "team" + namespace "a/b"): one was
            # then skipped forever. They become JSON arrays (context.Partition.key). A key
            # with one "/" splits one way; a key with more is ambiguous and is dropped: that
            # partition is consolidated again, which converges (the ledger only skips work).
            """DELETE FROM stage_ledger WHERE stage = 'consolidate'
                AND length(partition_key) - length(replace(partition_key, '/', '')) <> 1""",
            """INSERT INTO stage_ledger
                SELECT stage, to_json([split_part(partition_key, '/', 1),
                                       split_part(partition_key, '/', 2)])::VARCHAR,
                       input_hash, run_id, status, started_at, finished_at, result
                FROM stage_ledger WHERE stage = 'consolidate'
                ON CONFLICT DO NOTHING""",
            """DELETE FROM stage_ledger WHERE stage = 'consolidate'
                AND NOT starts_with(partition_key, '[')""",
        ],
    ),
    (
        8,
        [
            # Mining state per unit (stages/mine/units.py): the fingerprint of the unit's input
            # when it was last mined and what that produced, so a night re-mines only units
            # whose input changed. Derived data: deleting a row makes the unit be mined again.
            """CREATE TABLE mine_units (
                tenant_id VARCHAR NOT NULL, namespace VARCHAR NOT NULL,
                unit_key VARCHAR NOT NULL, fingerprint VARCHAR NOT NULL,
                produced JSON NOT NULL, run_id VARCHAR, mined_at TIMESTAMPTZ,
                PRIMARY KEY (tenant_id, namespace, unit_key))""",
        ],
    ),
    (
        9,
        [
            # The content hash each evidence row's episode had when cited: a mined candidate's
            # evidence pins live here instead of in its body (stores/candidates.py,
            # PINS_IN_EVIDENCE), so a night that adds one episode to a candidate appends one
            # row instead of rewriting every pin. Rows written before have NULL here; their
            # candidates' bodies still hold their pins.
            "ALTER TABLE candidate_evidence ADD COLUMN content_hash VARCHAR",
        ],
    ),
    (
        10,
        [
            # candidate_evidence without its primary key and episode index: the upsert writes
            # only the difference to a candidate's stored rows (stores/candidates.py,
            # _replace_evidence), which keeps one row per (candidate, episode) by itself. Each
            # write through the key made DuckDB load the key's index from disk (a night's
            # candidate ids span the whole 1.2M-key index at 1M episodes), and the episode
            # index was read by nothing (its readers join or filter, which scan). DuckDB
            # cannot drop a primary key in place, so the table is copied.
            """CREATE TABLE candidate_evidence_unkeyed (
                candidate_id VARCHAR NOT NULL, episode_id VARCHAR NOT NULL,
                role VARCHAR NOT NULL, subject_id VARCHAR, content_hash VARCHAR)""",
            """INSERT INTO candidate_evidence_unkeyed
                SELECT candidate_id, episode_id, role, subject_id, content_hash
                FROM candidate_evidence ORDER BY candidate_id, episode_id""",
            "DROP INDEX candidate_evidence_episode",
            "DROP TABLE candidate_evidence",
            "ALTER TABLE candidate_evidence_unkeyed RENAME TO candidate_evidence",
        ],
    ),
    (
        11,
        [
            # What a candidate's importance score stands for (``Candidate.score_basis``): its
            # content and its evidence in powers of two. The miner's upsert keeps a scored
            # candidate's score while this holds; rows written before have NULL, so their
            # next change re-queues them for scoring once, as every change did before.
            "ALTER TABLE candidates ADD COLUMN score_basis VARCHAR",
        ],
    ),
    (
        12,
        [
            # What a user deletion looks for besides the target's name and ids (its verbatim
            # texts, their hashes, the identifying values only it gave), kept from before the
            # first destructive step until the receipt: a rerun after a crash no longer finds
            # them in the deleted rows, and must still check them.
            """CREATE TABLE deletion_needles (
                request_id VARCHAR NOT NULL, kind VARCHAR NOT NULL, value VARCHAR NOT NULL)""",
        ],
    ),
]
