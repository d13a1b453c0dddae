"""``campflow rescore``: a run's stored episodes scored again by the current verifiers, beside the old scores.

After a verifier is fixed, the episodes it judged can be judged again without running the model: each is
replayed on a fresh world (:func:`campflow.integrity.rescore.replay`) and scored by the bootcamp as the
workspace resolves it now. The ``episodes`` table keeps its scores; every re-scored episode becomes a row
of ``episode_rescores`` (old and new reward and success), under one rescore id per call.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass, field

import pyarrow as pa

from campflow.bootcamps.base import Bootcamp
from campflow.errors import CampflowError
from campflow.integrity.rescore import replay
from campflow.rollout.episode import RETRYABLE, Termination
from campflow.serialization import to_json
from campflow.storage.store import now
from campflow.storage.workspace import Workspace


@dataclass(frozen=True)
class Rescored:
    """One episode's old and new score (new ones None where it could not be re-scored; ``error`` says why)."""

    episode_id: str
    instance_id: str
    bootcamp: str
    sample: int
    old_reward: float
    old_success: bool
    new_reward: float | None
    new_success: bool | None
    details: dict = field(default_factory=dict)
    error: str | None = None

    @property
    def changed(self) -> bool:
        """Whether the current verifier judges it otherwise."""
        return self.new_reward is not None and (
            abs(self.new_reward - self.old_reward) > 1e-9 or self.new_success != self.old_success
        )


@dataclass
class RescoreResult:
    """What one ``campflow rescore`` call found."""

    rescore_id: str
    run_id: str
    episodes: list[Rescored]

    @property
    def changed(self) -> list[Rescored]:
        """Episodes whose reward or success changed."""
        return [e for e in self.episodes if e.changed]

    @property
    def failed(self) -> list[Rescored]:
        """Episodes that could not be re-scored."""
        return [e for e in self.episodes if e.error is not None]


def rescore_run(ws: Workspace, run_id: str) -> RescoreResult:
    """Re-score every scored episode of ``run_id`` and record the scores (see the module docstring).

    Raises:
        CampflowError: the run has no episodes.
    """
    store = ws.store
    rows = store.query(
        "SELECT e.episode_id, e.instance_id, e.bootcamp, e.sample_index, e.reward, e.success, e.termination, "
        "e.transcript, i.params, i.seed FROM episodes e LEFT JOIN instances i USING (instance_id) "
        "WHERE e.run_id = ? ORDER BY e.bootcamp, e.instance_id, e.sample_index",
        [run_id],
    )
    if not rows:
        raise CampflowError(f"run {run_id!r} has no episodes to re-score; `campflow runs` lists the runs")
    bootcamps: dict[str, Bootcamp] = {}
    out = []
    for r in rows:
        old = dict(
            episode_id=r["episode_id"],
            instance_id=r["instance_id"],
            bootcamp=r["bootcamp"],
            sample=int(r["sample_index"]),
            old_reward=float(r["reward"]),
            old_success=bool(r["success"]),
        )
        if Termination(r["termination"]) in RETRYABLE:
            out.append(Rescored(**old, new_reward=None, new_success=None, error=f"never scored ({r['termination']})"))
            continue
        if r["params"] is None:
            out.append(Rescored(**old, new_reward=None, new_success=None, error="its instance is not recorded"))
            continue
        if r["bootcamp"] not in bootcamps:
            bootcamps[r["bootcamp"]] = ws.bootcamp(r["bootcamp"])
        bootcamp = bootcamps[r["bootcamp"]]
        instance = bootcamp.generate(json.loads(r["params"]), int(r["seed"]))
        episode = replay(bootcamp, instance, json.loads(r["transcript"]))
        if episode.termination in RETRYABLE:
            out.append(Rescored(**old, new_reward=None, new_success=None, error=episode.error or "replay failed"))
        else:
            out.append(Rescored(**old, new_reward=episode.reward, new_success=episode.success, details=episode.details))
    result = RescoreResult(f"rescore-{dt.datetime.now(dt.UTC):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:4]}", run_id, out)
    _record(ws, result)
    return result


def _record(ws: Workspace, result: RescoreResult) -> None:
    ts, n, eps = now(), len(result.episodes), result.episodes
    rows = pa.table(
        {
            "rescore_id": pa.array([result.rescore_id] * n, pa.string()),
            "episode_id": pa.array([e.episode_id for e in eps], pa.string()),
            "run_id": pa.array([result.run_id] * n, pa.string()),
            "instance_id": pa.array([e.instance_id for e in eps], pa.string()),
            "bootcamp": pa.array([e.bootcamp for e in eps], pa.string()),
            "sample_index": pa.array([e.sample for e in eps], pa.int32()),
            "old_reward": pa.array([e.old_reward for e in eps], pa.float64()),
            "old_success": pa.array([e.old_success for e in eps], pa.bool_()),
            "new_reward": pa.array([e.new_reward for e in eps], pa.float64()),
            "new_success": pa.array([e.new_success for e in eps], pa.bool_()),
            "details": pa.array([to_json(e.details) for e in eps], pa.string()),
            "error": pa.array([e.error for e in eps], pa.string()),
            "rescored_at": pa.array([ts] * n, pa.timestamp("us")),
        }
    )
    with ws.store.transaction(_campflow_rescores=rows) as con:
        con.execute("INSERT INTO episode_rescores BY NAME SELECT * FROM _campflow_rescores")
