"""The store's schema: every table, its primary key (content keys, so a rerun never duplicates).

Bump `SCHEMA_VERSION` when a table changes shape, and add the step that migrates a store of the previous
version (`migrations.py`; a new table alone needs neither: `CREATE TABLE IF NOT EXISTS` adds it).

`traces.reasoning` is stored uncompressed: DuckDB picks ZSTD for segments of long strings (average
>= 4,096 characters), and reading any trace's text then decompresses the vectors around it. A resume
plan reads the text of a few hundred traces of a cell per shard; on the paper-scale store that took
86 ms per shard with ZSTD and 11 ms uncompressed (docs/decisions.md "Store", docs/reports.md "Scale"),
for a column ~4.6x larger there. Stores created before keep the compression DuckDB chose (same shape,
same version).

`step_events` (the step_events stage, docs/step_events.md) is written only by `store.step_events.replace_step_events`,
which deletes a pair's rows and inserts its new ones in one transaction. Its key's index costs time
and room (inserting 5.8 M such rows, the paper-scale store's count, in commits of 200k: 7.9 s with it,
3.6 s without; 665 MB on disk against 208 MB), and is kept all the same: every table has a key, which
the generic copies rely on (`scratch.scratch_copy`'s INSERT OR IGNORE refuses a table without one).

The `study_*` tables (human studies, docs/study.md "Tables") are added the same way, without a version
bump: written by `store.study` only. A study's design (`studies`, `study_items`, `study_participants`,
`study_assignments`) is written once, in one transaction; `study_answers` holds one answer per
(participant, item), its key refusing a second; a participant's position is the count of their answers.
`study_participants` keeps the SHA-256 of each token, never a token (`legival_core/study/links.py`).
`study_grades` (the `study` stage, docs/study.md "Analysis") holds one grade per answer, by the grader
version in `grader_version` (`<dataset>@<version>`): a grader bump replaces the row.
"""

from __future__ import annotations

SCHEMA_VERSION = "2"

ROLLOUT_COLUMNS = """
    trace_id VARCHAR NOT NULL, student_key VARCHAR NOT NULL, k INTEGER NOT NULL,
    sample INTEGER NOT NULL, m INTEGER NOT NULL, bin INTEGER NOT NULL, status VARCHAR NOT NULL,
    correct BOOLEAN, forced BOOLEAN NOT NULL, extracted VARCHAR, grade_status VARCHAR,
    continuation VARCHAR, forced_continuation VARCHAR, prompt_tokens INTEGER,
    completion_tokens INTEGER, prefill_computed INTEGER, prefill_cached INTEGER,
    finish_reason VARCHAR, created_at TIMESTAMP DEFAULT current_timestamp,
    PRIMARY KEY (trace_id, student_key, k, sample));"""
"""The transfer engine's rows: a student's rollouts (`rollouts`) and early answers (`early_answers`,
docs/transfer.md "Early answering"), one shape for both."""

