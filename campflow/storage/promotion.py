"""Before/after comparisons with binomial standard errors, and the gate a candidate must pass.

A pass rate ``p`` over ``n`` episodes has standard error ``sqrt(p (1 - p) / n)``; a difference of two
independent rates has ``sqrt(se_before² + se_after²)``. Two runs on the same instances are better compared
pair by pair (:func:`paired`): the difference is the share one solves and the other does not, minus the
reverse, and its standard error counts only the pairs where they disagree (McNemar's view). The gate promotes a candidate only if the
metric rises by more than nothing and by at least ``min_improvement``, and no bootcamp and no
(bootcamp, level) falls by more than ``max_regression``, and no bootcamp's share of suspicious successes
with one flag rises by more than ``max_suspicious_increase``; the decision carries its reason in words.

The candidate itself is chosen on evidence (:func:`choose_candidate`): the RL checkpoint only when it beats
its SFT checkpoint on held-out band instances by more than nothing and by at least ``rl_min_gain``.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal

from campflow.storage.schema import RETRYABLE_SQL
from campflow.storage.store import Store
from campflow.storage.suspicion import Rise


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


def run_metric(store: Store, run_id: str, metric: str) -> float:
    """A run's ``metric`` (``pass_rate``, else mean reward) over its episodes, infra failures left out;
    0 for a run with none."""
    column = "success::INTEGER" if metric == "pass_rate" else "reward"
    value = store.scalar(
        f"SELECT avg({column}) FROM episodes WHERE run_id = ? AND termination NOT IN {RETRYABLE_SQL}", [run_id]
    )
    return float(value or 0.0)


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
class Paired:
    """Two runs on the same (instance, sample) pairs: how many pairs each passes, and where they disagree."""

    n: int
    both: int
    a_only: int  # pairs run A passes and run B fails
    b_only: int
    neither: int

    @property
    def p_a(self) -> float:
        """Run A's pass rate on the pairs."""
        return (self.both + self.a_only) / self.n if self.n else 0.0

    @property
    def p_b(self) -> float:
        """Run B's pass rate on the pairs."""
        return (self.both + self.b_only) / self.n if self.n else 0.0

    @property
    def delta(self) -> float:
        """A - B."""
        return (self.a_only - self.b_only) / self.n if self.n else 0.0

    @property
    def se(self) -> float:
        """Standard error of ``delta`` from the per-pair differences (each +1, 0 or -1)."""
        if not self.n:
            return 0.0
        return math.sqrt(max((self.a_only + self.b_only) / self.n - self.delta**2, 0.0) / self.n)

    @property
    def se_independent(self) -> float:
        """Standard error of ``delta`` were the two rates measured on different instances."""
        return math.sqrt(binomial_se(self.p_a, self.n) ** 2 + binomial_se(self.p_b, self.n) ** 2)


def paired(store: Store, run_a: str, run_b: str, instance_ids: Collection[str] | None = None) -> Paired:
    """Runs ``run_a`` and ``run_b`` compared on the (instance, sample) pairs both measured (optionally only
    of ``instance_ids``); a pair with an infra failure on either side is left out."""
    only = " AND a.instance_id IN (SELECT unnest(?))" if instance_ids is not None else ""
    row = store.query(
        f"""SELECT count(*) AS n, count(*) FILTER (WHERE a.success AND b.success) AS both_pass,
                   count(*) FILTER (WHERE a.success AND NOT b.success) AS a_only,
                   count(*) FILTER (WHERE b.success AND NOT a.success) AS b_only
            FROM episodes a JOIN episodes b USING (instance_id, sample_index)
            WHERE a.run_id = ? AND b.run_id = ? AND a.termination NOT IN {RETRYABLE_SQL}
              AND b.termination NOT IN {RETRYABLE_SQL}{only}""",
        [run_a, run_b, *([list(instance_ids)] if instance_ids is not None else [])],
    )[0]
    n, both, a_only, b_only = (int(row[k] or 0) for k in ("n", "both_pass", "a_only", "b_only"))
    return Paired(n, both, a_only, b_only, n - both - a_only - b_only)


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
    suspicion: Rise | None = None,
    max_suspicious_increase: float = 1.0,
) -> Decision:
    """The promotion decision (see the module docstring); ``before``/``after`` are the metric's values.

    ``suspicion`` is the largest rise of a (bootcamp, flag) share of suspicious successes
    (:func:`campflow.storage.suspicion.largest_rise`); above ``max_suspicious_increase`` it refuses.
    """
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
    if suspicion is not None and suspicion.delta > max_suspicious_increase + 1e-9:
        return Decision(
            False,
            f"{change}, but suspicious successes rose: {suspicion.says()}, more than "
            f"improve.max_suspicious_increase = {max_suspicious_increase:.0%}",
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


@dataclass(frozen=True)
class CandidateChoice:
    """Which checkpoint of a cycle is its candidate (``sft`` or ``rl``), its model id, and why."""

    kind: Literal["sft", "rl"]
    model_id: str
    reason: str


def choose_candidate(
    sft_model: str, rl_model: str | None, effect: dict[str, Any] | None, *, rl_min_gain: float
) -> CandidateChoice:
    """The RL checkpoint only when ``effect`` (the SFT and RL pass rates on held-out band instances, as the
    ``rl-effect`` step records them) shows it beating the SFT checkpoint by more than nothing and by at least
    ``rl_min_gain``; the SFT checkpoint otherwise, also when RL did not run or was not measured."""
    if rl_model is None:
        return CandidateChoice("sft", sft_model, "the SFT checkpoint: RL did not run")
    if not effect:
        return CandidateChoice(
            "sft", sft_model, "the SFT checkpoint: the RL checkpoint was not measured on held-out band instances"
        )
    n = int(effect["instances"]) * int(effect["samples"])
    sft, rl = float(effect["sft"]), float(effect["rl"])
    se = math.sqrt(binomial_se(sft, n) ** 2 + binomial_se(rl, n) ** 2)
    measured = (
        f"on {effect['instances']} held-out band instances x {effect['samples']} samples the RL checkpoint "
        f"scored {rl:.1%}, the SFT checkpoint {sft:.1%} ({100 * (rl - sft):+.1f} ± {100 * se:.1f} points)"
    )
    if rl > sft and rl - sft >= rl_min_gain - 1e-9:
        return CandidateChoice(
            "rl", rl_model, f"the RL checkpoint: {measured}, a gain of at least improve.rl_min_gain = {rl_min_gain:g}"
        )
    return CandidateChoice(
        "sft",
        sft_model,
        f"the SFT checkpoint: {measured}, not a gain of more than nothing and at least "
        f"improve.rl_min_gain = {rl_min_gain:g}",
    )
