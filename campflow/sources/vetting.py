"""What ``campflow import`` proves about a source before it records it, and what it does with what it finds.

Every level of the built bootcamp is probed on :data:`PROBE_SEEDS` instances
(:mod:`~campflow.sources.probes`). Then:

======================================  ===================================================================
finding                                 what the import does
======================================  ===================================================================
a level's generator raises, or does     the level is dropped with a note; the levels left are recorded in
not finish in ``level_seconds``         the spec (reasoning-gym's ``curriculum_levels``, the class adapter's
(puzzle24's level 4 loops forever)      ``levels``). No level left, or a source without per-level presets
                                        (all levels one config), is refused.
the same instance differs between two   refused, one line naming the source, the level and seed, and the
processes                               cause: the hash seed (``set`` order of strings: isomorphic_strings,
                                        polynomial_multiplication), the order instances were generated in,
                                        or neither (an unseeded generator, the clock)
a nonsense answer gets full marks       refused: a scorer that rewards anything (game_of_life_halting gives
                                        1.0 to any non-empty answer) would train a model to answer anything
``wrong_answer`` earns more than the    the bound is raised to what was measured, recorded in the spec
declared bound                          (option ``wrong_answer_bound``), with a note
the reference answer fails the          a note; the oracle skips those instances at run time (see
source's own scorer (jugs' "No          :mod:`~campflow.sources.single_turn`), the model is still
solution")                              scored on them
======================================  ===================================================================

By default (``cross_process=True``) the probes run in two child processes at once, with
``PYTHONHASHSEED`` 1 and 2 and in opposite orders, and each level is killed past ``level_seconds``;
when the two disagree a third child tells the causes apart. The cost is two interpreter starts that
import the source, side by side, plus the generation: ``campflow import reasoning-gym gcd`` takes 2.8 s
against 1.3 s without, an InternBootcamp class 17 s against 6 s (its package imports all 1,000
classes; measured on a loaded 2-core machine). ``cross_process=False`` (``campflow import ...
--no-process-check``) probes in this process instead: the same instances generated twice in opposite
orders, but no hash-seed check and no time limit, so a level that never finishes hangs the import.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from campflow.bootcamps.base import Bootcamp
from campflow.errors import ImportSourceError
from campflow.sources import ImportSpec
from campflow.sources.probes import LevelProbe, generated, probe_in_processes, probe_level
from campflow.sources.single_turn import AnswerBootcamp

PROBE_SEEDS = (0, 1, 2, 3)
LEVEL_SECONDS = 30.0
HASH_SEEDS = ("1", "2")


def vet_import(
    spec: ImportSpec,
    bootcamp: Bootcamp,
    *,
    cross_process: bool = True,
    level_seconds: float = LEVEL_SECONDS,
    say: Callable[[str], None] | None = None,
) -> ImportSpec:
    """Probe the bootcamp built from ``spec`` and return the spec to record (see the module docstring).

    ``say`` receives one line per note (dropped levels, a raised bound, a missing oracle).

    Raises:
        ImportSourceError: the source is not deterministic, its scorer rewards nonsense, or no level
            generates; the message names the source and what was found.
    """
    levels = sorted(bootcamp.levels)
    what = f"{spec.adapter} source {spec.source!r}"
    probes = (
        _across_processes(spec, levels, level_seconds)
        if cross_process
        else {lv: _in_process(what, bootcamp, lv) for lv in levels}
    )
    notes = list(getattr(bootcamp, "import_notes", ()))
    full = [f"level {lv} {p.nonsense_full[0]}" for lv, p in sorted(probes.items()) if p.nonsense_full]
    if full:
        raise ImportSourceError(
            f"{what}: its scorer gives full marks to answers that are no answer ({full[0]}); "
            "it would reward a model for anything, so it is not imported"
        )
    failed = {lv: p for lv, p in probes.items() if p.failed}
    keep = [lv for lv in levels if lv not in failed]
    if not keep:
        reasons = "; ".join(f"level {lv}: {p.error}" for lv, p in sorted(failed.items()))
        slow = any(p.timed_out for p in failed.values())
        raise ImportSourceError(
            f"{what}: no level generates ({reasons[:500]})"
            + ("; a slow generator can have more time with --level-seconds" if slow else "")
        )
    notes += [f"level {lv} dropped: {p.error}" for lv, p in sorted(failed.items())]
    bound = _measured_bound(bootcamp, [probes[lv] for lv in keep])
    if bound is not None:
        notes.append(
            f"wrong answers score up to {bound:g} here, above the declared bound "
            f"{bootcamp.wrong_answer_bound:g}; the bound on record is {bound:g}"
        )
    notes += _reference_notes(bootcamp, probes, keep)
    if failed or bound is not None:
        if not isinstance(bootcamp, AnswerBootcamp):
            lv, p = next(iter(sorted(failed.items())))
            raise ImportSourceError(f"{what} failed to generate level {lv}: {p.error}")
        spec = bootcamp.respec(spec, keep, bound)
    if failed:
        notes.append(
            f"levels on record: {len(keep)}, renumbered from 1"
            + (", the last repeated to make three" if len(keep) < 3 else "")
        )
    for note in notes:
        (say or (lambda _: None))(note)
    return spec


def _across_processes(spec: ImportSpec, levels: list[int], level_seconds: float) -> dict[int, LevelProbe]:
    with ThreadPoolExecutor(2) as pool:  # the two children run side by side
        first, second = pool.map(
            lambda run: probe_in_processes(
                spec, levels, PROBE_SEEDS, hash_seed=run[0], reverse=run[1], score=run[2], level_seconds=level_seconds
            ),
            [(HASH_SEEDS[0], False, True), (HASH_SEEDS[1], True, False)],
        )
    for lv in levels:
        a, b = first[lv], second[lv]
        if a.failed or b.failed:  # a level that fails in either process is dropped, whichever it was
            first[lv] = a if a.failed else b
            continue
        seed = next((s for s in PROBE_SEEDS if a.digests.get(s) != b.digests.get(s)), None)
        if seed is not None:
            raise ImportSourceError(_nondeterminism(spec, levels, lv, seed, a, b, level_seconds))
    return first


def _nondeterminism(
    spec: ImportSpec, levels: list[int], level: int, seed: int, a: LevelProbe, b: LevelProbe, level_seconds: float
) -> str:
    """The refusal for an instance that differs between the two processes, with its cause told apart.

    A third child replays the second's plan (every level, the same order) with the first's hash seed:
    agreeing with the first, the hash seed is the cause; with the second, the order; with neither, neither.
    """
    again = probe_in_processes(
        spec, levels, PROBE_SEEDS, hash_seed=HASH_SEEDS[0], reverse=True, score=False, level_seconds=level_seconds
    )[level]
    where = (
        f"{spec.adapter} source {spec.source!r} gives another task for the same instance in another "
        f"process (level {level}, seed {seed})"
    )
    cause = nondeterminism_cause(a.digests.get(seed), b.digests.get(seed), again.digests.get(seed))
    return f"{where}: {cause}; not imported, since an instance id must always mean one task"


def nondeterminism_cause(first: str | None, second: str | None, again: str | None) -> str:
    """Why one instance differed between two processes, from its digest in each and in a third.

    ``first`` ran with hash seed :data:`HASH_SEEDS` [0] in generation order, ``second`` with [1] in the
    opposite order, ``again`` with the first's hash seed in the second's order: agreeing with the first,
    the hash seed is the cause; with the second, the order; with neither, neither.
    """
    if again == first:
        return (
            "it depends on the hash seed (PYTHONHASHSEED 1 and 2 differ: the order of a set or dict of "
            "strings), which campflow cannot seed"
        )
    if again == second:
        return "it depends on the order instances are generated in (state kept between instances)"
    return "it differs even with the same hash seed and order (an unseeded generator, the clock)"


def _in_process(what: str, bootcamp: Bootcamp, level: int) -> LevelProbe:
    probe = probe_level(bootcamp, level, PROBE_SEEDS)
    if probe.failed:
        return probe
    for seed in reversed(PROBE_SEEDS):  # again, in the other order: state kept between instances shows
        if generated(bootcamp, level, seed)[1] != probe.digests[seed]:
            raise ImportSourceError(
                f"{what} gives another task for the same instance when generated again "
                f"(level {level}, seed {seed}); not imported, since an instance id must always "
                "mean one task"
            )
    return probe


def _measured_bound(bootcamp: Bootcamp, probes: list[LevelProbe]) -> float | None:
    """The bound to record where ``wrong_answer`` earned more than the bootcamp declares, else None."""
    measured = max((p.wrong_max for p in probes), default=0.0)
    if measured <= bootcamp.wrong_answer_bound + 1e-9:
        return None
    return math.ceil(measured * 1000) / 1000


def _reference_notes(bootcamp: Bootcamp, probes: dict[int, LevelProbe], keep: list[int]) -> list[str]:
    notes = []
    no_reference = next((probes[lv].no_reference for lv in keep if probes[lv].no_reference), "")
    if no_reference:
        notes.append(f"no oracle: {no_reference}")
    for lv in keep:
        p = probes[lv]
        if p.reference_failures:
            notes.append(
                f"level {lv}: the source's reference answer fails its own scorer on "
                f"{len(p.reference_failures)} of {p.scored} probes ({p.reference_failures[0]}); the oracle "
                "skips such instances, the model is still scored on them"
            )
    nonsense = max((probes[lv].nonsense_max for lv in keep), default=0.0)
    if isinstance(bootcamp, AnswerBootcamp) and nonsense > bootcamp.wrong_answer_bound + 1e-9:
        notes.append(
            f"answers that are no answer score up to {nonsense:g} (partial credit from the source's "
            "scorer; the wrong-answer policy submits the lowest-scoring one)"
        )
    return notes
