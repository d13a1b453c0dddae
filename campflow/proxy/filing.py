"""Filing judged production episodes as a run of kind ``production``, mined and clustered like an evaluation's.

Each judged episode not filed yet becomes one ``episodes`` row of a new run: reward the score of the
judgement that counts (view ``production_verdicts``), ``solved``, or ``wrong_answer`` with the judgement's
label as its reason below ``production.fail_below``; ``details`` names the judgement's source and judge.
The run's failures are then mined and clustered (:func:`campflow.synthesis.pipeline.analyze_run`), so
``campflow failures``, ``show``, ``sql`` and the Inspect export read it like any run. An episode is filed
once, with the judgement that counts when it is filed.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from campflow.config import ProductionConfig, SynthesisConfig
from campflow.proxy.judging import ProductionEpisode, load_episodes
from campflow.serialization import to_json


@dataclass
class FilingSummary:
    """What :func:`file_judged` filed: the run, its episodes, failures and clusters."""

    run_id: str | None
    episodes: int = 0
    failures: int = 0
    clusters: int = 0


def file_judged(store: Any, cfg: ProductionConfig, synthesis: SynthesisConfig | None = None) -> FilingSummary:
    """File every judged production episode not yet filed into a new ``production`` run, then mine and
    cluster its failures (a score below ``cfg.fail_below``). Nothing to file: no run."""
    from campflow.storage.store import now
    from campflow.synthesis.pipeline import analyze_run

    rows = store.query(
        """SELECT v.episode_id, v.source, v.judge, v.score, v.label, v.reason, v.judgement_id
           FROM production_verdicts v
           WHERE v.episode_id NOT IN (SELECT e.episode_id FROM episodes e JOIN runs r USING (run_id)
                                      WHERE r.kind = 'production')
           ORDER BY v.episode_id"""
    )
    verdicts = {r["episode_id"]: r for r in rows}
    episodes = load_episodes(store, episode_ids=list(verdicts)) if verdicts else []
    if not episodes:
        return FilingSummary(None)
    stamp = now().strftime("%Y%m%d-%H%M%S")
    run_id = f"production-{stamp}-{secrets.token_hex(3)}"
    models = Counter(e.model for e in episodes)
    store.start_run(run_id, "production", {"production": cfg.model_dump(mode="json")}, models.most_common(1)[0][0])
    table = _episode_rows(run_id, cfg, episodes, verdicts)
    with store.transaction(_cf_production=table) as con:
        con.execute("INSERT INTO episodes BY NAME SELECT * FROM _cf_production")
    analysis = analyze_run(store, run_id, synthesis)
    failures = sum(1 for e in episodes if verdicts[e.episode_id]["score"] < cfg.fail_below)
    summary = FilingSummary(run_id, len(episodes), failures, len(analysis.clusters))
    store.finish_run(
        run_id, "completed", {"episodes": summary.episodes, "failures": failures, "clusters": summary.clusters}
    )
    return summary


def _episode_rows(
    run_id: str, cfg: ProductionConfig, episodes: Sequence[ProductionEpisode], verdicts: dict[str, dict[str, Any]]
) -> pa.Table:
    from campflow.storage.store import EPISODE_SCHEMA, now

    created = now()
    rows: dict[str, list[Any]] = {name: [] for name in EPISODE_SCHEMA.names}
    for e in episodes:
        v = verdicts[e.episode_id]
        failed = v["score"] < cfg.fail_below
        from campflow.synthesis.mining import slug

        values = {
            "episode_id": e.episode_id,
            "run_id": run_id,
            "instance_id": f"{cfg.bootcamp}:{e.episode_id}",
            "bootcamp": cfg.bootcamp,
            "level": None,
            "model_id": e.model,
            "sample_index": 0,
            "reward": float(v["score"]),
            "success": not failed,
            "termination": "wrong_answer" if failed else "solved",
            "turns": sum(1 for m in e.transcript if m.get("role") == "assistant"),
            "tool_calls": e.tool_calls,
            "invalid_calls": 0,
            "prompt_tokens": e.prompt_tokens,
            "completion_tokens": e.completion_tokens,
            "latency_s": e.upstream_s,
            "wall_s": e.wall_s,
            "transcript": to_json(e.transcript),
            "details": to_json(
                {
                    "reason": (slug(v["label"]) or "judged_failure") if failed else "judged_success",
                    "judgement_source": v["source"],
                    "judge": v["judge"],
                    "judgement_id": v["judgement_id"],
                    "why": v["reason"],
                    "calls": e.calls,
                }
            ),
            "error": None,
            "created_at": created,
        }
        for name in EPISODE_SCHEMA.names:
            rows[name].append(values[name])
    return pa.Table.from_pydict(rows, schema=EPISODE_SCHEMA)
