"""Suspicious successes on record: a run's solved episodes flagged (:mod:`campflow.integrity.suspicion`),
their shares per run, bootcamp and level (views ``suspicious_successes`` and ``suspicious_shares``), and the
rise between two runs that the promotion gate refuses (:func:`largest_rise`)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pyarrow as pa

from campflow.bootcamps.base import Bootcamp
from campflow.integrity.suspicion import Flag, Reference, flags_for, reference
from campflow.storage.store import Store, now
from campflow.storage.workspace import Workspace


def mine_suspicious(ws: Workspace, run_id: str, *, refresh: bool = False) -> int:
    """Flag ``run_id``'s solved episodes (once per run unless ``refresh``); returns how many are flagged."""
    store = ws.store
    if not refresh and store.scalar("SELECT 1 FROM suspicion_mined WHERE run_id = ?", [run_id]):
        return int(store.scalar("SELECT count(DISTINCT episode_id) FROM suspicious_flags WHERE run_id = ?", [run_id]))
    rows = store.query(
        "SELECT e.episode_id, e.bootcamp, e.level, e.instance_id, e.turns, e.transcript, i.params, i.seed "
        "FROM episodes e JOIN instances i USING (instance_id) WHERE e.run_id = ? AND e.success "
        "ORDER BY e.instance_id, e.sample_index",
        [run_id],
    )
    bootcamps: dict[str, Bootcamp] = {}
    refs: dict[str, Reference] = {}
    found: list[tuple[dict, Flag]] = []
    for r in rows:
        name = r["bootcamp"]
        if name not in bootcamps:
            bootcamps[name] = ws.bootcamp(name)
        bootcamp = bootcamps[name]
        instance = bootcamp.generate(json.loads(r["params"]), int(r["seed"]))
        if r["instance_id"] not in refs:
            refs[r["instance_id"]] = reference(bootcamp, instance)
        transcript = json.loads(r["transcript"])
        found += [(r, f) for f in flags_for(bootcamp, instance, transcript, int(r["turns"]), refs[r["instance_id"]])]
    ts = now()
    table = pa.table(
        {
            "episode_id": pa.array([r["episode_id"] for r, _ in found], pa.string()),
            "run_id": pa.array([run_id] * len(found), pa.string()),
            "bootcamp": pa.array([r["bootcamp"] for r, _ in found], pa.string()),
            "level": pa.array([r["level"] for r, _ in found], pa.int32()),
            "instance_id": pa.array([r["instance_id"] for r, _ in found], pa.string()),
            "flag": pa.array([f.flag for _, f in found], pa.string()),
            "detail": pa.array([f.detail for _, f in found], pa.string()),
            "mined_at": pa.array([ts] * len(found), pa.timestamp("us")),
        }
    )
    with store.transaction(_campflow_flags=table) as con:
        con.execute("DELETE FROM suspicious_flags WHERE run_id = ?", [run_id])
        con.execute("INSERT INTO suspicious_flags BY NAME SELECT * FROM _campflow_flags")
        con.execute("INSERT OR REPLACE INTO suspicion_mined VALUES (?, ?)", [run_id, ts])
    return len({r["episode_id"] for r, _ in found})


def shares(store: Store, run_id: str) -> list[dict]:
    """``suspicious_shares`` rows of ``run_id`` (per bootcamp and level)."""
    return store.query(
        "SELECT bootcamp, level, solved, suspicious, share FROM suspicious_shares WHERE run_id = ? ORDER BY ALL",
        [run_id],
    )


@dataclass(frozen=True)
class Rise:
    """One bootcamp's share of successes carrying one flag, before and after."""

    bootcamp: str
    flag: str
    n_before: int
    p_before: float
    n_after: int
    p_after: float

    @property
    def delta(self) -> float:
        """after - before."""
        return self.p_after - self.p_before

    def says(self) -> str:
        """``maze fewer_turns 2.0% -> 30.0% of successes (+28.0 ± 9.1 points)``."""
        se = math.sqrt(
            sum(p * (1 - p) / n for p, n in ((self.p_before, self.n_before), (self.p_after, self.n_after)) if n)
        )
        return (
            f"{self.bootcamp} {self.flag} {self.p_before:.1%} -> {self.p_after:.1%} of successes "
            f"({100 * self.delta:+.1f} ± {100 * se:.1f} points)"
        )


def largest_rise(store: Store, before_run: str, after_run: str) -> Rise | None:
    """The (bootcamp, flag) whose share of successes rose most from ``before_run`` to ``after_run`` (both
    mined), or None when nothing rose."""
    rows = store.query(
        """WITH solved AS (SELECT run_id, bootcamp, count(*) AS n FROM episodes
                           WHERE run_id IN (?, ?) AND success GROUP BY ALL),
                flagged AS (SELECT f.run_id, f.bootcamp, f.flag, count(DISTINCT f.episode_id) AS k
                            FROM suspicious_flags f WHERE f.run_id IN (?, ?) GROUP BY ALL)
           SELECT s.run_id, s.bootcamp, f.flag, s.n, f.k FROM solved s JOIN flagged f USING (run_id, bootcamp)""",
        [before_run, after_run, before_run, after_run],
    )
    solved = {
        (r["run_id"], r["bootcamp"]): int(r["n"])
        for r in store.query(
            "SELECT run_id, bootcamp, count(*) AS n FROM episodes WHERE run_id IN (?, ?) AND success GROUP BY ALL",
            [before_run, after_run],
        )
    }
    share = {(r["run_id"], r["bootcamp"], r["flag"]): int(r["k"]) / int(r["n"]) for r in rows}
    rises = []
    for bootcamp, flag in {(b, f) for _, b, f in share}:
        nb, na = solved.get((before_run, bootcamp), 0), solved.get((after_run, bootcamp), 0)
        pb, pa_ = share.get((before_run, bootcamp, flag), 0.0), share.get((after_run, bootcamp, flag), 0.0)
        rises.append(Rise(bootcamp, flag, nb, pb, na, pa_))
    best = max(rises, key=lambda r: (r.delta, r.bootcamp, r.flag), default=None)
    return best if best is not None and best.delta > 0 else None
