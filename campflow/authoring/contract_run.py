"""One module through the contract: two sandboxed processes side by side, their events turned into verdicts.

The first process (hash seed 1, levels and seeds in order) runs every check of
:mod:`campflow.authoring.checks`; the second (hash seed 2, everything in the opposite order) only builds
the bootcamp and generates the same instances, so their digests show whether an instance id means one
task in every process (the vetting's two-process check, :mod:`campflow.sources.vetting`).
Where they differ a third process tells the cause apart as the vetting does
(:func:`~campflow.sources.vetting.nondeterminism_cause`).

Every check of :data:`~campflow.authoring.checks.CHECKS` that applies gets a verdict: passed, failed
(with the reason and evidence) or not run (``passed`` None, with why: the module did not import, the
process died inside an earlier check).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from campflow.authoring.checks import CHECKS, LEVEL_CHECKS, PARENT_CHECKS
from campflow.authoring.sandbox import ChildRun, run_confined
from campflow.bootcamps.base import Bootcamp
from campflow.config import HackerConfig, SandboxConfig
from campflow.errors import IntegrityError
from campflow.integrity.battery import BatteryReport, Probe
from campflow.integrity.hacker import run_hacker
from campflow.sources.authored import source_sha256
from campflow.sources.vetting import HASH_SEEDS, nondeterminism_cause

#: seeds per level a served bootcamp's check uses unless told otherwise: each of its episodes starts a server
SERVED_INSTANCES = 2


@dataclass
class Verdict:
    """The outcome of one check (at one level, for per-level checks) on one module."""

    check: str
    level: int | None
    passed: bool | None  # None: not run
    reason: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        """``oracle level 2: <reason>`` (or ``... passed``)."""
        where = self.check + (f" level {self.level}" if self.level is not None else "")
        if self.passed:
            return f"{where}: passed"
        return f"{where}: {self.reason}" if self.passed is False else f"{where}: {self.reason or 'not run'}"


@dataclass
class ContractReport:
    """Every verdict on one module, with what the first process learned of it (class, levels, tools)."""

    sha256: str
    verdicts: list[Verdict]
    info: dict[str, Any] = field(default_factory=dict)
    isolation: tuple[str, ...] = ()
    probes: list[Probe] = field(default_factory=list)  # the adversarial pass's episodes, where it ran

    @property
    def accepted(self) -> bool:
        """Whether every check ran and passed."""
        return bool(self.verdicts) and all(v.passed for v in self.verdicts)

    @property
    def failures(self) -> list[Verdict]:
        """The failed verdicts, in check order."""
        return [v for v in self.verdicts if v.passed is False]


def run_contract(
    source: str,
    *,
    name: str,
    examples: Sequence[dict[str, Any]],
    instances: int,
    limits: SandboxConfig,
    grounding: bool = False,
    class_name: str | None = None,
    builtin: bool = False,
    served_instances: int | None = None,
    origin: Path | None = None,
) -> ContractReport:
    """Run the contract on ``source`` (to become bootcamp ``name``) in sandboxed processes; see the module
    docstring. ``instances`` is the number of seeds every level is checked on; ``grounding`` adds the
    demonstrator's grounding check (``campflow bootcamps check``); ``class_name`` picks the Bootcamp
    subclass where the module defines several; ``builtin``: ``name`` is a built-in bootcamp, built from
    the registry (``source`` then only names it). ``served_instances``: the seeds per level where the
    bootcamp turns out to be served (every episode starts its server; default ``instances``), said in
    ``info["served_seeds"]``. ``origin``: the file ``source`` was read from, imported there (its hash
    checked) so that what it finds beside itself (a server script, a data file) is found as it will be."""
    sha = source_sha256(source)
    plan: dict[str, Any] = {
        "name": name,
        "sha256": sha,
        "seeds": instances,
        "examples": list(examples),
        "grounding": grounding,
    }
    if class_name:
        plan["class"] = class_name
    if builtin:
        plan["builtin"] = name
    if served_instances:
        plan["served_seeds"] = min(served_instances, instances)
    if origin is not None:
        plan["origin"] = str(origin)
    with ThreadPoolExecutor(2) as pool:  # the two processes run side by side
        first_f = pool.submit(run_confined, source, plan, limits, hash_seed=HASH_SEEDS[0])
        second_f = pool.submit(
            run_confined, source, {**plan, "digests_only": True, "reverse": True}, limits, hash_seed=HASH_SEEDS[1]
        )
        first, second = first_f.result(), second_f.result()
    verdicts, info = _verdicts(first, bool(examples), grounding)
    levels = info.get("levels") or []
    if info:
        verdicts += _across_processes(source, plan, limits, levels, first, second)
    return ContractReport(sha, _in_check_order(verdicts), info, first.isolation)


def _verdicts(run: ChildRun, with_examples: bool, grounding: bool) -> tuple[list[Verdict], dict[str, Any]]:
    """The first process's verdicts, plus one for the check it died in and one "not run" per check left."""
    verdicts: list[Verdict] = []
    info: dict[str, Any] = {}
    running: tuple[str, int | None] | None = None
    for event in run.events:
        if "start" in event:
            running = (event["start"], event.get("level"))
        elif "verdict" in event:
            v = event["verdict"]
            verdicts.append(
                Verdict(v["check"], v.get("level"), v["passed"], v.get("reason", ""), v.get("evidence", {}))
            )
            running = None
        elif "info" in event:
            info = event["info"]
    expected = _expected(info.get("levels"), with_examples, grounding)
    if run.ended is not None:  # blame the check it was in, or (between two) the next one
        done = {(v.check, v.level) for v in verdicts}
        check, level = running or next((c for c in expected if c not in done), ("imports", None))
        evidence = {"stderr": run.stderr_tail[-1500:]}
        verdicts.append(Verdict(check, level, False, f"the sandboxed process {run.ended}", evidence))
    why = _why_not_run(verdicts, run)
    done = {(v.check, v.level) for v in verdicts}
    verdicts += [Verdict(c, lv, None, f"not run: {why}") for c, lv in expected if (c, lv) not in done]
    return verdicts, info


