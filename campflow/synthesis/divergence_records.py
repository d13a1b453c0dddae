"""The ``divergences`` table: where each model failure of a run left every correct path.

:func:`record_divergences` asks :func:`campflow.synthesis.divergence.find_divergence` about every model
failure of a run (the episode's instance rebuilt from its params and seed, its transcript replayed) and
writes one row per failure in one batch: the divergence's turn, calls and kind, or the reason there is
none. The view ``divergence_summary`` counts them per run, bootcamp and kind.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import orjson
import pyarrow as pa

from campflow.bootcamps import registry
from campflow.bootcamps.base import Action, Bootcamp
from campflow.errors import RunNotFoundError
from campflow.rollout.episode import MODEL_FAILURES, Termination
from campflow.serialization import to_json
from campflow.storage.store import Store, now
from campflow.synthesis.divergence import FirstDivergence, find_divergence


@dataclass
class EpisodeDivergence:
    """One failed episode's divergence (a row of ``divergences``)."""

    episode_id: str
    run_id: str
    bootcamp: str
    instance_id: str
    level: int | None
    termination: str
    divergence: FirstDivergence = field(default_factory=FirstDivergence)


_FAILED_SQL = f"""
    SELECT e.episode_id, e.run_id, e.bootcamp, e.instance_id, e.level, e.termination, e.turns, e.transcript,
           i.params, i.seed
    FROM episodes e LEFT JOIN instances i USING (instance_id)
    WHERE e.run_id = ? AND e.termination IN ({", ".join(f"'{t.value}'" for t in sorted(MODEL_FAILURES))})
    ORDER BY e.bootcamp, e.instance_id, e.sample_index
"""


def record_divergences(
    store: Store, run_id: str, resolve: Callable[[str], Bootcamp] = registry.make
) -> list[EpisodeDivergence]:
    """Find the divergence of every model failure of ``run_id`` and write them to ``divergences``
    (one batch; a second call replaces the run's rows).

    Args:
        resolve: bootcamp name -> bootcamp (a workspace's resolver knows imported ones too).

    Raises:
        RunNotFoundError: the run has no episodes.
    """
    if not store.scalar("SELECT count(*) FROM episodes WHERE run_id = ?", [run_id]):
        raise RunNotFoundError(f"run {run_id!r} has no episodes; `campflow runs` lists the runs")
    out: list[EpisodeDivergence] = []
    bootcamps: dict[str, Bootcamp | Exception] = {}
    for r in store.query(_FAILED_SQL, [run_id]):
        row = EpisodeDivergence(
            r["episode_id"], r["run_id"], r["bootcamp"], r["instance_id"], r["level"], r["termination"]
        )
        out.append(row)
        if r["bootcamp"] not in bootcamps:
            try:
                bootcamps[r["bootcamp"]] = resolve(r["bootcamp"])
            except Exception as exc:
                bootcamps[r["bootcamp"]] = exc
        bootcamp = bootcamps[r["bootcamp"]]
        if isinstance(bootcamp, Exception):
            row.divergence = FirstDivergence(reason=f"not analysed: bootcamp {r['bootcamp']!r} unavailable: {bootcamp}")
            continue
        if r["params"] is None:
            row.divergence = FirstDivergence(reason="not analysed: the instance is not recorded")
            continue
        instance = bootcamp.generate(orjson.loads(r["params"]), int(r["seed"]))
        if instance.id != r["instance_id"]:
            row.divergence = FirstDivergence(reason="not analysed: the bootcamp no longer makes this instance")
            continue
        budget = int(r["turns"]) if r["termination"] == Termination.MAX_TURNS.value else None
        row.divergence = find_divergence(bootcamp, instance, orjson.loads(r["transcript"]), r["termination"], budget)
    _write(store, run_id, out)
    return out


def _action_json(action: Action | None) -> str | None:
    return None if action is None else to_json(dict(action.arguments))


def _write(store: Store, run_id: str, rows: Sequence[EpisodeDivergence]) -> None:
    ts, n = now(), len(rows)
    d = [r.divergence for r in rows]
    table = pa.table(
        {
            "episode_id": pa.array([r.episode_id for r in rows], pa.string()),
            "run_id": pa.array([r.run_id for r in rows], pa.string()),
            "bootcamp": pa.array([r.bootcamp for r in rows], pa.string()),
            "instance_id": pa.array([r.instance_id for r in rows], pa.string()),
            "level": pa.array([r.level for r in rows], pa.int32()),
            "termination": pa.array([r.termination for r in rows], pa.string()),
            "turn": pa.array([x.turn for x in d], pa.int32()),
            "call_index": pa.array([x.call_index for x in d], pa.int32()),
            "kind": pa.array([x.kind for x in d], pa.string()),
            "model_tool": pa.array([x.model_action.name if x.model_action else None for x in d], pa.string()),
            "model_arguments": pa.array([_action_json(x.model_action) for x in d], pa.string()),
            "oracle_tool": pa.array([x.oracle_action.name if x.oracle_action else None for x in d], pa.string()),
            "oracle_arguments": pa.array([_action_json(x.oracle_action) for x in d], pa.string()),
            "demonstrator_tool": pa.array(
                [x.demonstrator_action.name if x.demonstrator_action else None for x in d], pa.string()
            ),
            "demonstrator_arguments": pa.array([_action_json(x.demonstrator_action) for x in d], pa.string()),
            "reason": pa.array([x.reason for x in d], pa.string()),
            "found_at": pa.array([ts] * n, pa.timestamp("us")),
        }
    )
    with store.transaction(_campflow_divergences=table) as con:
        con.execute("DELETE FROM divergences WHERE run_id = ?", [run_id])
        con.execute("INSERT INTO divergences BY NAME SELECT * FROM _campflow_divergences")
