"""The contract on one authored module, as it runs inside the sandbox (:mod:`campflow.authoring.confine`).

:data:`CHECKS` is the one list of what an authored module is judged on, in order:

==================  ================================================================================
check               passes when
==================  ================================================================================
``reply``           the model's reply holds a ``python`` code block (judged by the parent)
``imports``         the module imports and defines exactly one Bootcamp subclass, built by the
                    ``authored`` adapter as evaluation will build it
``declarations``    :func:`~campflow.bootcamps.contract.check_declarations`: three levels or more, each
                    its own params, and a final tool
``deterministic``   per level, :func:`~campflow.bootcamps.contract.check_deterministic` on every seed
``oracle``          per level, the oracle solves every instance with reward 1
                    (:func:`~campflow.bootcamps.contract.check_oracle_solves`)
``wrong_answer``    per level, a wrong ending never succeeds and stays within ``wrong_answer_bound``
                    (:func:`~campflow.bootcamps.contract.check_wrong_endings_bounded`), and an episode
                    in which the agent did nothing does not succeed
``battery``         per level, the hack battery (:mod:`campflow.integrity.battery`): no scripted
                    non-solution (empty, echoed, several answers, type confusion, boundary tool
                    arguments, no submit, the oracle's path perturbed) scores above the bound
``hacker``          per level, only where ``integrity.hacker`` names a model, and run by the parent
                    after every other check held (the sandbox has no network): the model's adversarial
                    pass (:mod:`campflow.integrity.hacker`) wins no episode the oracle disputes
``grounded``        per level, only with ``plan["grounding"]`` (``campflow bootcamps check``): the
                    demonstrator, played with a transcript as the engine builds one, passes only what
                    was shown before each call, never ends wrong and solves 90% of the instances
                    (:func:`~campflow.bootcamps.contract.check_demonstration_grounded`)
``examples``        each example's input, through the module's ``example_identity``, is solved by the
                    oracle with the example's answer (:func:`answers_match`); only with examples
``across_processes`` per level, a second process (another hash seed, the opposite order) generates the
                    same instances: the same digest (:func:`~campflow.sources.probes.generated`)
                    for every seed (judged by the parent from both processes' digests)
==================  ================================================================================

A served bootcamp (an MCP server as its tools) is checked the same way, each episode on a fresh server
(:func:`~campflow.bootcamps.contract.direct_episode`; the battery plays it through the engine): once
it is built, the server commands its declaration names for the instances checked are the only processes
the sandbox lets start (:func:`declared_servers`, :func:`campflow.authoring.confine.allow_servers`), and
it is checked on ``plan["served_seeds"]`` seeds per level where the plan gives that number (each
episode starts a server); the ``info`` event says how many (``served_seeds``).

With ``plan["discover"]`` the process checks nothing: it imports the module and says which classes it
defines (those it imports left out), which of them are Bootcamp subclasses and the ``name`` each
carries (:func:`discover`); ``campflow bootcamps check`` decides from that which class a file means.

Each check becomes one verdict event (``check``, ``level``, ``passed``, ``reason``, ``evidence``: the
seed, the instance, the step played last, the traceback's tail); a ``start`` event before it lets the parent blame the right
check when the process dies or runs out of time inside it.
"""

from __future__ import annotations

import errno
import json
import math
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from campflow.bootcamps import contract
from campflow.bootcamps.base import Bootcamp, Instance
from campflow.bootcamps.served import ServedTools
from campflow.errors import ContractError, ImportSourceError
from campflow.integrity.battery import SEEDS as BATTERY_SEEDS
from campflow.integrity.battery import run_battery
from campflow.serialization import canonical_json
from campflow.sources import ImportSpec
from campflow.sources.authored import build, defined_classes, load_module
from campflow.sources.probes import generated

CHECKS: tuple[str, ...] = (
    "reply",
    "imports",
    "declarations",
    "deterministic",
    "oracle",
    "wrong_answer",
    "battery",
    "hacker",
    "grounded",
    "examples",
    "across_processes",
)
LEVEL_CHECKS = (  # one verdict per level
    "deterministic",
    "oracle",
    "wrong_answer",
    "battery",
    "hacker",
    "grounded",
    "across_processes",
)
PARENT_CHECKS = ("reply", "hacker", "across_processes")  # judged outside the sandboxed process
MODULE_FILE = "module.py"  # the module's name in its sandbox folder
EVIDENCE_CHARS = 1500

Emit = Callable[[dict[str, Any]], None]


class LimitReached(BaseException):
    """A sandbox limit the module ran into (CPU time). A BaseException, so ``except Exception`` in the
    module does not swallow it."""


