"""Traits: what sets a cluster of failures apart, as regions of params where failures concentrate.

A *trait* of a cluster is a region of one knob (``steps>=3``, ``width=11``, ``operations in {*, /}``)
that holds most of the cluster's members and where the run's episodes fail clearly more often than
outside it. The baseline is the whole run of that bootcamp (its :class:`Population`), successes
included, so a knob that merely happens to vary inside the cluster scores nothing. The trait with the
largest failure-rate difference is the cluster's dominant trait; further traits are looked for inside it."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import orjson

from campflow.storage.schema import RETRYABLE_SQL
from campflow.storage.store import Store
from campflow.synthesis.knobs import Knob
from campflow.synthesis.mining import FAILURE_TERMINATIONS

# A region whose failure rate is barely above the rest of the run is noise, not a weakness.
MIN_TRAIT_SCORE = 0.05
# A trait describes where a cluster is: it must hold at least this share of the cluster's members.
MIN_COVER = 0.6


@dataclass(frozen=True)
class Trait:
    """A region of one knob where failures concentrate.

    Attributes:
        knob: the params field.
        op: ``>=``, ``<=``, ``between`` or ``=`` (numeric knobs: ``lo``/``hi``), or ``in`` (other knobs:
            ``values``).
        fail_in, fail_out: the run's failure rate inside and outside the region (within the regions of
            the cluster's traits before this one).
        score: ``fail_in - fail_out``.
    """

    knob: str
    op: str
    lo: float | None = None
    hi: float | None = None
    values: tuple[str, ...] = ()
    fail_in: float = 0.0
    fail_out: float = 0.0
    score: float = 0.0

    def text(self) -> str:
        """The region as a reader writes it: ``steps>=3``, ``2<=view_radius<=4``, ``operations in {+-*}``."""
        lo, hi = _fmt(self.lo), _fmt(self.hi)
        if self.op == ">=":
            return f"{self.knob}>={lo}"
        if self.op == "<=":
            return f"{self.knob}<={hi}"
        if self.op == "=":
            return f"{self.knob}={lo}" if self.lo is not None else f"{self.knob}={self.values[0]}"
        if self.op == "between":
            return f"{lo}<={self.knob}<={hi}"
        return f"{self.knob} in {{{', '.join(self.values)}}}"

    def contains(self, knob: Knob, value: Any) -> bool:
        """Whether ``value`` of ``knob`` lies in this region."""
        if self.values:
            return knob.category(value) in self.values
        x = knob.number(value)
        return not math.isnan(x) and (self.lo is None or x >= self.lo) and (self.hi is None or x <= self.hi)

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form, with the text, as stored in ``clusters.traits``."""
        return {**asdict(self), "values": list(self.values), "text": self.text()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Trait:
        """Inverse of :meth:`as_dict`."""
        return cls(
            d["knob"],
            d["op"],
            d.get("lo"),
            d.get("hi"),
            tuple(d.get("values") or ()),
            d.get("fail_in", 0.0),
            d.get("fail_out", 0.0),
            d.get("score", 0.0),
        )


@dataclass
class Population:
    """The distinct params a bootcamp played in a run, with how many episodes ran and failed on each."""

    params: list[dict[str, Any]]
    episodes: np.ndarray
    failures: np.ndarray
    _columns: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, store: Store, run_id: str, bootcamp: str) -> Population:
        """The population of ``bootcamp`` in ``run_id`` (infra-failed and timed-out episodes left out)."""
        marks = ", ".join("?" for _ in FAILURE_TERMINATIONS)
        rows = store.query(
            f"""SELECT i.params, count(*) AS episodes,
                       count(*) FILTER (WHERE e.termination IN ({marks})) AS failures
                FROM episodes e JOIN instances i USING (instance_id)
                WHERE e.run_id = ? AND e.bootcamp = ? AND e.termination NOT IN {RETRYABLE_SQL}
                GROUP BY i.params""",
            [*FAILURE_TERMINATIONS, run_id, bootcamp],
        )
        return cls(
            [orjson.loads(r["params"]) for r in rows],
            np.array([r["episodes"] for r in rows], float),
            np.array([r["failures"] for r in rows], float),
        )

    def subset(self, keep: Sequence[bool]) -> Population:
        """The part of the population where ``keep`` is true."""
        mask = np.asarray(keep, bool)
        return Population([p for p, k in zip(self.params, keep) if k], self.episodes[mask], self.failures[mask])

    def column(self, knob: Knob) -> Any:
        """The knob's value for every distinct params: floats (numeric knobs) or category labels."""
        if knob.name not in self._columns:
            values = [p.get(knob.name, knob.default) for p in self.params]
            self._columns[knob.name] = (
                np.array([knob.number(v) for v in values], float)
                if knob.numeric
                else np.array([knob.category(v) for v in values], object)
            )
        return self._columns[knob.name]


