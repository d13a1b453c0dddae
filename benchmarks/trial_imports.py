"""Trial imports of real sources, as a new user makes them: how many import, stay deterministic and grade right.

    python benchmarks/trial_imports.py --source internbootcamp [--checkout PATH] [--stride 50]
    python benchmarks/trial_imports.py --source reasoning-gym [--only gcd,jugs]

Each item is tried in its own worker process, killed after ``--seconds``:

1. ``import_bootcamp`` into a fresh store, with the adapter's default checks; an error or a timeout
   means "not imported".
2. :data:`TRIAL_SEEDS` at every level of what was recorded: generated, then again in the other order
   (same tasks?), graded with a known-correct answer and with two nonsense answers.
3. A second worker, with another ``PYTHONHASHSEED``, rebuilds the recorded spec and generates the same
   instances: "deterministic" means both workers and both orders agree.

Known-correct answers: the bootcamp's oracle where it has one (every reasoning-gym dataset with
reference answers); for InternBootcamp classes, which have none, the reference the class's own
``case_generator`` stores in the identity (``ans``, ``expected``, ``correct_answer``, ... : see
:data:`REFERENCE_KEYS`) in the answer tags its prompt asks for, or, for Game24-style identities
(``puzzle`` and ``target``), an expression found by exhaustive search. Classes with none of these are
counted as "no known answer", not as failures.

InternBootcamp: the checkout (``$CAMPFLOW_INTERNBOOTCAMP``) must be importable with its requirements
installed (``pip install -e CHECKOUT``). Classes are every ``--stride``-th of the package's sorted class
names plus ``Game24bootcamp``, imported by file path (the Codeforces-derived ones do ``from bootcamp
import``), with ``--levels-from`` the class's ``examples/pipelines/*_configs/<name>_train.json`` where
one exists (file stem without ``codecontests<N>`` and ``_``, compared case-blind to the class name).
``--dotted`` imports them as ``internbootcamp:Name`` instead and ``--no-levels`` leaves the level files
out: together, what a campflow without file-path resolution or ``--levels-from`` could import.

Not in ``make bench`` (its name): it takes 10-30 minutes. Run it against an older checkout of campflow
(``PYTHONPATH=OLD python benchmarks/trial_imports.py ...``) for before/after figures; it uses only APIs
both have.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

TRIAL_SEEDS = (100, 101, 102)
NONSENSE = ("", "xyzzy plugh 42")
REFERENCE_KEYS = (
    "ans",
    "answer",
    "correct_answer",
    "expected",
    "expected_output",
    "expected_answer",
    "correct",
    "solution",
    "expected_sets",
    "correct_method",
    "target_answer",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", choices=["internbootcamp", "reasoning-gym"], default="reasoning-gym")
    parser.add_argument("--checkout", default=os.environ.get("CAMPFLOW_INTERNBOOTCAMP"))
    parser.add_argument("--stride", type=int, default=50)
    parser.add_argument("--dotted", action="store_true", help="import classes as internbootcamp:Name, not by file")
    parser.add_argument(
        "--no-levels",
        action="store_true",
        help="leave out InternBootcamp's level files (a campflow without --levels-from)",
    )
    parser.add_argument("--only", default="", help="comma-separated item names (default: all)")
    parser.add_argument("--seconds", type=float, default=180.0, help="time limit of each worker")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(_work(json.loads(sys.stdin.read()))))
        return
    if args.source == "internbootcamp":
        if not args.checkout:
            raise SystemExit(
                "trial_imports: pass --checkout or set CAMPFLOW_INTERNBOOTCAMP to an InternBootcamp checkout"
            )
        items = _internbootcamp_items(Path(args.checkout), args.stride, dotted=args.dotted, levels=not args.no_levels)
    else:
        items = _reasoning_gym_items()
    if args.only:
        items = [i for i in items if i["label"].split()[0] in args.only.split(",")]
    rows = []
    for item in items:
        started = time.monotonic()
        row = _trial(item, args.seconds, args.checkout)
        rows.append(row)
        print(
            f"{row['label']:<45} imported={_yn(row['imported'])} deterministic={_yn(row.get('deterministic'))} "
            f"graded={row.get('graded', '-'):<8} via={','.join(row.get('answer_from', [])) or '-':<18} "
            f"nonsense_full={_yn(row.get('nonsense_full'))} "
            f"{time.monotonic() - started:5.1f}s  {row.get('why', '')[:150]}",
            flush=True,
        )
    _summary(rows)


def _yn(value: Any) -> str:
    return "-" if value is None else ("yes" if value else "no")


def _summary(rows: list[dict[str, Any]]) -> None:
    imported = [r for r in rows if r["imported"]]
    deterministic = [r for r in imported if r.get("deterministic")]
    known = [r for r in imported if r.get("graded") not in (None, "no-answer")]
    graded = [r for r in known if r["graded"] == "1.0"]
    usable = [r for r in deterministic if r.get("graded") == "1.0"]
    proof = [r for r in usable if not r.get("nonsense_full")]
    print(
        f"tried {len(rows)}  imported {len(imported)}  deterministic {len(deterministic)}  "
        f"with a known-correct answer {len(known)}  graded it 1.0 {len(graded)}"
    )
    print(
        f"fully usable (imports, deterministic, known-correct answer 1.0): {len(usable)}/{len(rows)} "
        f"({100 * len(usable) / max(1, len(rows)):.0f}%); and no full marks for nonsense: {len(proof)}/{len(rows)}"
    )


def _trial(item: dict[str, Any], seconds: float, checkout: str | None) -> dict[str, Any]:
    first = _worker({"phase": "import", **item}, seconds, "11", checkout)
    if not first.get("imported"):
        return {"label": item["label"], "imported": False, "why": first.get("why", "")}
    second = _worker({"phase": "regenerate", "label": item["label"], "spec": first["spec"]}, seconds, "12", checkout)
    same = second.get("digests") == first["digests"]
    first["deterministic"] = first["within"] and same
    if not first["deterministic"]:
        first["why"] = ("differs in the other order; " if not first["within"] else "") + (
            "" if same else f"differs in another process ({second.get('why', 'other digests')})"
        )
    return first


def _worker(task: dict[str, Any], seconds: float, hash_seed: str, checkout: str | None) -> dict[str, Any]:
    path = os.pathsep.join([p for p in (checkout, os.environ.get("PYTHONPATH")) if p])
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": path}
    try:
        out = subprocess.run(
            [sys.executable, __file__, "--worker"],
            input=json.dumps(task),
            capture_output=True,
            text=True,
            env=env,
            timeout=seconds,
        )
    except subprocess.TimeoutExpired:
        return {"imported": False, "why": f"worker timed out after {seconds:g} s ({task['phase']})"}
    last = out.stdout.strip().splitlines()[-1:] or [""]
    try:
        return json.loads(last[0])
    except ValueError:
        return {"imported": False, "why": f"worker died (exit {out.returncode}): {out.stderr.strip()[-300:]}"}


def _work(task: dict[str, Any]) -> dict[str, Any]:
    """One worker: import (phase ``import``) or rebuild (phase ``regenerate``), then probe."""
    sys.stdout = sys.stderr  # the sources print; only our last line goes to the real stdout
    try:
        return _work_unguarded(task)
    finally:
        sys.stdout = sys.__stdout__


def _work_unguarded(task: dict[str, Any]) -> dict[str, Any]:
    from campflow.sources import ImportSpec, build_bootcamp

    if task["phase"] == "regenerate":
        bootcamp = build_bootcamp(ImportSpec.model_validate(task["spec"]))
        try:
            return {"digests": _digests(bootcamp, reverse=True)}
        except Exception as exc:  # a generator that fails now but not in the first worker
            return {"why": f"{type(exc).__name__}: {exc}"[:200]}
    from campflow.storage.imports import import_bootcamp
    from campflow.storage.workspace import Workspace

    spec = ImportSpec(name="trial", adapter=task["adapter"], source=task["source"], options=task.get("options", {}))
    store = Workspace(Path(tempfile.mkdtemp(prefix="campflow-trial-"))).store
    notes: list[str] = []
    kwargs = {"say": notes.append} if "say" in inspect.signature(import_bootcamp).parameters else {}
    started = time.monotonic()
    try:
        spec, bootcamp = import_bootcamp(spec, store, **kwargs)
    except Exception as exc:  # the import's refusal (or an older campflow's raw error) is the finding
        return {"label": task["label"], "imported": False, "why": f"{type(exc).__name__}: {exc}"[:300]}
    row: dict[str, Any] = {
        "label": task["label"],
        "imported": True,
        "spec": spec.model_dump(mode="json"),
        "import_s": round(time.monotonic() - started, 1),
        "notes": notes,
        "levels": len(bootcamp.levels),
    }
    try:
        row["digests"] = _digests(bootcamp, reverse=False)
        row["within"] = _digests(bootcamp, reverse=True) == row["digests"]
    except Exception as exc:  # generation failing after the import passed
        return {**row, "imported": True, "within": False, "digests": {}, "why": f"{type(exc).__name__}: {exc}"[:200]}
    row.update(_grades(bootcamp))
    return row


def _digests(bootcamp: Any, *, reverse: bool) -> dict[str, str]:
    keys = [(lv, s) for lv in sorted(bootcamp.levels) for s in TRIAL_SEEDS]
    out = {}
    for lv, s in reversed(keys) if reverse else keys:
        instance = bootcamp.generate(lv, s)
        shown = json.dumps(
            {"id": instance.id, "data": instance.data, "prompt": bootcamp.prompt(instance)}, sort_keys=True, default=str
        )
        out[f"{lv}/{s}"] = hashlib.sha256(shown.encode()).hexdigest()[:16]
    return dict(sorted(out.items()))


def _grades(bootcamp: Any) -> dict[str, Any]:
    """Grade a known-correct answer and the nonsense on every trial instance."""
    rewards, how, nonsense_full, failures = [], set(), False, []
    for lv, s in ((lv, s) for lv in sorted(bootcamp.levels) for s in TRIAL_SEEDS):
        instance = bootcamp.generate(lv, s)
        answer, source = _known_answer(bootcamp, instance)
        if answer is not None:
            how.add(source)
            reward = _score(bootcamp, instance, answer)
            rewards.append(reward)
            if reward < 1.0 and len(failures) < 1:
                failures.append(f"level {lv} seed {s}: {source} answer {answer[:40]!r} scored {reward:g}")
        nonsense_full |= any(_score(bootcamp, instance, n) >= 1.0 for n in NONSENSE)
    graded = "no-answer" if not rewards else ("1.0" if min(rewards) >= 1.0 else f"{min(rewards):.2f}")
    return {"graded": graded, "answer_from": sorted(how), "nonsense_full": nonsense_full, "why": "; ".join(failures)}


def _score(bootcamp: Any, instance: Any, answer: str) -> float:
    from campflow.bootcamps.base import Action

    state = bootcamp.new_state(instance)
    bootcamp.apply(instance, state, Action("submit", {"answer": answer}))
    return bootcamp.score(instance, state, ()).reward


def _known_answer(bootcamp: Any, instance: Any) -> tuple[str | None, str]:
    """A known-correct answer and where it came from; (None, "") where there is none.

    An oracle that refuses because the source's reference fails the source's own scorer (newer campflow)
    counts as the reference, failing: the answer is then one no scorer accepts.
    """
    try:
        return str(bootcamp.oracle(instance, bootcamp.new_state(instance)).arguments["answer"]), "oracle"
    except Exception as exc:  # no oracle, or one that refuses a failing reference
        if "reference answer" in str(exc) and "scores" in str(exc):
            return NONSENSE[0], "oracle"
    identity, prompt = instance.data.get("identity"), instance.data.get("prompt", "")
    if not isinstance(identity, dict):
        return None, ""
    if {"puzzle", "target"} <= set(identity):
        found = _arithmetic(identity["puzzle"], identity["target"])
        return (None, "") if found is None else (_wrapped(found, prompt), "search")
    key = next((k for k in REFERENCE_KEYS if identity.get(k) is not None), None)
    if key is None:
        return None, ""
    value = identity[key]
    text = " ".join(map(str, value)) if isinstance(value, list) else str(value)
    return _wrapped(text, prompt), f"identity[{key}]"


def _wrapped(text: str, prompt: str) -> str:
    if "[answer]" in prompt:
        return f"[answer]{text}[/answer]"
    if "[[" in prompt:
        return f"[[{text}]]"
    if "boxed" in prompt:
        return f"\\boxed{{{text}}}"
    return text


def _arithmetic(puzzle: str, target: Any) -> str | None:
    """An expression of all of ``puzzle``'s numbers with + - * / equal to ``target`` (exhaustive search)."""
    numbers = [(Fraction(int(n)), n) for n in str(puzzle).split()]
    goal = Fraction(int(target))

    def search(items: list[tuple[Fraction, str]]) -> str | None:
        if len(items) == 1:
            return items[0][1] if items[0][0] == goal else None
        for i, j in itertools.permutations(range(len(items)), 2):
            (a, ea), (b, eb) = items[i], items[j]
            rest = [items[k] for k in range(len(items)) if k not in (i, j)]
            options = [(a + b, f"({ea}+{eb})"), (a - b, f"({ea}-{eb})"), (a * b, f"({ea}*{eb})")]
            if b != 0:
                options.append((a / b, f"({ea}/{eb})"))
            for value in options:
                found = search([*rest, value])
                if found is not None:
                    return found
        return None

    return search(numbers) if len(numbers) <= 5 else None


