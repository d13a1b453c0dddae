"""Probing one level of a freshly built import: generate a few instances, and for single-turn sources grade answers.

:func:`probe_level` runs in whatever process calls it; :func:`probe_in_processes` runs it in child
processes (``python -m campflow.sources.probes``), each level under a time limit, and is
what :mod:`~campflow.sources.vetting` uses by default. A child reads its plan as JSON on
stdin and writes one JSON line per event on its own copy of stdout; whatever the source prints goes
to stderr, so a chatty generator cannot garble the protocol.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import queue
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from campflow.bootcamps.base import Bootcamp, Instance
from campflow.errors import CampflowError, ImportSourceError
from campflow.serialization import canonical_json
from campflow.sources import ImportSpec, build_bootcamp
from campflow.sources.single_turn import FULL, NONSENSE_ANSWERS, AnswerBootcamp

STARTUP_SECONDS = 180.0  # a child importing the source (InternBootcamp's package takes ~6 s)
_MODULE = "campflow.sources.probes"


@dataclass
class LevelProbe:
    """What probing one level found (digests are per seed: the same task has the same digest)."""

    level: int
    digests: dict[int, str] = field(default_factory=dict)
    error: str = ""  # generation failed (the source's error) or did not finish in time
    timed_out: bool = False
    no_reference: str = ""  # why the source gives no reference answer
    reference_failures: list[str] = field(default_factory=list)  # "seed 2: 'No solution' scores 0"
    nonsense_full: list[str] = field(default_factory=list)  # nonsense that got full marks
    nonsense_max: float = 0.0
    wrong_max: float = 0.0  # the most wrong_answer() earned
    scored: int = 0

    @property
    def failed(self) -> bool:
        """Whether the level cannot be kept: its generator fails or never finishes."""
        return bool(self.error) or self.timed_out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> LevelProbe:
        """Back from the JSON a child wrote (seed keys are strings there)."""
        return cls(**{**raw, "digests": {int(k): v for k, v in raw.get("digests", {}).items()}})


def generated(bootcamp: Bootcamp, level: int, seed: int) -> tuple[Instance, str]:
    """The instance at (level, seed) and a hash of everything it shows: its id, data and rendered prompt."""
    instance = bootcamp.generate(level, seed)
    shown = {"id": instance.id, "data": instance.data, "prompt": bootcamp.prompt(instance)}
    return instance, hashlib.sha256(canonical_json(shown).encode()).hexdigest()[:16]


def probe_level(bootcamp: Bootcamp, level: int, seeds: Sequence[int], *, score: bool = True) -> LevelProbe:
    """Generate ``seeds`` at ``level`` and, where ``score`` and the bootcamp is single-turn, grade answers.

    Graded per instance: the reference (it must get full marks from the source's own scorer), the
    answers in :data:`~campflow.sources.single_turn.NONSENSE_ANSWERS` (none may) and the
    bootcamp's own ``wrong_answer`` (its score is the measured bound).
    """
    result = LevelProbe(level)
    for seed in seeds:
        try:
            instance, result.digests[seed] = generated(bootcamp, level, seed)
        except CampflowError as exc:  # the adapter already said what failed
            result.error = _clipped(str(exc))
            return result
        except Exception as exc:  # the source's generator failed: the level is not usable
            result.error = _clipped(f"{type(exc).__name__}: {exc}")
            return result
        if score and isinstance(bootcamp, AnswerBootcamp):
            _grade_probes(bootcamp, instance, seed, result)
    return result


def _clipped(text: str, limit: int = 300) -> str:
    """``text`` within ``limit`` characters, keeping both ends (the source's own error comes last)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[: limit // 3]} ... {text[-(2 * limit // 3) :]}"


def _grade_probes(bootcamp: AnswerBootcamp, instance: Instance, seed: int, result: LevelProbe) -> None:
    result.scored += 1
    try:
        reference = bootcamp.reference(instance)
    except ImportSourceError as exc:
        result.no_reference = str(exc)
        reference = None
    except Exception as exc:  # the source's oracle raising on its own instance is an oracle failure
        result.reference_failures.append(f"seed {seed}: the reference raised {type(exc).__name__}: {exc}"[:200])
        reference = None
    if reference is not None:
        reward, error = bootcamp.safe_grade(instance, reference)
        if reward < FULL:
            result.reference_failures.append(
                f"seed {seed}: {reference[:60]!r} scores {reward:g}" + (f" ({error[:80]})" if error else "")
            )
    for answer in NONSENSE_ANSWERS:
        if answer == reference:
            continue
        reward, _ = bootcamp.safe_grade(instance, answer)
        result.nonsense_max = max(result.nonsense_max, reward)
        if reward >= FULL:
            result.nonsense_full.append(f"seed {seed}: {answer!r} scores 1")
    state = bootcamp.new_state(instance)
    action = bootcamp.wrong_answer(instance, state, random.Random(seed))
    if action is not None:
        reward, _ = bootcamp.safe_grade(instance, str(action.arguments.get("answer", "")))
        result.wrong_max = max(result.wrong_max, reward)


def probe_in_processes(
    spec: ImportSpec,
    levels: Sequence[int],
    seeds: Sequence[int],
    *,
    hash_seed: str,
    reverse: bool,
    score: bool,
    level_seconds: float,
) -> dict[int, LevelProbe]:
    """Probe ``levels`` in a child process with ``PYTHONHASHSEED=hash_seed``, each level under a time limit.

    ``reverse`` generates levels and seeds in the opposite order (so state a source keeps between
    instances shows). A level that runs past ``level_seconds`` kills the child and is reported as timed
    out; a new child carries on with the levels left. The seconds are the child's own (:class:`ChildClock`):
    time it spends waiting for a busy CPU does not count, so a level is not dropped because other work shares
    the machine. Raises ImportSourceError when a child cannot even build the bootcamp.
    """
    remaining = list(levels)
    results: dict[int, LevelProbe] = {}
    while remaining:
        plan = {
            "spec": spec.model_dump(mode="json"),
            "levels": remaining[::-1] if reverse else remaining,
            "seeds": list(seeds)[::-1] if reverse else list(seeds),
            "score": score,
        }
        for probe in _run_child(plan, hash_seed, level_seconds):
            results[probe.level] = probe
            remaining.remove(probe.level)
    return results


def _run_child(plan: dict[str, Any], hash_seed: str, level_seconds: float) -> list[LevelProbe]:
    env = {
        **os.environ,
        "PYTHONHASHSEED": hash_seed,
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
    }  # the modules this process found
    with tempfile.TemporaryFile("w+") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", _MODULE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
            text=True,
        )
        lines: queue.Queue[str | None] = queue.Queue()
        reader = threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True)
        reader.start()
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(plan))
        proc.stdin.close()
        found: list[LevelProbe] = []
        current, clock, budget = None, ChildClock(proc.pid), STARTUP_SECONDS
        try:
            while True:
                try:
                    line = lines.get(timeout=min(_POLL_S, max(0.0, budget - clock.seconds())))
                except queue.Empty:
                    if clock.seconds() < budget:
                        continue
                    if current is None:
                        raise ImportSourceError(
                            f"{plan['spec']['source']}: building it in a fresh process took "
                            f"over {STARTUP_SECONDS:.0f} s"
                        ) from None
                    found.append(
                        LevelProbe(
                            current,
                            timed_out=True,
                            error=(f"did not finish generating {len(plan['seeds'])} instances in {level_seconds:g} s"),
                        )
                    )
                    return found
                if line is None:
                    break
                event = json.loads(line)
                if "start" in event:
                    current, clock, budget = event["start"], ChildClock(proc.pid), level_seconds
                elif "probe" in event:
                    found.append(LevelProbe.from_json(event["probe"]))
                    current, clock, budget = None, ChildClock(proc.pid), level_seconds
                elif "fatal" in event:
                    raise ImportSourceError(event["fatal"])
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            reader.join(timeout=5)
        if current is not None:  # the child died inside a level (a crash, os._exit, out of memory)
            stderr.seek(0)
            tail = " ".join(stderr.read().split()[-30:])
            died = f"the generating process died (exit {proc.returncode}): {tail}"
            found.append(LevelProbe(current, error=died[:300]))
        elif not found and plan["levels"]:
            stderr.seek(0)
            raise ImportSourceError(
                f"{plan['spec']['source']}: a fresh process could not probe it (exit "
                f"{proc.returncode}): {' '.join(stderr.read().split()[-30:])}"[:400]
            )
        return found