def knob_traits(
    knobs: Sequence[Knob], population: Population, members: Sequence[Mapping[str, Any]], most: int = 3
) -> list[Trait]:
    """The traits of a cluster whose members failed with ``members`` params, dominant first.

    Each trait after the first is measured inside the regions of those before it (a path, as in a
    decision tree): a knob that only looks implicated because the run happened to draw it together with
    the dominant one (larger operands among the longer problems) has no effect there and drops out.
    """
    traits: list[Trait] = []
    while len(traits) < most and population.params and members:
        candidates = [
            _numeric_trait(k, population, members) if k.numeric else _choice_trait(k, population, members)
            for k in knobs
            if k.name not in {t.knob for t in traits}
        ]
        found = [t for t in candidates if t is not None and t.score >= MIN_TRAIT_SCORE]
        if not found:
            break
        best = max(found, key=lambda t: t.score)  # ties keep the model's field order
        traits.append(best)
        knob = next(k for k in knobs if k.name == best.knob)
        population = population.subset([best.contains(knob, p.get(knob.name, knob.default)) for p in population.params])
        members = [m for m in members if best.contains(knob, m.get(knob.name, knob.default))]
    return traits


def _numeric_trait(knob: Knob, population: Population, members: Sequence[Mapping[str, Any]]) -> Trait | None:
    """The interval holding most of the cluster where the run fails most, relative to outside it.

    Candidates are intervals between values the run played that hold at least ``MIN_COVER`` of the
    cluster's members; among them the largest failure-rate difference wins. So a cluster of 11x11 mazes
    finds the weakness it belongs to (``width>=9``), and a cluster of failures spread over every size
    finds where most of them, and the run's failures, concentrate.
    """
    mine = np.array([knob.number(m.get(knob.name, knob.default)) for m in members], float)
    mine = mine[~np.isnan(mine)]
    column = population.column(knob)
    known = ~np.isnan(column)
    if not mine.size or not known.any():
        return None
    values, inverse = np.unique(column[known], return_inverse=True)
    episodes = np.bincount(inverse, population.episodes[known], len(values))
    failures = np.bincount(inverse, population.failures[known], len(values))
    nearest = np.clip(np.searchsorted(values, mine), 0, len(values) - 1)
    held = np.bincount(nearest, minlength=len(values)).astype(float)
    cuts = _thin(np.arange(len(values)))
    lows, highs = cuts[:, None], cuts[None, :]
    cum_e, cum_f, cum_m = (np.concatenate([[0.0], np.cumsum(a)]) for a in (episodes, failures, held))
    e_in = cum_e[highs + 1] - cum_e[lows]
    f_in = cum_f[highs + 1] - cum_f[lows]
    cover = (cum_m[highs + 1] - cum_m[lows]) / mine.size
    best = _rates(e_in, f_in, cum_e[-1], cum_f[-1], (lows <= highs) & (cover >= MIN_COVER))
    if best is None:
        return None
    (i, j), fail_in, fail_out, score = best
    a, b = int(cuts[i]), int(cuts[j])
    lo, hi = float(values[a]), float(values[b])
    op = "=" if a == b else ">=" if b == len(values) - 1 else "<=" if a == 0 else "between"
    return Trait(knob.name, op, None if op == "<=" else lo, None if op == ">=" else hi, (), fail_in, fail_out, score)