def run_plan(
    plan: dict[str, Any],
    emit: Emit,
    refused: Callable[[], Sequence[str]],
    *,
    permit_servers: Callable[[Sequence[Sequence[str]]], None] | None = None,
) -> None:
    """Run the planned checks on the module in the cwd, emitting ``start``, ``verdict``, ``info`` and
    ``digests`` events; with ``plan["digests_only"]`` only build it and emit the digests; with
    ``plan["discover"]`` only emit what :func:`discover` finds. ``permit_servers`` receives a served
    bootcamp's declared server commands before any of them starts (the sandbox's permission)."""
    if plan.get("discover"):
        emit(discover(plan["sha256"]))
        return
    runner = _Runner(plan, emit, refused)
    spec = ImportSpec(
        name=plan["name"],
        adapter="authored",
        source=plan.get("origin") or str(Path(MODULE_FILE).resolve()),  # the user's file, read where it lies
        options={"sha256": plan["sha256"], **({"class": plan["class"]} if plan.get("class") else {})},
    )
    made: list[Bootcamp] = []
    if plan.get("builtin"):  # a built-in bootcamp, as the registry builds it (its own version and instances)
        from campflow.bootcamps import registry

        if not runner.check("imports", None, lambda ev: made.append(registry.make(plan["builtin"]))):
            return
    elif not runner.check("imports", None, lambda ev: made.append(build(spec))):
        return
    bootcamp = made[0]
    levels = sorted(bootcamp.levels)
    seeds = list(range(int(plan["seeds"])))
    served = isinstance(bootcamp, ServedTools)
    if served and plan.get("served_seeds"):
        seeds = seeds[: int(plan["served_seeds"])]
    emit({"info": {**_info(bootcamp), **({"served_seeds": len(seeds)} if served else {})}})

    def declarations(evidence: dict[str, Any]) -> None:
        if served and permit_servers is not None:  # the sandbox's permission, before the first server starts
            permit_servers(declared_servers(bootcamp, levels, seeds))
        contract.check_declarations(bootcamp)

    if not runner.check("declarations", None, declarations):
        return
    if plan.get("digests_only"):
        emit({"digests": _digests(bootcamp, levels[::-1] if plan.get("reverse") else levels, seeds, plan)})
        return
    digests: dict[int, dict[int, str]] = {}
    for level in levels:
        runner.check("deterministic", level, lambda ev, lv=level: _deterministic(bootcamp, lv, seeds, ev, digests))
    emit({"digests": digests})
    for level in levels:
        runner.check(
            "oracle", level, lambda ev, lv=level: _stepped(contract.check_oracle_solves, bootcamp, lv, seeds, ev)
        )
    for level in levels:
        runner.check("wrong_answer", level, lambda ev, lv=level: _wrong(bootcamp, lv, seeds, ev))
    for level in levels:
        runner.check("battery", level, lambda ev, lv=level: _battery(bootcamp, lv, seeds, ev))
    if plan.get("grounding"):
        for level in levels:
            runner.check(
                "grounded",
                level,
                lambda ev, lv=level: _grounded(bootcamp, lv, seeds, ev),
            )
    if plan.get("examples"):
        runner.check("examples", None, lambda ev: _examples(bootcamp, plan["examples"], ev))


def declared_servers(bootcamp: Bootcamp, levels: Sequence[int], seeds: Sequence[int]) -> list[list[str]]:
    """The distinct server commands (argv templates) a served bootcamp declares for the instances the checks
    play (every level's ``seeds``, and the default level's seed 0 the declarations check asks for its tools);
    a URL server starts no process: none."""
    spec_of = getattr(bootcamp, "server_spec", None)
    if spec_of is None:
        return []
    out: list[list[str]] = []
    for level, seed in [(None, 0), *((lv, s) for lv in levels for s in seeds)]:
        command = spec_of(bootcamp.generate(level, seed)).command
        if command and list(command) not in out:
            out.append(list(command))
    return out


def discover(sha256: str) -> dict[str, Any]:
    """Import the module in the cwd and describe the classes it defines: ``{"classes": [{"name", "bootcamp",
    "declares"}, ...]}`` in definition order (``declares``: the ``name`` a Bootcamp subclass carries, its own
    or inherited, None where it has none), or ``{"classes": None, "error", "traceback"}`` where the import
    raised."""
    try:
        module = load_module(Path(MODULE_FILE).resolve(), f"campflow_own_{sha256[:12]}")
    except BaseException as exc:  # noqa: BLE001  (whatever the module raised, SystemExit too, is the finding)
        if isinstance(exc, LimitReached | MemoryError):
            raise
        return {"classes": None, "error": _one_line(exc), "traceback": _traceback_tail(exc)}
    found = []
    for attr, cls in defined_classes(module).items():
        bootcamp = issubclass(cls, Bootcamp)
        declared = getattr(cls, "name", None) if bootcamp else None
        found.append({"name": attr, "bootcamp": bootcamp, "declares": declared if isinstance(declared, str) else None})
    return {"classes": found}


