"""Run every benchmark in this folder, one after another, and print each one's RATIO lines at the end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    ratios = []
    for script in sorted(HERE.glob("bench_*.py")):
        print(f"== {script.name}", flush=True)
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
        print(out.stdout + out.stderr[-2000:], flush=True)
        ratios += [f"{script.name}: {ln}" for ln in out.stdout.splitlines() if ln.startswith("RATIO")]
        if out.returncode:
            ratios.append(f"{script.name}: FAILED with exit code {out.returncode}")
    print("== summary")
    print("\n".join(ratios))


if __name__ == "__main__":
    main()
