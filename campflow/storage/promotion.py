"""Before/after comparisons with binomial standard errors, and the gate a candidate must pass.

A pass rate ``p`` over ``n`` episodes has standard error ``sqrt(p (1 - p) / n)``; a difference of two
independent rates has ``sqrt(se_before² + se_after²)``. The gate promotes a candidate only if the
metric rises by more than nothing and by at least ``min_improvement``, and no bootcamp and no
(bootcamp, level) falls by more than ``max_regression``; the decision carries its reason in words.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from campflow.storage.schema import RETRYABLE_SQL
from campflow.storage.store import Store


@dataclass(frozen=True)
class Comparison:
    """One scope's pass rate before and after: the whole run, a bootcamp, or a bootcamp's level."""

    bootcamp: str | None  # None: every bootcamp together
    level: int | None  # None: every level together
    n_before: int
    p_before: float
    n_after: int
    p_after: float

    @property
    def scope(self) -> str:
        """``all``, ``maze`` or ``maze level 2``."""
        if self.bootcamp is None:
            return "all"
        return self.bootcamp if self.level is None else f"{self.bootcamp} level {self.level}"

    @property
    def delta(self) -> float:
        """after - before."""
        return self.p_after - self.p_before

    @property
    def se(self) -> float:
        """Standard error of the difference."""
        return math.sqrt(binomial_se(self.p_before, self.n_before) ** 2 + binomial_se(self.p_after, self.n_after) ** 2)

    def says(self) -> str:
        """``maze level 2 50.0% -> 25.0% (-25.0 ± 17.7 points)``."""
        return (
            f"{self.scope} {self.p_before:.1%} -> {self.p_after:.1%} "
            f"({100 * self.delta:+.1f} ± {100 * self.se:.1f} points)"
        )


def binomial_se(p: float, n: int) -> float:
    """Standard error of a pass rate ``p`` measured on ``n`` episodes (0 when nothing was measured)."""
    return math.sqrt(p * (1 - p) / n) if n else 0.0


def compare(store: Store, before_run: str, after_run: str) -> list[Comparison]:
    """Pass rates of two runs overall, per bootcamp and per (bootcamp, level), infra failures left out.

    A scope measured in only one of the runs counts as 0 of 0 in the other.
    """
    rows = store.query(
        f"""SELECT run_id, bootcamp, level, count(*) AS n, avg(success::INTEGER) AS p FROM episodes
            WHERE run_id IN (?, ?) AND termination NOT IN {RETRYABLE_SQL}
            GROUP BY GROUPING SETS ((run_id), (run_id, bootcamp), (run_id, bootcamp, level))""",
        [before_run, after_run],
    )
    cells: dict[tuple[str | None, int | None], dict[str, tuple[int, float]]] = {}
    for r in rows:
        cells.setdefault((r["bootcamp"], r["level"]), {})[r["run_id"]] = (int(r["n"]), float(r["p"] or 0.0))
    out = []
    for (bootcamp, level), runs in cells.items():
        nb, pb = runs.get(before_run, (0, 0.0))
        na, pa = runs.get(after_run, (0, 0.0))
        out.append(Comparison(bootcamp, level, nb, pb, na, pa))
    return sorted(out, key=lambda c: (c.bootcamp is not None, c.bootcamp or "", c.level is not None, c.level or 0))


@dataclass(frozen=True)
class Decision:
    """Whether the candidate is promoted, and why."""

    promoted: bool
    reason: str


def gate(
    comparisons: list[Comparison],
    *,
    metric: str,
    before: float,
    after: float,
    min_improvement: float,
    max_regression: float,
) -> Decision:
    """The promotion decision (see the module docstring); ``before``/``after`` are the metric's values."""
    overall = next((c for c in comparisons if c.bootcamp is None), None)
    if metric == "pass_rate":
        noise = f" ± {100 * overall.se:.1f}" if overall is not None else ""
        change = f"pass_rate {before:.1%} -> {after:.1%} ({100 * (after - before):+.1f}{noise} points)"
    else:
        change = f"{metric} {before:.3f} -> {after:.3f} ({after - before:+.3f})"
    if after <= before:
        return Decision(False, f"{change}: not an improvement")
    if after - before < min_improvement:
        return Decision(
            False, f"{change}: not an improvement of at least improve.min_improvement = {min_improvement:g}"
        )
    worst = min(
        (c for c in comparisons if c.bootcamp is not None and c.n_before and c.n_after),
        key=lambda c: c.delta,
        default=None,
    )
    if worst is not None and -worst.delta > max_regression + 1e-9:  # a drop of exactly the bound is allowed
        return Decision(
            False, f"{change}, but {worst.says()} fell by more than improve.max_regression = {max_regression:.0%}"
        )
    return Decision(
        True, f"{change}; no bootcamp or level fell by more than improve.max_regression = {max_regression:.0%}"
    )
