"""Do the lower bounds in pyproject.toml hold? Install campflow with every direct dependency at its lowest
allowed version in a fresh virtual environment and run a smoke set there.

What ``uv pip install --resolution lowest-direct`` does, with pip: each requirement ``name>=X`` of the
core and of the ``train`` extra becomes the constraint ``name==X``; what those pull in resolves as usual.
torch is the exception: it stays ``--torch`` (default the CPU wheel the Makefile pins), installed first
and held by a constraint, because a fresh resolve of a lower torch would fetch a multi-GB CUDA build.

The smoke set, each a real command in that environment on a fresh workspace: the version and an import of
every training module, an oracle evaluation, the embedded base (copy pretraining cut to a few steps), a
collection and its dataset, two SFT steps, one GRPO step. It prints what it installed (name==version)
and one line per step; ``RESULT ok`` at the end, or the first failing step's output and exit 1.

    python benchmarks/lowest_versions.py              # a temporary venv, removed afterwards
    python benchmarks/lowest_versions.py --keep /tmp/lowest   # keep it (and reuse it when it exists)

Takes ~5-10 minutes (the install dominates; pip's cache makes a rerun faster). Needs the package index.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = ("train",)  # the smoke set trains; the other extras are thin wrappers of their own libraries


def lowest_pins(pyproject: Path, extras: tuple[str, ...], torch: str) -> list[str]:
    """``name==lower`` for each direct requirement of the core and ``extras`` that has a lower bound;
    torch pinned to ``torch`` instead."""
    project = tomllib.loads(pyproject.read_text())["project"]
    requirements = [*project["dependencies"], *(r for e in extras for r in project["optional-dependencies"][e])]
    pins: dict[str, str] = {}
    for text in requirements:
        req = Requirement(text)
        if req.name == "torch":
            pins["torch"] = f"torch=={torch}"
            continue
        lower = [s.version for s in req.specifier if s.operator in (">=", "==", "~=")]
        if lower:
            pins[req.name] = f"{req.name}=={lower[0]}"
    return sorted(pins.values())


def run(cmd: list[str], *, cwd: Path, env: dict[str, str], label: str, timeout: float = 3600) -> str:
    """Run one step; print its line; on failure print its output and exit 1."""
    start = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    seconds = time.perf_counter() - start
    if out.returncode != 0:
        stderr = "\n".join(ln for ln in out.stderr.splitlines() if not ln.startswith("WARNING: Location"))
        print(f"FAIL {label} ({seconds:.0f} s): exit {out.returncode}\n{out.stdout[-3000:]}\n{stderr[-3000:]}")
        sys.exit(1)
    print(f"ok   {label} ({seconds:.0f} s)", flush=True)
    return out.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="venv folder to create (or reuse) and keep")
    parser.add_argument("--torch", default="2.13.0", help="the torch version to hold (the Makefile's)")
    args = parser.parse_args()

    venv = args.keep or Path(tempfile.mkdtemp(prefix="campflow-lowest-")) / "venv"
    work = Path(tempfile.mkdtemp(prefix="campflow-lowest-ws-"))
    py = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # campflow as installed there, not here
    env |= {"COLUMNS": "200", "PREFECT_HOME": str(work / "prefect")}
    try:
        pins = lowest_pins(ROOT / "pyproject.toml", EXTRAS, args.torch)
        constraints = work / "lowest.txt"
        constraints.write_text("\n".join(pins) + "\n")
        if not py.exists():
            run([sys.executable, "-m", "venv", str(venv)], cwd=work, env=env, label="venv")
        pip = [str(py), "-m", "pip", "install", "-q"]
        run([*pip, f"torch=={args.torch}"], cwd=work, env=env, label=f"torch=={args.torch}")
        run([*pip, "-c", str(constraints), f"{ROOT}[{','.join(EXTRAS)}]"], cwd=work, env=env, label="install")
        freeze = run([str(py), "-m", "pip", "freeze"], cwd=work, env=env, label="pip freeze")
        installed = {
            re.split(r"[=@ ]", line)[0].lower().replace("_", "-"): line for line in freeze.splitlines() if line
        }
        for pin in pins:
            name = pin.split("==")[0].lower().replace("_", "-")
            got = installed.get(name, f"{name}: not installed")
            want = pin.split("==")[1]
            same = "==" in got and Version(Version(got.split("==")[-1]).public) == Version(want)
            mark = "" if same else "   <- not the lower bound"
            print(f"     {got}{mark}")

        cli = [str(venv / "bin" / "campflow")]
        db = ["--db", str(work / "ws" / "campflow.duckdb")]
        run([*cli, "--version"], cwd=work, env=env, label="campflow --version")
        modules = "campflow.training.sft, campflow.training.rl, campflow.training.filtering, campflow.agents.local"
        run([str(py), "-c", f"import {modules}"], cwd=work, env=env, label="import the training modules")
        run(
            [*cli, "eval", "--policy", "oracle", "-b", "calculator,maze", "-n", "2", *db],
            cwd=work,
            env=env,
            label="oracle eval",
        )
        small = env | {"CAMPFLOW__TRAINING__TINY__PRETRAIN__STEPS": "4"}
        run([*cli, "train", "base", "-b", "calculator", *db], cwd=work, env=small, label="train base (4 copy steps)")
        run(
            [*cli, "collect", "-b", "calculator", "-n", "8", "--run-id", "lowest-collect", *db],
            cwd=work,
            env=env,
            label="collect",
        )
        run([*cli, "dataset", "build", "--runs", "lowest-collect", *db], cwd=work, env=env, label="dataset build")

        def one(sql: str) -> str:
            out = run([*cli, "sql", sql, "-f", "csv", *db], cwd=work, env=env, label=f"sql: {sql[:50]}")
            return out.split()[1]

        base = one("SELECT model_id FROM checkpoints WHERE kind = 'base' LIMIT 1")
        dataset = one("SELECT dataset_id FROM datasets WHERE kind = 'sft' LIMIT 1")
        sft = env | {"CAMPFLOW__TRAINING__SFT__MAX_STEPS": "2"}
        run([*cli, "train", "sft", "--from", base, "--dataset", dataset, *db], cwd=work, env=sft, label="2 SFT steps")
        sft_id = one("SELECT model_id FROM checkpoints WHERE kind = 'sft' LIMIT 1")
        run(
            [*cli, "train", "rl", "--from", sft_id, "-b", "calculator", "--steps", "1", *db],
            cwd=work,
            env=env,
            label="1 GRPO step",
        )
        print("RESULT ok: the lower bounds of the core and the train extra install and run the smoke set")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if args.keep is None:
            shutil.rmtree(venv.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