DDL = """
CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE IF NOT EXISTS problems (
    dataset VARCHAR NOT NULL, problem_id VARCHAR NOT NULL, question VARCHAR NOT NULL,
    gold VARCHAR NOT NULL, choices VARCHAR, meta VARCHAR,
    PRIMARY KEY (dataset, problem_id));
CREATE TABLE IF NOT EXISTS traces (
    trace_id VARCHAR PRIMARY KEY, teacher VARCHAR NOT NULL, dataset VARCHAR NOT NULL,
    problem_id VARCHAR NOT NULL, reasoning VARCHAR NOT NULL USING COMPRESSION uncompressed,
    answer_text VARCHAR NOT NULL, truncated BOOLEAN NOT NULL, source_correct BOOLEAN, source_file VARCHAR, source_line INTEGER,
    provenance VARCHAR, ingested_at TIMESTAMP DEFAULT current_timestamp);
CREATE TABLE IF NOT EXISTS grades (
    trace_id VARCHAR NOT NULL, grader VARCHAR NOT NULL, extracted VARCHAR, correct BOOLEAN NOT NULL,
    status VARCHAR NOT NULL, groups_correct INTEGER,
    PRIMARY KEY (trace_id, grader));
CREATE TABLE IF NOT EXISTS steps (
    trace_id VARCHAR NOT NULL, segmenter VARCHAR NOT NULL, idx INTEGER NOT NULL,
    start_char INTEGER NOT NULL, end_char INTEGER NOT NULL,
    PRIMARY KEY (trace_id, segmenter, idx));
CREATE TABLE IF NOT EXISTS step_counts (
    trace_id VARCHAR NOT NULL, segmenter VARCHAR NOT NULL, m INTEGER NOT NULL,
    PRIMARY KEY (trace_id, segmenter));
CREATE TABLE IF NOT EXISTS step_similarity (
    trace_id VARCHAR NOT NULL, model VARCHAR NOT NULL, segmenter VARCHAR NOT NULL,
    idx INTEGER NOT NULL, max_prev_cos DOUBLE NOT NULL,
    PRIMARY KEY (trace_id, model, segmenter, idx));
CREATE TABLE IF NOT EXISTS sentence_embeddings (
    model VARCHAR NOT NULL, sentence_hash VARCHAR NOT NULL, dim INTEGER NOT NULL, vector BLOB NOT NULL,
    PRIMARY KEY (model, sentence_hash));
CREATE TABLE IF NOT EXISTS trace_metrics (
    trace_id VARCHAR NOT NULL, metric VARCHAR NOT NULL, params VARCHAR NOT NULL,
    code_version VARCHAR NOT NULL, value DOUBLE, method VARCHAR, status VARCHAR NOT NULL,
    detail VARCHAR,
    PRIMARY KEY (trace_id, metric, params, code_version));
CREATE TABLE IF NOT EXISTS students (
    student_key VARCHAR PRIMARY KEY, name VARCHAR NOT NULL, model VARCHAR NOT NULL,
    decoding VARCHAR NOT NULL, prompt_version VARCHAR NOT NULL, profile VARCHAR NOT NULL);
CREATE TABLE IF NOT EXISTS rollouts (<ROLLOUT_COLUMNS>
CREATE TABLE IF NOT EXISTS early_answers (<ROLLOUT_COLUMNS>
CREATE TABLE IF NOT EXISTS judge_results (
    trace_id VARCHAR NOT NULL, judge_key VARCHAR NOT NULL, judge VARCHAR NOT NULL,
    model VARCHAR NOT NULL, prompt_version VARCHAR NOT NULL, status VARCHAR NOT NULL,
    m INTEGER NOT NULL, flagged_steps VARCHAR, fraction DOUBLE, backtracking_detected BOOLEAN,
    confidence DOUBLE, final_answer VARCHAR, raw_json VARCHAR, reason VARCHAR,
    dropped_out_of_range INTEGER, retries INTEGER, input_tokens INTEGER, output_tokens INTEGER,
    created_at TIMESTAMP DEFAULT current_timestamp,
    PRIMARY KEY (trace_id, judge_key));
CREATE TABLE IF NOT EXISTS generations (
    cache_key VARCHAR PRIMARY KEY, model VARCHAR NOT NULL, teacher VARCHAR NOT NULL,
    dataset VARCHAR NOT NULL, problem_id VARCHAR NOT NULL, prompt_hash VARCHAR NOT NULL,
    decoding VARCHAR NOT NULL, text VARCHAR NOT NULL, reasoning_content VARCHAR,
    finish_reason VARCHAR NOT NULL, prompt_tokens INTEGER, completion_tokens INTEGER,
    created_at TIMESTAMP DEFAULT current_timestamp);
CREATE TABLE IF NOT EXISTS monitor_results (
    item_key VARCHAR PRIMARY KEY, supervisor_key VARCHAR NOT NULL, supervisor VARCHAR NOT NULL,
    trace_id VARCHAR NOT NULL, teacher VARCHAR NOT NULL, dataset VARCHAR NOT NULL,
    problem_id VARCHAR NOT NULL, condition VARCHAR NOT NULL, label_incorrect BOOLEAN NOT NULL,
    predicted_incorrect BOOLEAN, status VARCHAR NOT NULL, sabotage_kind VARCHAR, sabotage_step INTEGER,
    detail VARCHAR, response VARCHAR, prompt_tokens INTEGER,
    created_at TIMESTAMP DEFAULT current_timestamp);
CREATE TABLE IF NOT EXISTS judge_batches (
    batch_name VARCHAR PRIMARY KEY, judge_key VARCHAR NOT NULL, trace_ids VARCHAR NOT NULL,
    state VARCHAR NOT NULL, submitted_at TIMESTAMP DEFAULT current_timestamp);
CREATE TABLE IF NOT EXISTS runs (
    run_id VARCHAR PRIMARY KEY, seq INTEGER NOT NULL, spec_name VARCHAR NOT NULL, spec_hash VARCHAR NOT NULL,
    spec_path VARCHAR, teachers VARCHAR, started_at TIMESTAMP NOT NULL, ended_at TIMESTAMP NOT NULL,
    flow_run_id VARCHAR, ui_url VARCHAR, counts VARCHAR NOT NULL, versions VARCHAR NOT NULL,
    inputs VARCHAR NOT NULL, n_resamples INTEGER NOT NULL, seed INTEGER);
CREATE TABLE IF NOT EXISTS unit_failures (
    stage VARCHAR NOT NULL, unit_key VARCHAR NOT NULL, trace_id VARCHAR, teacher VARCHAR, dataset VARCHAR,
    code_version VARCHAR NOT NULL, reason VARCHAR NOT NULL, failed_at TIMESTAMP DEFAULT current_timestamp,
    PRIMARY KEY (stage, unit_key));
CREATE TABLE IF NOT EXISTS stage_failures (
    stage VARCHAR NOT NULL, job VARCHAR NOT NULL, reason VARCHAR NOT NULL,
    failed_at TIMESTAMP DEFAULT current_timestamp, PRIMARY KEY (stage, job));
CREATE TABLE IF NOT EXISTS transfer_timings (
    run_id VARCHAR NOT NULL, source VARCHAR NOT NULL, teacher VARCHAR NOT NULL, dataset VARCHAR NOT NULL,
    student VARCHAR NOT NULL, student_key VARCHAR NOT NULL, batch INTEGER NOT NULL,
    model VARCHAR NOT NULL, backend VARCHAR NOT NULL, dtype VARCHAR NOT NULL, accelerator VARCHAR NOT NULL,
    device VARCHAR NOT NULL, host VARCHAR NOT NULL, engines INTEGER NOT NULL,
    chunks INTEGER NOT NULL, rollouts INTEGER NOT NULL, forced INTEGER NOT NULL, prefill DOUBLE NOT NULL,
    decode_steps DOUBLE NOT NULL, decode DOUBLE NOT NULL, context DOUBLE NOT NULL, compute_s DOUBLE NOT NULL,
    load_s DOUBLE NOT NULL, load_started DOUBLE, shard_started DOUBLE NOT NULL, committed DOUBLE NOT NULL,
    PRIMARY KEY (run_id, teacher, dataset, student_key, batch));
CREATE TABLE IF NOT EXISTS run_metrics (
    run_id VARCHAR NOT NULL, teacher VARCHAR NOT NULL, dataset VARCHAR NOT NULL, metric VARCHAR NOT NULL,
    value DOUBLE, ci_low DOUBLE, ci_high DOUBLE, rank DOUBLE, samples BLOB,
    PRIMARY KEY (run_id, teacher, dataset, metric));
CREATE TABLE IF NOT EXISTS step_events (
    trace_id VARCHAR NOT NULL, student_key VARCHAR NOT NULL, k_start INTEGER NOT NULL, k_end INTEGER NOT NULL,
    m INTEGER NOT NULL, outcome VARCHAR NOT NULL, y_start DOUBLE NOT NULL, y_end DOUBLE NOT NULL,
    n_steps INTEGER NOT NULL, tokens_added INTEGER, position DOUBLE NOT NULL, backtracking BOOLEAN,
    backtracking_method VARCHAR, max_cos DOUBLE, answer_stated BOOLEAN, self_check BOOLEAN NOT NULL,
    inputs_key VARCHAR NOT NULL, code_version VARCHAR NOT NULL, similarity BOOLEAN,
    PRIMARY KEY (trace_id, student_key, k_start, k_end));
ALTER TABLE step_events ADD COLUMN IF NOT EXISTS similarity BOOLEAN;
CREATE TABLE IF NOT EXISTS studies (
    name VARCHAR PRIMARY KEY, created TIMESTAMP NOT NULL, seed BIGINT NOT NULL, design_version VARCHAR NOT NULL,
    config VARCHAR NOT NULL, consent_text VARCHAR NOT NULL);
CREATE TABLE IF NOT EXISTS study_items (
    study VARCHAR NOT NULL, item_id VARCHAR NOT NULL, trace_id VARCHAR NOT NULL, k INTEGER NOT NULL,
    m INTEGER NOT NULL, fraction DOUBLE, kind VARCHAR NOT NULL,
    PRIMARY KEY (study, item_id));
CREATE TABLE IF NOT EXISTS study_participants (
    study VARCHAR NOT NULL, code VARCHAR NOT NULL, token_sha256 VARCHAR NOT NULL, admin BOOLEAN NOT NULL,
    PRIMARY KEY (study, code));
CREATE TABLE IF NOT EXISTS study_assignments (
    study VARCHAR NOT NULL, code VARCHAR NOT NULL, position INTEGER NOT NULL, item_id VARCHAR NOT NULL,
    PRIMARY KEY (study, code, position));
CREATE TABLE IF NOT EXISTS study_answers (
    study VARCHAR NOT NULL, code VARCHAR NOT NULL, item_id VARCHAR NOT NULL, answer VARCHAR NOT NULL,
    rating INTEGER, started_at TIMESTAMP, submitted_at TIMESTAMP NOT NULL, seconds DOUBLE,
    PRIMARY KEY (study, code, item_id));
CREATE TABLE IF NOT EXISTS study_events (
    study VARCHAR NOT NULL, code VARCHAR NOT NULL, occurred_at TIMESTAMP NOT NULL, event VARCHAR NOT NULL,
    detail VARCHAR,
    PRIMARY KEY (study, code, occurred_at, event));
CREATE TABLE IF NOT EXISTS study_grades (
    study VARCHAR NOT NULL, code VARCHAR NOT NULL, item_id VARCHAR NOT NULL, correct BOOLEAN NOT NULL,
    extracted VARCHAR, grade_status VARCHAR NOT NULL, grader_version VARCHAR NOT NULL,
    read_as VARCHAR NOT NULL,
    PRIMARY KEY (study, code, item_id));
CREATE TABLE IF NOT EXISTS reward_log (
    log_key VARCHAR PRIMARY KEY, reward_name VARCHAR NOT NULL, spec_hash VARCHAR NOT NULL,
    source VARCHAR NOT NULL, step BIGINT, tag VARCHAR, group_id VARCHAR, reward DOUBLE, correct BOOLEAN,
    transfer DOUBLE, watch DOUBLE, components VARCHAR NOT NULL, error VARCHAR, scored_at TIMESTAMP NOT NULL);
CREATE TABLE IF NOT EXISTS intervention_traces (
    unit_key VARCHAR PRIMARY KEY, teacher VARCHAR NOT NULL, dataset VARCHAR NOT NULL, problem_id VARCHAR NOT NULL,
    cue VARCHAR NOT NULL, arm INTEGER NOT NULL, sample INTEGER NOT NULL, target VARCHAR NOT NULL, gold VARCHAR NOT NULL,
    question VARCHAR NOT NULL, prompt VARCHAR NOT NULL, reasoning VARCHAR NOT NULL, answer_text VARCHAR NOT NULL,
    extracted VARCHAR, hit_target BOOLEAN NOT NULL, correct BOOLEAN NOT NULL, finish_reason VARCHAR,
    model VARCHAR NOT NULL, decoding VARCHAR NOT NULL, generated_at TIMESTAMP DEFAULT current_timestamp);
CREATE TABLE IF NOT EXISTS hint_verdicts (
    verdict_key VARCHAR PRIMARY KEY, unit_key VARCHAR NOT NULL, monitor VARCHAR NOT NULL, monitor_key VARCHAR NOT NULL,
    cue VARCHAR NOT NULL, scope VARCHAR NOT NULL, verdict BOOLEAN, status VARCHAR NOT NULL, response VARCHAR,
    decided_at TIMESTAMP DEFAULT current_timestamp);
""".replace("<ROLLOUT_COLUMNS>", ROLLOUT_COLUMNS)