def _expected(levels: Sequence[int] | None, with_examples: bool, grounding: bool) -> list[tuple[str, int | None]]:
    """(check, level) of every verdict a module gets (levels unknown: one per check)."""
    out: list[tuple[str, int | None]] = []
    for check in CHECKS:
        if check in PARENT_CHECKS or (check == "examples" and not with_examples):
            continue
        if check == "grounded" and not grounding:
            continue
        if check in LEVEL_CHECKS:
            out += [(check, lv) for lv in levels] if levels else [(check, None)]
        else:
            out.append((check, None))
    return out


def _why_not_run(verdicts: list[Verdict], run: ChildRun) -> str:
    failed = {v.check for v in verdicts if v.passed is False}
    if "imports" in failed:
        return "the module did not import"
    if "declarations" in failed:
        return "its declarations break the contract"
    if run.ended is not None:
        return f"the sandboxed process {run.ended.split(' (')[0]} during an earlier check"
    return "an earlier check failed"


def _across_processes(
    source: str, plan: dict[str, Any], limits: SandboxConfig, levels: Sequence[int], first: ChildRun, second: ChildRun
) -> list[Verdict]:
    mine, theirs = _digests(first), _digests(second)
    if not theirs:  # the second process could not build it or died: that is the verdict for every level
        second_v = [e["verdict"] for e in second.events if "verdict" in e and not e["verdict"]["passed"]]
        reason = second_v[0]["reason"] if second_v else f"the sandboxed process {second.ended or 'gave no digests'}"
        return [
            Verdict(
                "across_processes",
                lv,
                False,
                f"in a second process (PYTHONHASHSEED {HASH_SEEDS[1]}, the opposite order): {reason}",
                {"stderr": second.stderr_tail[-1500:]} if second.ended else {},
            )
            for lv in levels
        ]
    out = []
    again: dict[int, dict[int, str]] | None = None
    for level in levels:
        if level not in mine:
            out.append(Verdict("across_processes", level, None, "not run: not deterministic within one process"))
            continue
        seed = next((s for s in sorted(mine[level]) if mine[level][s] != theirs.get(level, {}).get(s)), None)
        if seed is None:
            out.append(Verdict("across_processes", level, True))
            continue
        if again is None:  # the third process: the first's hash seed in the second's order
            third = run_confined(
                source, {**plan, "digests_only": True, "reverse": True}, limits, hash_seed=HASH_SEEDS[0]
            )
            again = _digests(third)
        cause = nondeterminism_cause(mine[level][seed], theirs.get(level, {}).get(seed), again.get(level, {}).get(seed))
        out.append(
            Verdict(
                "across_processes",
                level,
                False,
                f"level {level} seed {seed} is another task in a second process (PYTHONHASHSEED "
                f"{HASH_SEEDS[1]}, instances generated in the opposite order): {cause}; build may use only its rng",
                {"level": level, "seed": seed},
            )
        )
    return out


def _digests(run: ChildRun) -> dict[int, dict[int, str]]:
    for event in run.events:
        if "digests" in event:
            return {int(lv): {int(s): d for s, d in seeds.items()} for lv, seeds in event["digests"].items()}
    return {}


def _in_check_order(verdicts: list[Verdict]) -> list[Verdict]:
    rank = {c: i for i, c in enumerate(CHECKS)}
    return sorted(verdicts, key=lambda v: (rank[v.check], v.level if v.level is not None else -1))


def add_hacker_verdicts(report: ContractReport, build: Callable[[], Bootcamp], hacker: HackerConfig | None) -> None:
    """The ``hacker`` check, per level, where ``hacker`` names a model: the adversarial pass
    (:mod:`campflow.integrity.hacker`) on the bootcamp ``build`` makes in this process, only once every
    sandboxed check held (the module then runs here as evaluation will run it); its episodes go to
    ``report.probes``. Nothing where no model is configured."""
    if hacker is None or not hacker.enabled:
        return
    levels = report.info.get("levels") or []
    if not report.accepted:
        report.verdicts += [Verdict("hacker", lv, None, "not run: an earlier check failed") for lv in levels or [None]]
        report.verdicts[:] = _in_check_order(report.verdicts)
        return
    try:
        played = run_hacker(build(), hacker)
    except IntegrityError as exc:
        report.verdicts += [Verdict("hacker", lv, False, str(exc)) for lv in levels]
    else:
        report.probes = played.probes
        for level in levels:
            hacks = [p for p in played.hacks if p.level == level]
            if not hacks:
                report.verdicts.append(Verdict("hacker", level, True))
                continue
            first = hacks[0]
            evidence = {"level": level, "seed": first.seed, "exploit": first.exploit, "answer": first.answer}
            report.verdicts.append(Verdict("hacker", level, False, _level_refusal(played, hacks), evidence))
    report.verdicts[:] = _in_check_order(report.verdicts)


def _level_refusal(report: BatteryReport, hacks: list[Probe]) -> str:
    """The battery's refusal line for one level's hacks."""
    one = BatteryReport(report.bootcamp, report.bound, hacks, partial_refuses=report.partial_refuses)
    return one.refusal()
