"""The curriculum: which level the next training round uses, per bootcamp and per cluster.

After a training round, the train pass rate at the current level decides: at or above ``up`` the level
rises to the next one, below ``down`` it falls to the previous one, in between it stays. A bootcamp's
levels are its presets; a cluster's levels are the ``level`` knobs of its accepted variants, so a
cluster's synthesized tasks are also served easiest first. Decisions are recorded per run in
``curriculum`` (re-deciding for the same run replaces its decision rather than stepping twice); the
view ``curriculum_levels`` holds the current level of each. The improve flow trains (collects, and
draws RL prompts) at :func:`train_levels` and steps the curriculum each cycle on its candidate's
held-out train-side episodes (probes and fresh train instances); the eval split never moves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from campflow.bootcamps import registry
from campflow.storage.schema import RETRYABLE_SQL
from campflow.storage.store import Store, now

BOOTCAMP_SCOPE = ""  # the cluster_id of a bootcamp-wide decision


@dataclass(frozen=True)
class LevelDecision:
    """One curriculum step: the level a scope was at, the pass rate measured there, and the next level."""

    run_id: str
    bootcamp: str
    cluster_id: str  # BOOTCAMP_SCOPE for the bootcamp as a whole
    level: int
    next_level: int
    pass_rate: float | None
    episodes: int


def step_level(level: int, pass_rate: float | None, levels: Sequence[int], up: float, down: float) -> int:
    """The next level: one up at ``pass_rate >= up``, one down below ``down``, else (or unmeasured) the same."""
    ordered = sorted(set(levels))
    if pass_rate is None or not ordered:
        return level
    here = min(range(len(ordered)), key=lambda i: (abs(ordered[i] - level), ordered[i]))
    if pass_rate >= up:
        return ordered[min(here + 1, len(ordered) - 1)]
    if pass_rate < down:
        return ordered[max(here - 1, 0)]
    return ordered[here]


def current_level(store: Store, bootcamp: str, cluster_id: str | None = None, *, before_run: str | None = None) -> int:
    """The level the next round of ``bootcamp`` (or one of its clusters) uses.

    The latest decision of any run but ``before_run``; with none yet, the lowest level.
    """
    row = store.query(
        "SELECT next_level FROM curriculum WHERE bootcamp = ? AND cluster_id = ? AND run_id <> ? "
        "ORDER BY decided_at DESC LIMIT 1",
        [bootcamp, cluster_id or BOOTCAMP_SCOPE, before_run or ""],
    )
    if row:
        return int(row[0]["next_level"])
    levels = _cluster_levels(store, cluster_id) if cluster_id else sorted(registry.make(bootcamp).levels)
    return min(levels) if levels else 1


def train_levels(store: Store, bootcamp: str, allowed: Sequence[int] | None = None) -> list[int]:
    """The levels ``bootcamp`` trains at: those of ``allowed`` (default: all) up to its curriculum level.

    Earlier levels stay in, so rising to a harder level does not stop rehearsing the easier ones.
    """
    levels = sorted(registry.make(bootcamp).levels)
    allowed = [lv for lv in (allowed or levels) if lv in levels] or levels
    current = current_level(store, bootcamp)
    return [lv for lv in allowed if lv <= current] or [min(allowed)]


def update_curriculum(
    store: Store, run_id: str, *, up: float = 0.8, down: float = 0.3, bootcamps: Sequence[str] | None = None
) -> list[LevelDecision]:
    """Decide the next level of every bootcamp and cluster that ``run_id`` played on the train side.

    Pass rates count only the run's train-split and probe episodes at each scope's current level, infra-failed and
    timed-out episodes left out. Scopes without such episodes keep their level and record nothing.
    """
    rows = store.query(
        f"""SELECT e.bootcamp, i.level, coalesce(v.cluster_id, '') AS cluster_id,
                  count(*) AS episodes, count(*) FILTER (WHERE e.success) AS solved
           FROM episodes e JOIN instances i USING (instance_id) LEFT JOIN variants v ON v.variant_id = i.variant_id
           WHERE e.run_id = ? AND i.split IN ('train', 'probe') AND e.termination NOT IN {RETRYABLE_SQL}
           GROUP BY ALL""",
        [run_id],
    )
    counts: dict[tuple[str, str, int], list[int]] = {}
    for r in rows:
        if bootcamps and r["bootcamp"] not in bootcamps:
            continue
        for scope in {BOOTCAMP_SCOPE, r["cluster_id"]}:
            c = counts.setdefault((r["bootcamp"], scope, r["level"]), [0, 0])
            c[0] += r["episodes"]
            c[1] += r["solved"]
    decisions = []
    for bootcamp, scope in sorted({(b, s) for b, s, _ in counts}):
        level = current_level(store, bootcamp, scope or None, before_run=run_id)
        episodes, solved = counts.get((bootcamp, scope, level), [0, 0])
        if not episodes:
            continue
        levels = _cluster_levels(store, scope) if scope else sorted(registry.make(bootcamp).levels)
        rate = solved / episodes
        decisions.append(
            LevelDecision(
                run_id, bootcamp, scope, level, step_level(level, rate, levels, up, down), round(rate, 4), episodes
            )
        )
    _write(store, decisions)
    return decisions


def _cluster_levels(store: Store, cluster_id: str) -> list[int]:
    rows = store.query(
        "SELECT DISTINCT i.level FROM instances i JOIN variants v USING (variant_id) "
        "WHERE v.cluster_id = ? AND v.status = 'accepted' ORDER BY 1",
        [cluster_id],
    )
    return [r["level"] for r in rows]


def _write(store: Store, decisions: Sequence[LevelDecision]) -> None:
    ts = now()
    store.insert(
        "curriculum",
        pa.table(
            {
                "run_id": [d.run_id for d in decisions],
                "bootcamp": [d.bootcamp for d in decisions],
                "cluster_id": [d.cluster_id for d in decisions],
                "level": pa.array([d.level for d in decisions], pa.int32()),
                "next_level": pa.array([d.next_level for d in decisions], pa.int32()),
                "pass_rate": pa.array([d.pass_rate for d in decisions], pa.float64()),
                "episodes": pa.array([d.episodes for d in decisions], pa.int32()),
                "decided_at": pa.array([ts] * len(decisions), pa.timestamp("us")),
            }
        ),
        on_conflict="replace",
    )