TABLES = frozenset({
    "meta",
    "problems",
    "traces",
    "grades",
    "steps",
    "step_counts",
    "step_similarity",
    "sentence_embeddings",
    "trace_metrics",
    "students",
    "rollouts",
    "early_answers",
    "judge_results",
    "judge_batches",
    "generations",
    "monitor_results",
    "runs",
    "run_metrics",
    "unit_failures",
    "stage_failures",
    "transfer_timings",
    "step_events",
    "studies",
    "study_items",
    "study_participants",
    "study_assignments",
    "study_answers",
    "study_events",
    "study_grades",
    "reward_log",
    "intervention_traces",
    "hint_verdicts",
})
STUDY_TABLES = frozenset({"studies", "study_items", "study_participants", "study_assignments", "study_answers",
                          "study_events", "study_grades"})
"""A human study's tables (`store.study`, docs/study.md): none is copied into a plan's scratch store.
Only `study_grades` is written by a stage (`study`, the answers' grades); the others by the study
commands and server."""
REWARD_TABLES = frozenset({"reward_log"})
"""What a training loop's reward scored (`legival_core/rl`, docs/reward.md): written through the journal
by the reward server and the in-process adapters, never by a stage; not copied into a plan's scratch."""
INTERVENTION_TABLES = frozenset({"intervention_traces", "hint_verdicts"})
"""Hint interventions and their monitors' verdicts (docs/monitorability.md): apart from `traces`, so a
hinted sample never changes a teacher's accuracy, FOTU or any other reported number."""
RUN_TABLES = frozenset({"runs", "run_metrics"})
"""The record of past runs (`store.runs`): written once per `legival run`, never by a stage."""