_POLL_S = 0.25  # how often the parent looks at the child's clock while no line comes


class ChildClock:
    """Seconds a child process has had since this clock started: wall time less the time its main thread
    spent runnable but waiting for a CPU (``/proc/PID/schedstat``'s run-queue wait). A generator that loops
    forever or blocks (on a lock, a socket, a sleep) uses up its budget as it would on an idle machine; one that
    only waits behind other work on a loaded machine does not. Where the kernel keeps no schedstat, wall time.
    """

    def __init__(self, pid: int) -> None:
        self._path = f"/proc/{pid}/schedstat"
        self._wall0 = time.monotonic()
        self._queued0 = self._queued()

    def _queued(self) -> float:
        try:
            with open(self._path) as f:
                return int(f.read().split()[1]) / 1e9
        except (OSError, ValueError, IndexError):  # no schedstat here, or the child has exited
            return 0.0

    def seconds(self) -> float:
        queued = self._queued()
        waited = queued - self._queued0 if queued >= self._queued0 else 0.0
        return max(0.0, time.monotonic() - self._wall0 - waited)


def _read_lines(stream: Any, lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _child() -> None:
    """The child process: build the spec's bootcamp and probe the planned levels, one JSON line per event."""
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what the source prints goes to stderr, not into the protocol
    sys.stdout = sys.stderr
    plan = json.loads(sys.stdin.read())

    def emit(event: dict[str, Any]) -> None:
        out.write(json.dumps(event) + "\n")
        out.flush()

    try:
        bootcamp = build_bootcamp(ImportSpec.model_validate(plan["spec"]))
    except Exception as exc:  # the parent built it, so this is worth its one line
        emit(
            {
                "fatal": f"{plan['spec']['source']}: building it in a fresh process failed: "
                f"{type(exc).__name__}: {exc}"[:400]
            }
        )
        return
    for level in plan["levels"]:
        emit({"start": level})
        emit({"probe": dataclasses.asdict(probe_level(bootcamp, level, plan["seeds"], score=plan["score"]))})


if __name__ == "__main__":
    _child()