def _choice_trait(knob: Knob, population: Population, members: Sequence[Mapping[str, Any]]) -> Trait | None:
    """The set of values, grown from the most failing, holding most of the cluster where the run fails most.

    Only values common enough to judge (see :func:`_support`) can join a set: with dozens of rare values,
    some set of them always fails more often than the rest by chance.
    """
    column = population.column(knob)
    values, inverse = np.unique(column, return_inverse=True)
    episodes = np.bincount(inverse, population.episodes, len(values))
    failures = np.bincount(inverse, population.failures, len(values))
    index = {str(v): i for i, v in enumerate(values)}
    held = np.zeros(len(values))
    for m in members:
        i = index.get(knob.category(m.get(knob.name, knob.default)))
        if i is not None:
            held[i] += 1
    common = np.flatnonzero(episodes >= _support(episodes.sum()))
    order = sorted(common, key=lambda v: -failures[v] / episodes[v])
    if not order:
        return None
    e_in = np.cumsum(episodes[order])[None, :]
    f_in = np.cumsum(failures[order])[None, :]
    cover = np.cumsum(held[order])[None, :] / len(members)
    best = _rates(e_in, f_in, episodes.sum(), failures.sum(), cover >= MIN_COVER)
    if best is None:
        return None
    (_, j), fail_in, fail_out, score = best
    chosen = tuple(sorted(str(values[v]) for v in order[: j + 1]))
    return Trait(
        knob.name, "=" if len(chosen) == 1 else "in", values=chosen, fail_in=fail_in, fail_out=fail_out, score=score
    )


def _support(episodes: float) -> float:
    """The fewest episodes a region (and the rest of the run) must hold to be judged: 10%, at least 10."""
    return max(10.0, 0.1 * episodes)


def _rates(
    e_in: np.ndarray,
    f_in: np.ndarray,
    e_all: float,
    f_all: float,
    allowed: np.ndarray,
) -> tuple[tuple[int, int], float, float, float] | None:
    """The best ``allowed`` candidate region (rows x columns of ``e_in``/``f_in``) by failure-rate difference.

    A region is a candidate when both it and the rest hold enough episodes (:func:`_support`) and its
    difference is at least three standard errors: the best of many candidate regions is compared, so
    the bar sits above the usual two, and chance differences of small regions do not count.
    """
    e_out, f_out = e_all - e_in, f_all - f_in
    p = f_all / e_all if e_all else 0.0
    if p in (0.0, 1.0):
        return None
    support = _support(e_all)
    ok = allowed & (e_in >= support) & (e_out >= support)
    with np.errstate(divide="ignore", invalid="ignore"):
        diff = f_in / e_in - f_out / e_out
        se = np.sqrt(p * (1 - p) * (1 / e_in + 1 / e_out))
    ok &= diff >= 3 * se
    if not ok.any():
        return None
    diff = np.where(ok, diff, -np.inf)
    i, j = np.unravel_index(int(np.argmax(diff)), diff.shape)
    fin, fout = f_in[i, j] / e_in[i, j], f_out[i, j] / e_out[i, j]
    return (int(i), int(j)), round(float(fin), 4), round(float(fout), 4), round(float(fin - fout), 4)


def _thin(indices: np.ndarray, most: int = 48) -> np.ndarray:
    """At most ``most`` candidate cut points, evenly spread, always keeping both ends."""
    if indices.size <= most:
        return indices
    return np.unique(indices[np.linspace(0, indices.size - 1, most).round().astype(int)])


def _fmt(x: float | None) -> str:
    if x is None:
        return ""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"
