"""Stored episodes as people read them: the transcript with everything known about its instance and failure."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from campflow.errors import RunNotFoundError
from campflow.storage.store import Store

_SELECT = """
SELECT e.episode_id, e.run_id, e.instance_id, e.bootcamp, e.level, e.model_id, e.sample_index, e.reward,
       e.success, e.termination, e.turns, e.tool_calls, e.prompt_tokens, e.completion_tokens, e.latency_s,
       e.wall_s, e.transcript, e.details, e.error, e.created_at, i.split, i.params, i.seed, i.origin,
       i.variant_id, f.category, f.cluster_id, c.label AS cluster_label, f.features->>'$.reason' AS failure_reason
FROM episodes e
LEFT JOIN instances i USING (instance_id)
LEFT JOIN failures f USING (episode_id)
LEFT JOIN clusters c ON c.cluster_id = f.cluster_id
"""


@dataclass
class StoredEpisode:
    """One recorded episode, its instance (split, params) and, for a mined failure, its category and cluster."""

    episode_id: str
    run_id: str
    instance_id: str
    bootcamp: str
    level: int | None
    model_id: str
    sample: int
    reward: float
    success: bool
    termination: str
    turns: int
    tool_calls: int
    tokens: int
    wall_s: float
    transcript: list[dict[str, Any]]
    details: dict[str, Any]
    error: str | None
    created_at: Any
    split: str | None
    params: dict[str, Any]
    seed: int | None
    variant_id: str | None
    category: str | None
    cluster_id: str | None
    cluster_label: str | None
    failure_reason: str | None

    @property
    def reason(self) -> str:
        """Why it ended as it did, in a few words: the verifier's reason, the mined one, or the engine's error."""
        return str(self.details.get("reason") or self.failure_reason or self.error or "")

    def metadata(self) -> dict[str, Any]:
        """The facts a viewer filters on (JSON-able)."""
        return {
            "episode_id": self.episode_id,
            "run_id": self.run_id,
            "termination": self.termination,
            "reason": self.reason,
            "success": self.success,
            "failure_category": self.category,
            "failure_cluster": self.cluster_label,
            "cluster_id": self.cluster_id,
            "bootcamp": self.bootcamp,
            "level": self.level,
            "instance_id": self.instance_id,
            "split": self.split,
            "params": self.params,
            "seed": self.seed,
            "variant_id": self.variant_id,
            "model": self.model_id,
            "sample": self.sample,
            "turns": self.turns,
            "tool_calls": self.tool_calls,
            "tokens": self.tokens,
            "error": self.error,
        }


def _episode(row: dict[str, Any]) -> StoredEpisode:
    return StoredEpisode(
        episode_id=row["episode_id"],
        run_id=row["run_id"],
        instance_id=row["instance_id"],
        bootcamp=row["bootcamp"],
        level=row["level"],
        model_id=row["model_id"],
        sample=int(row["sample_index"]),
        reward=float(row["reward"]),
        success=bool(row["success"]),
        termination=row["termination"],
        turns=int(row["turns"]),
        tool_calls=int(row["tool_calls"]),
        tokens=int(row["prompt_tokens"] + row["completion_tokens"]),
        wall_s=float(row["wall_s"]),
        transcript=json.loads(row["transcript"] or "[]"),
        details=json.loads(row["details"] or "{}") or {},
        error=row["error"],
        created_at=row["created_at"],
        split=row["split"],
        params=json.loads(row["params"] or "{}") or {},
        seed=row["seed"],
        variant_id=row["variant_id"],
        category=row["category"],
        cluster_id=row["cluster_id"],
        cluster_label=row["cluster_label"],
        failure_reason=row["failure_reason"],
    )


def run_episodes(store: Store, run_id: str) -> list[StoredEpisode]:
    """Every episode of ``run_id``, by bootcamp, level, instance and sample.

    Raises:
        RunNotFoundError: the run has no episodes.
    """
    rows = store.query(
        _SELECT + " WHERE e.run_id = ? ORDER BY e.bootcamp, e.level, e.instance_id, e.sample_index", [run_id]
    )
    if not rows:
        raise RunNotFoundError(f"run {run_id!r} has no episodes in the store; `campflow runs` lists the runs")
    return [_episode(r) for r in rows]


def episode(store: Store, episode_id: str) -> StoredEpisode:
    """The episode ``episode_id``.

    Raises:
        RunNotFoundError: no episode has that id.
    """
    rows = store.query(_SELECT + " WHERE e.episode_id = ?", [episode_id])
    if not rows:
        raise RunNotFoundError(
            f"no episode {episode_id!r} in the store; `campflow failures` prints exemplar episode ids"
        )
    return _episode(rows[0])


def failed_episodes(store: Store, run_id: str, cluster: str | None = None) -> list[StoredEpisode]:
    """The mined failures of ``run_id``; with ``cluster`` (an id, an id prefix or a label) only that cluster's.

    Raises:
        RunNotFoundError: the run has no episodes, or ``cluster`` names none of its clusters.
    """
    episodes = [e for e in run_episodes(store, run_id) if e.category is not None]
    if cluster is None:
        return episodes
    picked = [e for e in episodes if e.cluster_id and (e.cluster_id.startswith(cluster) or e.cluster_label == cluster)]
    if not picked:
        known = sorted({f"{e.cluster_id[:8]} ({e.cluster_label})" for e in episodes if e.cluster_id})
        raise RunNotFoundError(
            f"--cluster {cluster!r}: no cluster of run {run_id!r} has that id or label; its clusters: "
            + (", ".join(known) or "none (run `campflow failures --run RUN` to mine and cluster it)")
        )
    return picked