def _reasoning_gym_items() -> list[dict[str, Any]]:
    import reasoning_gym.factory as factory

    return [
        {
            "label": name,
            "adapter": "reasoning-gym",
            "source": name,
            "options": {"datasets": ["gcd", "chain_sum"]} if name == "composite" else {},
        }
        for name in sorted(factory.DATASETS)
    ]


def _internbootcamp_items(checkout: Path, stride: int, *, dotted: bool, levels: bool) -> list[dict[str, Any]]:
    code = (
        "import inspect, json, sys\nimport internbootcamp\n"
        "print(json.dumps({n: inspect.getsourcefile(getattr(internbootcamp, n)) for n in dir(internbootcamp) "
        "if n.endswith('bootcamp') and inspect.isclass(getattr(internbootcamp, n))}))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(checkout), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if out.returncode:
        raise SystemExit(
            f"trial_imports: cannot import internbootcamp from {checkout}: {out.stderr.strip().splitlines()[-1:]}"
        )
    files = json.loads(out.stdout.strip().splitlines()[-1])
    names = sorted(files)
    picked = names[::stride] + ([] if "Game24bootcamp" in names[::stride] else ["Game24bootcamp"])
    configs = _config_files(checkout)
    items = []
    for name in picked:
        source = f"internbootcamp:{name}" if dotted else f"{files[name]}:{name}"
        item: dict[str, Any] = {"label": name, "adapter": "internbootcamp", "source": source}
        config = configs.get(name.lower().removesuffix("bootcamp")) if levels else None
        if config is not None:
            item["options"] = {"levels": json.loads(config.read_text()) or [{}]}
            item["label"] = f"{name} (levels: {config.name})"
        items.append(item)
    return items


def _config_files(checkout: Path) -> dict[str, Path]:
    out = {}
    for path in sorted(checkout.glob("examples/pipelines/*_configs/*_train.json")):
        stem = re.sub(r"^codecontests\d+", "", path.name.removesuffix("_train.json")).replace("_", "").lower()
        out.setdefault(stem, path)
    return out


if __name__ == "__main__":
    main()