class _Runner:
    def __init__(self, plan: dict[str, Any], emit: Emit, refused: Callable[[], Sequence[str]]) -> None:
        self.plan, self.emit, self.refused = plan, emit, refused

    def check(self, name: str, level: int | None, run: Callable[[dict[str, Any]], Any]) -> bool:
        """Run one check, emit its verdict; True if it passed."""
        self.emit({"start": name, "level": level})
        before = len(self.refused())
        evidence: dict[str, Any] = {}
        problem: str | None = None
        try:
            outcome = run(evidence)
            problem = outcome if isinstance(outcome, str) else None
        except ContractError as exc:
            problem = str(exc)
        except ImportSourceError as exc:
            problem = str(exc)
        except LimitReached as exc:
            problem = f"{exc} ({self.plan['limits']['cpu_s']} s)"
        except MemoryError:
            problem = f"ran out of memory: the sandbox allows {self.plan['limits']['memory_mb']} MiB"
        except OSError as exc:
            problem = (
                f"wrote a file past the sandbox's size limit of {self.plan['limits']['file_mb']} MiB"
                if exc.errno == errno.EFBIG
                else _one_line(exc)
            )
            evidence["traceback"] = _traceback_tail(exc)
        except Exception as exc:  # the module's own bug: its message and where it happened go back to the LLM
            problem = _one_line(exc)
            evidence["traceback"] = _traceback_tail(exc)
        refusals = self.refused()[before:]
        if refusals:  # even where the module caught the refusal: it tried
            problem = f"the sandbox refused {refusals[0]}" + (
                f" ({len(refusals)} refusals)" if len(refusals) > 1 else ""
            )
        if problem is not None and "seed" in evidence and "instance" not in evidence:
            evidence["instance"] = _instance_text(evidence.get("bootcamp"), evidence)
        self.emit(
            {
                "verdict": {
                    "check": name,
                    "level": level,
                    "passed": problem is None,
                    "reason": problem or "",
                    "evidence": {k: v for k, v in evidence.items() if k != "bootcamp"} if problem else {},
                }
            }
        )
        return problem is None


def _per_seed(
    check: Callable[[Bootcamp, int, Sequence[int]], None],
    bootcamp: Bootcamp,
    level: int,
    seeds: Sequence[int],
    evidence: dict[str, Any],
) -> None:
    """``check`` one seed at a time, so a failure's evidence names its seed and instance."""
    evidence.update(bootcamp=bootcamp, level=level)
    for seed in seeds:
        evidence["seed"] = seed
        check(bootcamp, level, [seed])
    evidence.pop("seed", None)


def _stepped(check: Callable[..., None], bootcamp: Bootcamp, level: int, seeds: Sequence[int], evidence: dict) -> None:
    """``check`` one seed at a time, recording the episode's steps, so a failure's evidence names its
    seed, instance and the step it went wrong at (the last played)."""
    evidence.update(bootcamp=bootcamp, level=level)
    steps: list[str] = []
    for seed in seeds:
        evidence["seed"] = seed
        try:
            check(bootcamp, level, [seed], steps=steps)
        except BaseException:
            if steps:
                evidence["step"] = steps[-1]
                evidence["steps"] = steps[-8:]
            raise
    evidence.pop("seed", None)


def _grounded(bootcamp: Bootcamp, level: int, seeds: Sequence[int], evidence: dict[str, Any]) -> None:
    evidence.update(bootcamp=bootcamp, level=level)
    contract.check_demonstration_grounded(bootcamp, level, seeds, evidence=evidence)
    for key in ("step", "steps"):
        evidence.pop(key, None)


def _deterministic(
    bootcamp: Bootcamp, level: int, seeds: Sequence[int], evidence: dict[str, Any], digests: dict[int, dict[int, str]]
) -> None:
    evidence.update(bootcamp=bootcamp, level=level)
    for seed in seeds:  # one at a time first, so a failure's evidence names its seed
        evidence["seed"] = seed
        contract.check_deterministic(bootcamp, level, [seed])
    evidence.pop("seed", None)
    contract.check_deterministic(bootcamp, level, seeds)
    found = digests.setdefault(level, {})
    for seed in seeds:
        evidence["seed"] = seed
        found[seed] = generated(bootcamp, level, seed)[1]
    evidence.pop("seed", None)


