"""The DuckDB schema: tables by migration, views by definition.

Tables change only through :data:`MIGRATIONS`, applied in order and recorded in ``schema_version``;
a new column or table is a new migration, never an edit of an old one. Views are recreated whenever
their definitions change (tracked by a hash in ``meta``), since they hold no data.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from typing import Any

from campflow.rollout.episode import MODEL_FAILURES, RETRYABLE, Termination

MIGRATIONS: list[tuple[int, str, list[str]]] = [
    (
        1,
        "initial schema",
        [
            """CREATE TABLE runs (
            run_id VARCHAR PRIMARY KEY,
            kind VARCHAR NOT NULL,             -- evaluate, collect, improve, train, synthesize, watch
            model_id VARCHAR,
            config JSON,
            status VARCHAR NOT NULL,           -- running, completed, failed
            started_at TIMESTAMP NOT NULL,
            finished_at TIMESTAMP,
            summary JSON
        )""",
            """CREATE TABLE instances (
            instance_id VARCHAR PRIMARY KEY,
            bootcamp VARCHAR NOT NULL,
            version VARCHAR NOT NULL,
            level INTEGER NOT NULL,
            params JSON NOT NULL,
            seed BIGINT NOT NULL,
            split VARCHAR NOT NULL,            -- train, eval
            origin VARCHAR NOT NULL,           -- generated, synthesized, imported
            variant_id VARCHAR,
            created_at TIMESTAMP NOT NULL
        )""",
            """CREATE TABLE episodes (
            episode_id VARCHAR NOT NULL,
            run_id VARCHAR NOT NULL,
            instance_id VARCHAR NOT NULL,
            bootcamp VARCHAR NOT NULL,
            level INTEGER,
            model_id VARCHAR NOT NULL,
            sample_index INTEGER NOT NULL,
            reward DOUBLE NOT NULL,
            success BOOLEAN NOT NULL,
            termination VARCHAR NOT NULL,
            turns INTEGER NOT NULL,
            tool_calls INTEGER NOT NULL,
            invalid_calls INTEGER NOT NULL,
            prompt_tokens BIGINT NOT NULL,
            completion_tokens BIGINT NOT NULL,
            latency_s DOUBLE NOT NULL,
            wall_s DOUBLE NOT NULL,
            transcript JSON NOT NULL,
            details JSON,
            error VARCHAR,
            created_at TIMESTAMP NOT NULL,
            PRIMARY KEY (run_id, instance_id, sample_index)
        )""",
            """CREATE TABLE failures (
            episode_id VARCHAR PRIMARY KEY,
            run_id VARCHAR NOT NULL,
            bootcamp VARCHAR NOT NULL,
            instance_id VARCHAR NOT NULL,
            category VARCHAR NOT NULL,
            signature VARCHAR NOT NULL,
            features JSON,
            cluster_id VARCHAR
        )""",
            """CREATE TABLE clusters (
            cluster_id VARCHAR PRIMARY KEY,
            run_id VARCHAR NOT NULL,
            bootcamp VARCHAR NOT NULL,
            size INTEGER NOT NULL,
            label VARCHAR NOT NULL,
            traits JSON,
            exemplar_episode_ids VARCHAR[]
        )""",
            """CREATE TABLE variants (
            variant_id VARCHAR PRIMARY KEY,
            cluster_id VARCHAR,
            bootcamp VARCHAR NOT NULL,
            params JSON,
            rationale VARCHAR,
            synthesizer VARCHAR NOT NULL,
            status VARCHAR NOT NULL,           -- accepted, rejected
            reject_reason VARCHAR,
            parent_instance_ids VARCHAR[],
            instance_ids VARCHAR[],
            created_at TIMESTAMP NOT NULL
        )""",
            """CREATE TABLE datasets (
            dataset_id VARCHAR PRIMARY KEY,
            kind VARCHAR NOT NULL,             -- sft, rl
            path VARCHAR NOT NULL,
            rows INTEGER NOT NULL,
            filter JSON,
            source_runs VARCHAR[],
            created_at TIMESTAMP NOT NULL
        )""",
            """CREATE TABLE imported_bootcamps (
            name VARCHAR PRIMARY KEY,
            adapter VARCHAR NOT NULL,          -- reasoning-gym, gymnasium, function-calling, internbootcamp
            source VARCHAR NOT NULL,           -- dataset name, env id, file path or dotted class path
            version VARCHAR NOT NULL,
            options JSON,
            created_at TIMESTAMP NOT NULL
        )""",
            """CREATE TABLE cycles (
            cycle_id VARCHAR PRIMARY KEY,
            status VARCHAR NOT NULL,           -- running, completed, failed
            step VARCHAR,                      -- the last completed step
            base_model_id VARCHAR,
            candidate_model_id VARCHAR,
            metric VARCHAR,
            before_value DOUBLE,
            after_value DOUBLE,
            promoted BOOLEAN,
            state JSON,                        -- ids produced by each completed step
            started_at TIMESTAMP NOT NULL,
            finished_at TIMESTAMP
        )""",
            """CREATE TABLE watch_decisions (
            decided_at TIMESTAMP NOT NULL,
            new_failures INTEGER NOT NULL,
            threshold INTEGER NOT NULL,
            started_cycle_id VARCHAR
        )""",
            """CREATE TABLE checkpoints (
            model_id VARCHAR PRIMARY KEY,
            parent_model_id VARCHAR,
            kind VARCHAR NOT NULL,             -- base, sft, rl
            path VARCHAR NOT NULL,
            dataset_id VARCHAR,
            metrics JSON,
            created_at TIMESTAMP NOT NULL
        )""",
        ],
    ),
    (
        2,
        "synthesis: cluster members, variant verdicts, curriculum",
        [
            # every member of a cluster, so a variant's lineage survives re-clustering of its run
            "ALTER TABLE clusters ADD COLUMN episode_ids VARCHAR[]",
            "ALTER TABLE clusters ADD COLUMN created_at TIMESTAMP",
            "ALTER TABLE variants ADD COLUMN reject_kind VARCHAR",  # slug of reject_reason, for GROUP BY
            "ALTER TABLE variants ADD COLUMN pass_rate DOUBLE",  # calibrated pass rate of the current model
            "ALTER TABLE variants ADD COLUMN run_id VARCHAR",  # the synthesize run that proposed it
            """CREATE TABLE curriculum (
            run_id VARCHAR NOT NULL,           -- the run whose train pass rate decided
            bootcamp VARCHAR NOT NULL,
            cluster_id VARCHAR NOT NULL,       -- '' for the bootcamp as a whole
            level INTEGER NOT NULL,
            next_level INTEGER NOT NULL,
            pass_rate DOUBLE,
            episodes INTEGER NOT NULL,
            decided_at TIMESTAMP NOT NULL,
            PRIMARY KEY (run_id, bootcamp, cluster_id)
        )""",
        ],
    ),
    # DuckDB keeps a primary key in an ART index that every insert maintains; for episodes, whose rows
    # carry KB-sized transcripts and arrive 10^4-10^5 at a time, that was ~20% of writing them. The
    # (run_id, instance_id, sample_index) key now holds by how Store.write_episodes writes (delete the
    # batch's keys, insert the batch, one transaction); tests/test_store.py checks it.
    (
        3,
        "episodes without an ART primary-key index",
        [
            """CREATE TABLE episodes_v3 (
            episode_id VARCHAR NOT NULL,
            run_id VARCHAR NOT NULL,
            instance_id VARCHAR NOT NULL,
            bootcamp VARCHAR NOT NULL,
            level INTEGER,
            model_id VARCHAR NOT NULL,
            sample_index INTEGER NOT NULL,
            reward DOUBLE NOT NULL,
            success BOOLEAN NOT NULL,
            termination VARCHAR NOT NULL,
            turns INTEGER NOT NULL,
            tool_calls INTEGER NOT NULL,
            invalid_calls INTEGER NOT NULL,
            prompt_tokens BIGINT NOT NULL,
            completion_tokens BIGINT NOT NULL,
            latency_s DOUBLE NOT NULL,
            wall_s DOUBLE NOT NULL,
            transcript JSON NOT NULL,
            details JSON,
            error VARCHAR,
            created_at TIMESTAMP NOT NULL
        )""",
            "INSERT INTO episodes_v3 SELECT * FROM episodes",
            "DROP TABLE episodes",
            "ALTER TABLE episodes_v3 RENAME TO episodes",
        ],
    ),
    (
        4,
        "cycles: the promotion decision's reason",
        [
            "ALTER TABLE cycles ADD COLUMN decision VARCHAR",  # why the candidate was (not) promoted
        ],
    ),
    (
        5,
        "authored bootcamps: attempts and the contract's verdicts",
        [
            """CREATE TABLE author_attempts (
            attempt_id VARCHAR PRIMARY KEY,
            name VARCHAR NOT NULL,             -- the bootcamp's name
            task_path VARCHAR NOT NULL,
            task_sha256 VARCHAR NOT NULL,
            examples_path VARCHAR,
            examples INTEGER NOT NULL,
            model VARCHAR,                     -- the LLM that wrote the modules
            status VARCHAR NOT NULL,           -- running, accepted, rejected, failed
            rounds INTEGER NOT NULL,           -- replies judged so far (1: the first, then repairs)
            source_sha256 VARCHAR,             -- the accepted module, or the last one judged
            module_path VARCHAR,               -- that module's file in the workspace
            reasons VARCHAR,                   -- rejected or failed: why
            started_at TIMESTAMP NOT NULL,
            finished_at TIMESTAMP
        )""",
            """CREATE TABLE author_verdicts (
            attempt_id VARCHAR NOT NULL,
            name VARCHAR NOT NULL,
            round INTEGER NOT NULL,
            check_name VARCHAR NOT NULL,       -- campflow.authoring.checks.CHECKS
            level INTEGER,                     -- per-level checks; NULL for the others
            passed BOOLEAN,                    -- NULL: not run
            reason VARCHAR,
            evidence JSON,                     -- seed, instance, traceback tail, stderr
            source_sha256 VARCHAR,             -- the module judged; NULL when the reply held none
            isolation VARCHAR,                 -- the sandbox's layers, e.g. namespaces+rlimits+audit hook
            decided_at TIMESTAMP NOT NULL
        )""",
        ],
    ),
    (
        6,
        "reward integrity: the hack battery's probes",
        [
            """CREATE TABLE verifier_probes (
            subject VARCHAR NOT NULL,          -- the bootcamp checked, or the variant id
            source VARCHAR NOT NULL,           -- import (campflow import), variant (synthesis)
            bootcamp VARCHAR NOT NULL,
            level INTEGER,
            seed BIGINT,
            instance_id VARCHAR,
            exploit VARCHAR NOT NULL,          -- campflow.integrity.battery (module docstring)
            answer VARCHAR,                    -- the final call's arguments as sent, clipped
            reward DOUBLE,
            success BOOLEAN,
            termination VARCHAR,
            verdict VARCHAR NOT NULL,          -- campflow.integrity.battery.VERDICTS
            detail VARCHAR,
            checked_at TIMESTAMP NOT NULL
        )""",
        ],
    ),
    (
        7,
        "reward integrity: episodes re-scored with the current verifier, and suspicious successes",
        [
            """CREATE TABLE episode_rescores (
            rescore_id VARCHAR NOT NULL,       -- one `campflow rescore` call
            episode_id VARCHAR NOT NULL,
            run_id VARCHAR NOT NULL,
            instance_id VARCHAR NOT NULL,
            bootcamp VARCHAR NOT NULL,
            sample_index INTEGER NOT NULL,
            old_reward DOUBLE,
            old_success BOOLEAN,
            new_reward DOUBLE,                 -- NULL where it could not be re-scored (error says why)
            new_success BOOLEAN,
            details JSON,                      -- the current verifier's details
            error VARCHAR,
            rescored_at TIMESTAMP NOT NULL
        )""",
            """CREATE TABLE suspicious_flags (
            episode_id VARCHAR NOT NULL,       -- a solved episode
            run_id VARCHAR NOT NULL,
            bootcamp VARCHAR NOT NULL,
            level INTEGER,
            instance_id VARCHAR NOT NULL,
            flag VARCHAR NOT NULL,             -- campflow.integrity.suspicion.FLAGS
            detail VARCHAR,
            mined_at TIMESTAMP NOT NULL
        )""",
            """CREATE TABLE suspicion_mined (
            run_id VARCHAR PRIMARY KEY,        -- runs whose successes were mined (none flagged is an answer too)
            mined_at TIMESTAMP NOT NULL
        )""",
        ],
    ),
    (
        8,
        "reward integrity: the adversarial pass's episodes keep their transcript",
        [
            # campflow.integrity.hacker: the model's episode as played (exploit 'model:...'); NULL for the battery
            "ALTER TABLE verifier_probes ADD COLUMN transcript JSON",
        ],
    ),
    (
        9,
        "the recording proxy: every call of a user's agent",
        [
            # campflow.proxy.records: written before the call is answered; docs/proxy.md
            """CREATE TABLE proxy_calls (
            call_id VARCHAR NOT NULL,
            episode_id VARCHAR NOT NULL,       -- named in the base URL's path (.../e/<episode_id>/v1)
            seq INTEGER NOT NULL,              -- order of arrival within the episode (-1: episode unknown)
            retry_of VARCHAR,                  -- the earlier call this one repeats (same body, same episode)
            attempt INTEGER,                   -- the client's own retry count, if it sent one
            backend VARCHAR NOT NULL,          -- local, vllm, endpoint
            model VARCHAR,                     -- the model the request named
            model_id VARCHAR NOT NULL,         -- the policy that answered
            stream BOOLEAN,
            status INTEGER NOT NULL,           -- the HTTP status answered
            error_code VARCHAR,
            error_param VARCHAR,               -- the request field at fault
            error VARCHAR,
            request JSON,                      -- the body as sent ({"unparsed": ...} when not JSON)
            response JSON,                     -- the reply as a non-streamed completion, or the error body
            prompt_ids INTEGER[],              -- the ids the model saw
            completion_ids INTEGER[],          -- the ids it sampled (its stop token included)
            logprobs DOUBLE[],                 -- per completion id
            trainable BOOLEAN NOT NULL,        -- ids and logprobs are the model's own
            continued_from VARCHAR,            -- the call whose prompt and completion ids begin this prompt
            requested_sampling JSON,           -- what the agent asked for (not applied)
            applied_sampling JSON,             -- what generation used
            finish_reason VARCHAR,
            prompt_tokens INTEGER,
            completion_tokens INTEGER,
            latency_s DOUBLE NOT NULL,
            started_at TIMESTAMP NOT NULL,
            recorded_at TIMESTAMP NOT NULL
        )""",
        ],
    ),
    (
        10,
        "where a failure began: each failed episode's first divergence from a correct path",
        [
            # campflow.synthesis.divergence: one row per model failure of a run; kind or reason is set
            """CREATE TABLE divergences (
            episode_id VARCHAR NOT NULL,
            run_id VARCHAR NOT NULL,
            bootcamp VARCHAR NOT NULL,
            instance_id VARCHAR NOT NULL,
            level INTEGER,
            termination VARCHAR NOT NULL,
            turn INTEGER,                      -- the diverging call's turn, from 0 (NULL: none)
            call_index INTEGER,                -- its place among the turn's calls, from 0
            kind VARCHAR,                      -- the bootcamp's kind or a generic one (NULL: none)
            model_tool VARCHAR,                -- the model's call (NULL for a turn without one)
            model_arguments JSON,
            oracle_tool VARCHAR,               -- what the oracle would have played from the same world
            oracle_arguments JSON,
            demonstrator_tool VARCHAR,         -- what the demonstrator would have played, reading the transcript so far
            demonstrator_arguments JSON,
            reason VARCHAR,                    -- why there is no divergence (NULL when there is one)
            found_at TIMESTAMP NOT NULL,
            PRIMARY KEY (run_id, episode_id)
        )""",
        ],
    ),
    (
        11,
        "from production: the serving proxy's calls and the judgements of its episodes",
        [
            # campflow.proxy.production (`campflow proxy serve`): the upstream's own time, apart from the proxy's
            "ALTER TABLE proxy_calls ADD COLUMN upstream_latency_s DOUBLE",
            "ALTER TABLE proxy_calls ADD COLUMN conversation VARCHAR",  # where the episode id came from: path, header, none
            # campflow.flows.watch: judged production failures counted beside evaluation failures
            "ALTER TABLE watch_decisions ADD COLUMN production_failures INTEGER",
            "ALTER TABLE watch_decisions ADD COLUMN crossed_clusters VARCHAR[]",  # production clusters past their threshold
            # campflow.proxy.judging: feedback, a reward function or an LLM judge; docs/from-production.md
            """CREATE TABLE production_judgements (
            judgement_id VARCHAR PRIMARY KEY,
            episode_id VARCHAR NOT NULL,       -- the production episode (proxy_calls.episode_id)
            source VARCHAR NOT NULL,           -- feedback, reward, judge
            judge VARCHAR,                     -- the reward function's name or the judge's model
            score DOUBLE NOT NULL,             -- 0 (failed) .. 1 (succeeded)
            label VARCHAR,                     -- what went wrong, in a word or two (feedback's label, the judge's)
            reason VARCHAR,                    -- why, in the judge's words
            group_id VARCHAR,                  -- the judge's group of alike episodes, scored against each other
            judged_at TIMESTAMP NOT NULL
        )""",
        ],
    ),
    (
        12,
        "on-policy corrections: the demonstrator's next action at each state the model reached",
        [
            # campflow.training.corrections: one row per turn of a corrections run (DAgger's labels)
            """CREATE TABLE corrections (
            correction_id VARCHAR PRIMARY KEY, -- hash of (run, instance, sample, turn)
            run_id VARCHAR NOT NULL,
            episode_id VARCHAR NOT NULL,       -- the episode the model played (episodes.episode_id)
            bootcamp VARCHAR NOT NULL,
            instance_id VARCHAR NOT NULL,
            turn INTEGER NOT NULL,             -- the turn labelled, from 0
            context JSON NOT NULL,             -- the messages the model saw before it (its own history)
            label_tool VARCHAR NOT NULL,       -- the demonstrator's next action from that state
            label_arguments JSON NOT NULL,
            model_tool VARCHAR,                -- the model's first valid call there (NULL: none)
            model_arguments JSON,
            agreed BOOLEAN NOT NULL,           -- whether the model's call was the label's
            played VARCHAR NOT NULL,           -- who acted at this turn: model, demonstrator
            created_at TIMESTAMP NOT NULL
        )""",
        ],
    ),
]

SCHEMA_VERSION = MIGRATIONS[-1][0]


def sql_values(terminations: Collection[Termination]) -> str:
    """``terminations`` as a SQL list literal, ``('a', 'b')``, in the enum's order (the same text every run).

    Views and queries name the taxonomy's groups only through the two lists below, so a new
    :class:`~campflow.rollout.episode.Termination` is one edit in rollout.episode.
    """
    return "(" + ", ".join(f"'{t.value}'" for t in Termination if t in terminations) + ")"


# Model failures: what failure mining, failure_summary and watch look at.
MODEL_FAILURES_SQL = sql_values(MODEL_FAILURES)
# Infrastructure failures (and timeouts): re-run on resume, left out of every pass rate, never mined.
RETRYABLE_SQL = sql_values(RETRYABLE)

VIEWS: dict[str, str] = {
    # campflow.proxy.production: each production episode's calls, and the proxy's own time apart from the upstream's
    "production_episodes": """
        SELECT episode_id, any_value(conversation) AS conversation, count(*) AS calls,
               count(*) FILTER (WHERE status = 200) AS answered, min(started_at) AS first_call_at,
               max(started_at) AS last_call_at, round(sum(upstream_latency_s), 4) AS upstream_s,
               round(sum(latency_s - coalesce(upstream_latency_s, 0)), 4) AS proxy_s
        FROM proxy_calls WHERE backend = 'upstream' GROUP BY episode_id""",
    # The judgement that counts for each judged production episode: the application's feedback over a
    # reward function over the LLM judge, and the latest of a source (campflow.proxy.judging).
    "production_verdicts": """
        SELECT * FROM production_judgements
        QUALIFY row_number() OVER (PARTITION BY episode_id ORDER BY
            CASE source WHEN 'feedback' THEN 0 WHEN 'reward' THEN 1 ELSE 2 END, judged_at DESC, judgement_id) = 1""",
    # Solved episodes with their suspicious-success flags (campflow.integrity.suspicion), one row each.
    "suspicious_successes": """
        SELECT e.run_id, e.episode_id, e.bootcamp, e.level, e.instance_id, e.model_id, e.reward, e.turns,
               list(f.flag ORDER BY f.flag) AS flags, string_agg(f.flag || ': ' || f.detail, '; ' ORDER BY f.flag) AS why
        FROM episodes e JOIN suspicious_flags f USING (episode_id)
        WHERE e.success GROUP BY ALL""",
    # Per mined run, bootcamp and level: solved episodes, how many are suspicious, and the share.
    "suspicious_shares": """
        SELECT e.run_id, e.bootcamp, e.level, count(*) AS solved,
               count(*) FILTER (WHERE e.episode_id IN (SELECT episode_id FROM suspicious_flags)) AS suspicious,
               round(count(*) FILTER (WHERE e.episode_id IN (SELECT episode_id FROM suspicious_flags)) / count(*), 4)
                   AS share
        FROM episodes e JOIN suspicion_mined m USING (run_id)
        WHERE e.success GROUP BY ALL""",
    # Model failures of evaluations since the last training finished: what `watch` counts. A cycle's own
    # evaluations end before its checkpoint is registered or the cycle completes, so they never count.
    "new_failures": f"""
        SELECT e.bootcamp, e.model_id, e.termination, count(*) AS failures, max(e.created_at) AS latest
        FROM episodes e JOIN runs r USING (run_id)
        WHERE r.kind = 'evaluate' AND e.termination IN {MODEL_FAILURES_SQL}
          AND e.created_at > coalesce((SELECT max(t) FROM (
                SELECT max(finished_at) AS t FROM cycles WHERE status = 'completed'
                UNION ALL SELECT max(created_at) FROM checkpoints WHERE kind IN ('sft', 'rl'))),
              TIMESTAMP '1970-01-01')
        GROUP BY e.bootcamp, e.model_id, e.termination""",
    # Judged production failures since the last training, per production run and failure cluster: what
    # `watch` counts beside new_failures (campflow.proxy.judging files them; production_threshold).
    "new_production_failures": f"""
        SELECT e.run_id, f.cluster_id, c.label, count(*) AS failures, max(e.created_at) AS latest
        FROM episodes e JOIN runs r USING (run_id)
        LEFT JOIN failures f ON f.episode_id = e.episode_id
        LEFT JOIN clusters c ON c.cluster_id = f.cluster_id
        WHERE r.kind = 'production' AND e.termination IN {MODEL_FAILURES_SQL}
          AND e.created_at > coalesce((SELECT max(t) FROM (
                SELECT max(finished_at) AS t FROM cycles WHERE status = 'completed'
                UNION ALL SELECT max(created_at) FROM checkpoints WHERE kind IN ('sft', 'rl'))),
              TIMESTAMP '1970-01-01')
        GROUP BY e.run_id, f.cluster_id, c.label""",
    "checkpoint_lineage": """
        WITH RECURSIVE chain(model_id, ancestor_id, kind, dataset_id, depth) AS (
            SELECT model_id, model_id, kind, dataset_id, 0 FROM checkpoints
            UNION ALL
            SELECT chain.model_id, c.parent_model_id, p.kind, p.dataset_id, chain.depth + 1
            FROM chain JOIN checkpoints c ON c.model_id = chain.ancestor_id
            JOIN checkpoints p ON p.model_id = c.parent_model_id)
        SELECT chain.model_id, chain.depth, chain.ancestor_id, chain.kind, chain.dataset_id, d.source_runs
        FROM chain LEFT JOIN datasets d USING (dataset_id)""",
    "pass_rates": f"""
        SELECT run_id, bootcamp, model_id,
               count(*) AS episodes,
               count(*) FILTER (WHERE success) AS solved,
               round(count(*) FILTER (WHERE success)
                     / nullif(count(*) FILTER (WHERE termination NOT IN {RETRYABLE_SQL}), 0), 4)
                   AS pass_rate,
               round(avg(reward), 4) AS mean_reward,
               count(*) FILTER (WHERE termination IN {MODEL_FAILURES_SQL}) AS model_failures,
               count(*) FILTER (WHERE termination IN {RETRYABLE_SQL}) AS infra_failures
        FROM episodes GROUP BY run_id, bootcamp, model_id""",
    "pass_rates_by_level": f"""
        SELECT run_id, bootcamp, level, model_id, count(*) AS episodes,
               round(avg(success::INTEGER), 4) AS pass_rate, round(avg(reward), 4) AS mean_reward
        FROM episodes WHERE termination NOT IN {RETRYABLE_SQL}
        GROUP BY run_id, bootcamp, level, model_id""",
    "failure_summary": f"""
        SELECT run_id, bootcamp, model_id, termination,
               coalesce(details->>'$.reason', '') AS reason,
               count(*) AS episodes,
               round(avg(turns), 2) AS mean_turns
        FROM episodes WHERE termination IN {MODEL_FAILURES_SQL}
        GROUP BY run_id, bootcamp, model_id, termination, reason""",
    # Per run and bootcamp, where failed episodes left a correct path: each kind (or each reason there
    # was none) with its episodes, instances and mean turn (campflow.synthesis.divergence).
    "divergence_summary": """
        SELECT run_id, bootcamp, coalesce(kind, 'none') AS kind, reason, count(*) AS episodes,
               count(DISTINCT instance_id) AS instances, round(avg(turn), 2) AS mean_turn
        FROM divergences GROUP BY run_id, bootcamp, kind, reason""",
    "failure_categories": """
        SELECT run_id, bootcamp, category, count(*) AS failures,
               count(DISTINCT instance_id) AS instances, count(DISTINCT cluster_id) AS clusters
        FROM failures GROUP BY run_id, bootcamp, category""",
    # For a variant: its cluster and the failed episodes behind it (one row per episode);
    # parent marks the episodes of the instances the variant was derived from.
    "variant_lineage": """
        SELECT v.variant_id, v.bootcamp, v.synthesizer, v.status, v.reject_kind, v.cluster_id,
               c.run_id AS failure_run_id, c.label AS cluster_label, m.episode_id AS failed_episode_id,
               e.instance_id AS failed_instance_id, f.category, e.termination, e.reward,
               list_contains(v.parent_instance_ids, e.instance_id) AS parent
        FROM variants v
        JOIN clusters c ON c.cluster_id = v.cluster_id
        CROSS JOIN LATERAL (SELECT unnest(c.episode_ids) AS episode_id) m
        LEFT JOIN failures f ON f.episode_id = m.episode_id
        LEFT JOIN episodes e ON e.episode_id = m.episode_id AND e.run_id = c.run_id""",
    # Every eval-split instance of a cycle, before vs after: fixed, regressed, still failing, still passing.
    # An instance passes a run when at least half its measured samples pass; its cluster is the one its
    # failed before-run episode was mined into (NULL when it passed, or was not clustered).
    "cycle_outcomes": f"""
        WITH c AS (SELECT cycle_id, state->>'$.eval_before' AS before_run, state->>'$.eval_after' AS after_run
                   FROM cycles),
        per AS (SELECT run_id, instance_id, bootcamp, level, avg(success::INTEGER) AS p, count(*) AS samples
                FROM episodes WHERE termination NOT IN {RETRYABLE_SQL} GROUP BY ALL),
        clustered AS (SELECT f.run_id, f.instance_id, min(f.cluster_id) AS cluster_id, min(k.label) AS cluster_label
                      FROM failures f LEFT JOIN clusters k USING (cluster_id) GROUP BY ALL)
        SELECT c.cycle_id, b.instance_id, b.bootcamp, b.level, cl.cluster_id, cl.cluster_label,
               b.p AS pass_before, a.p AS pass_after,
               CASE WHEN b.p >= 0.5 AND a.p >= 0.5 THEN 'still_passing'
                    WHEN b.p >= 0.5 THEN 'regressed'
                    WHEN a.p >= 0.5 THEN 'fixed'
                    ELSE 'still_failing' END AS outcome
        FROM c JOIN per b ON b.run_id = c.before_run
        JOIN per a ON a.run_id = c.after_run AND a.instance_id = b.instance_id
        LEFT JOIN clustered cl ON cl.run_id = c.before_run AND cl.instance_id = b.instance_id""",
    "cycle_outcome_counts": """
        SELECT cycle_id, bootcamp, level, cluster_id, any_value(cluster_label) AS cluster_label,
               count(*) AS instances,
               count(*) FILTER (WHERE outcome = 'fixed') AS fixed,
               count(*) FILTER (WHERE outcome = 'regressed') AS regressed,
               count(*) FILTER (WHERE outcome = 'still_failing') AS still_failing,
               count(*) FILTER (WHERE outcome = 'still_passing') AS still_passing
        FROM cycle_outcomes GROUP BY cycle_id, bootcamp, level, cluster_id""",
    # Probe instances of a cycle's variants: the starting model's and the candidate's pass rate per
    # variant (and its cluster), on instances neither trained on.
    "probe_outcomes": f"""
        WITH c AS (SELECT cycle_id, state->>'$.probe_before' AS before_run, state->>'$.probe_after' AS after_run
                   FROM cycles),
        per AS (SELECT run_id, instance_id, avg(success::INTEGER) AS p, count(*) AS episodes FROM episodes
                WHERE termination NOT IN {RETRYABLE_SQL} GROUP BY ALL)
        SELECT c.cycle_id, v.bootcamp, v.cluster_id, k.label AS cluster_label, v.variant_id,
               count(*) AS probes, avg(b.p) AS pass_before, avg(a.p) AS pass_after
        FROM c JOIN per b ON b.run_id = c.before_run
        JOIN per a ON a.run_id = c.after_run AND a.instance_id = b.instance_id
        JOIN instances i ON i.instance_id = b.instance_id AND i.split = 'probe'
        JOIN variants v ON v.variant_id = i.variant_id
        LEFT JOIN clusters k ON k.cluster_id = v.cluster_id
        GROUP BY ALL""",
    # One row per round of `campflow author`: the module judged and which checks it failed.
    "author_rounds": """
        SELECT attempt_id, name, round, any_value(source_sha256) AS source_sha256,
               count(*) FILTER (WHERE passed) AS passed, count(*) FILTER (WHERE NOT passed) AS failed,
               count(*) FILTER (WHERE passed IS NULL) AS not_run,
               string_agg(DISTINCT check_name, ', ' ORDER BY check_name) FILTER (WHERE NOT passed) AS failed_checks,
               bool_and(coalesce(passed, false)) AS accepted, min(decided_at) AS decided_at
        FROM author_verdicts GROUP BY attempt_id, name, round""",
    "curriculum_levels": """
        SELECT bootcamp, nullif(cluster_id, '') AS cluster_id, arg_max(next_level, decided_at) AS level,
               arg_max(pass_rate, decided_at) AS last_pass_rate, max(decided_at) AS decided_at
        FROM curriculum GROUP BY bootcamp, cluster_id""",
}


def views_fingerprint(views: dict[str, str] | None = None) -> str:
    """Hash of the view definitions, to know when they must be recreated."""
    text = "\n".join(f"{k}:{v}" for k, v in sorted((views or VIEWS).items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def migrate(con: Any) -> int:
    """Bring a connection's database up to :data:`SCHEMA_VERSION` and its views up to date."""
    con.execute(
        "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
        "description VARCHAR, applied_at TIMESTAMP DEFAULT current_timestamp)"
    )
    con.execute("CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    current = con.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()[0]
    if current > SCHEMA_VERSION:
        from campflow.errors import StoreError

        raise StoreError(
            f"the store has schema version {current}, newer than this campflow ({SCHEMA_VERSION}); upgrade campflow"
        )
    for version, description, statements in MIGRATIONS:
        if version <= current:
            continue
        con.execute("BEGIN TRANSACTION")
        try:
            for stmt in statements:
                con.execute(stmt)
            con.execute("INSERT INTO schema_version (version, description) VALUES (?, ?)", [version, description])
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
    fingerprint = views_fingerprint()
    row = con.execute("SELECT value FROM meta WHERE key = 'views'").fetchone()
    if row is None or row[0] != fingerprint:
        for name, sql in VIEWS.items():
            con.execute(f"CREATE OR REPLACE VIEW {name} AS {sql}")
        con.execute("INSERT OR REPLACE INTO meta VALUES ('views', ?)", [fingerprint])
    return SCHEMA_VERSION
