"""Does the light core install and work as declared? ``pip install .`` (no extra) in a fresh virtual
environment, then what the core promises, as a user would type it.

It checks that no library of an extra came along (torch, transformers, TRL, pandas, ...), runs
``campflow --version``, ``campflow bootcamps list``, ``campflow eval --policy oracle``, ``campflow sql`` and
``campflow failures``, and that a training command says in one line which extra to install. It prints the
number of distributions and the environment's size on disk; ``RESULT ok`` at the end, else the failing
step's output and exit 1.

    python benchmarks/core_install.py            # ~3-5 minutes, most of it the install; needs the package index
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from campflow.extras import EXTRA_OF_MODULE  # noqa: E402


def step(cmd: list[str], *, cwd: Path, env: dict[str, str], label: str, expect: int = 0) -> str:
    """Run one step and print its line; exit 1 with its output when its exit code is not ``expect``."""
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != expect:
        stderr = "\n".join(ln for ln in out.stderr.splitlines() if not ln.startswith("WARNING: Location"))
        print(f"FAIL {label}: exit {out.returncode} (expected {expect})\n{out.stdout[-3000:]}\n{stderr[-3000:]}")
        sys.exit(1)
    print(f"ok   {label}", flush=True)
    return out.stdout + out.stderr


def main() -> None:
    top = Path(tempfile.mkdtemp(prefix="campflow-core-"))
    venv, work = top / "venv", top / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"COLUMNS": "200"}
    cli = [str(venv / "bin" / "campflow")]
    try:
        step([sys.executable, "-m", "venv", str(venv)], cwd=work, env=env, label="venv")
        step(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(ROOT)],
            cwd=work,
            env=env,
            label="pip install .",
        )
        freeze = step(
            [str(venv / "bin" / "python"), "-m", "pip", "list", "--format", "freeze"],
            cwd=work,
            env=env,
            label="pip list",
        )
        names = {line.split("==")[0].lower().replace("_", "-") for line in freeze.splitlines() if "==" in line}
        extras = {m.replace("_", "-") for m in EXTRA_OF_MODULE} | {"openenv-core", "reasoning-gym", "inspect-ai"}
        pulled = sorted(names & extras)
        if pulled:
            print(f"FAIL the core pulled in libraries of extras: {pulled}")
            sys.exit(1)
        print(f"     {len(names)} distributions, none of an extra")
        step([*cli, "--version"], cwd=work, env=env, label="campflow --version")
        step([*cli, "bootcamps", "list"], cwd=work, env=env, label="campflow bootcamps list")
        step(
            [*cli, "eval", "--policy", "noisy", "-b", "calculator,maze", "-n", "4", "--run-id", "core"],
            cwd=work,
            env=env,
            label="campflow eval --policy noisy",
        )
        step(
            [*cli, "eval", "--policy", "oracle", "-b", "calculator,maze", "-n", "2"],
            cwd=work,
            env=env,
            label="campflow eval --policy oracle",
        )
        step(
            [*cli, "sql", "SELECT bootcamp, episodes, pass_rate FROM pass_rates"],
            cwd=work,
            env=env,
            label="campflow sql",
        )
        step([*cli, "failures", "--run", "core"], cwd=work, env=env, label="campflow failures (mining)")
        said = step([*cli, "train", "base"], cwd=work, env=env, label="campflow train base refuses", expect=2)
        if "pip install 'campflow[train]'" not in said or said.count("\n") != 1:
            print(f"FAIL the training command did not name its extra in one line: {said!r}")
            sys.exit(1)
        print(f"     {said.strip()}")
        size = sum(f.stat().st_size for f in venv.rglob("*") if f.is_file() and not f.is_symlink())
        print(f"     the environment on disk: {size / 2**20:.0f} MiB")
        print("RESULT ok: the core installs without any extra and runs its commands")
    finally:
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