def _wrong(bootcamp: Bootcamp, level: int, seeds: Sequence[int], evidence: dict[str, Any]) -> str | None:
    _per_seed(contract.check_wrong_endings_bounded, bootcamp, level, seeds, evidence)
    for seed in seeds:
        evidence["seed"] = seed
        instance = bootcamp.generate(level, seed)
        with contract.direct_episode(bootcamp, instance) as episode:
            score = episode.score()
        if score.success or score.reward > bootcamp.wrong_answer_bound:
            return (
                f"level {level} seed {seed}: an episode in which the agent did nothing scored reward "
                f"{score.reward}, success {score.success}; expected no success and at most "
                f"{bootcamp.wrong_answer_bound} (score must judge what was submitted)"
            )
    evidence.pop("seed", None)
    return None


def _battery(bootcamp: Bootcamp, level: int, seeds: Sequence[int], evidence: dict[str, Any]) -> str | None:
    """The hack battery on the first seeds of ``level``: the first exploit that worked, or None."""
    report = run_battery(bootcamp, levels=[level], seeds=list(seeds)[: len(BATTERY_SEEDS)])
    if report.passed:
        return None
    first = report.hacks[0]
    evidence.update(bootcamp=bootcamp, level=level, seed=first.seed, exploit=first.exploit, answer=first.answer)
    return report.refusal()


def _examples(bootcamp: Bootcamp, examples: Sequence[dict[str, Any]], evidence: dict[str, Any]) -> str | None:
    make = getattr(bootcamp, "example_identity", None)
    if not callable(make):
        return (
            "examples were given, but the module defines no method example_identity(self, example_input) "
            "returning the identity (what build returns) of the task an example's input describes"
        )
    params = bootcamp.levels[min(bootcamp.levels)]
    for number, example in enumerate(examples, 1):
        evidence.update(example=number, input=_clip(example["input"]), expected=example["answer"])
        data = make(example["input"])
        instance = Instance(
            id=f"example-{number}",
            bootcamp=bootcamp.name,
            version=bootcamp.version,
            params=params,
            seed=-number,
            data=data,
        )
        state, score = bootcamp.solve(instance)
        if not score.success:
            return (
                f"example {number}: the oracle's episode scored reward {score.reward}, success False ({score.details})"
            )
        if not answers_match(state.answer, example["answer"]):
            evidence["oracle_answer"] = _clip(state.answer)
            return f"example {number}: the oracle answered {_clip(state.answer, 200)}; the example's answer is {_clip(example['answer'], 200)}"
    for key in ("example", "input", "expected"):
        evidence.pop(key, None)
    return None


def answers_match(got: Any, expected: Any) -> bool:
    """Whether an oracle's ``state.answer`` is an example's answer: equal as JSON, as text (``str``,
    stripped), or as numbers within a relative 1e-9."""
    if got == expected or canonical_json(got) == canonical_json(expected):
        return True
    if str(got).strip() == str(expected).strip():
        return True
    try:
        a, b = float(str(got).strip()), float(str(expected).strip())
    except ValueError:
        return False
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _digests(bootcamp: Bootcamp, levels: Sequence[int], seeds: Sequence[int], plan: dict[str, Any]) -> dict:
    order = seeds[::-1] if plan.get("reverse") else seeds
    return {level: {seed: generated(bootcamp, level, seed)[1] for seed in order} for level in levels}


def _info(bootcamp: Bootcamp) -> dict[str, Any]:
    described = bootcamp.describe()
    return {
        "class": type(bootcamp).__name__,
        "version": bootcamp.version,
        "levels": sorted(bootcamp.levels),
        "tools": [t["name"] for t in described["tools"]],
        "summary": bootcamp.describe_task().split("\n")[0][:200],
    }


def _instance_text(bootcamp: Bootcamp | None, evidence: dict[str, Any]) -> str:
    if bootcamp is None:
        return ""
    try:
        return _clip(bootcamp.generate(evidence["level"], evidence["seed"]).data)
    except Exception as exc:  # the generator itself failed there: that is the evidence
        return f"(generating it raised {_one_line(exc)})"


def _clip(value: Any, limit: int = EVIDENCE_CHARS) -> str:
    try:
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 20]}... ({len(text)} chars)"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if isinstance(exc, SyntaxError) and exc.lineno:
        text = f"{exc.msg} (line {exc.lineno}: {(exc.text or '').strip()[:120]})"
    return f"{type(exc).__name__}: {text}"[:600]


def _traceback_tail(exc: BaseException, lines: int = 14) -> str:
    text = "".join(traceback.format_exception(exc)).rstrip().splitlines()
    tail = "\n".join(text[-lines:])
    return tail.replace(str(Path(MODULE_FILE).resolve()), MODULE_FILE)[-2500:]
