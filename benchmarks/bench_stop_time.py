"""Seconds from a stop signal to the end of `campflow eval`: what a user waits after Ctrl-C or a SIGTERM.

A scripted OpenAI-compatible endpoint on 127.0.0.1 (the oracle's replies, 0.3 s each) plays calculator
and maze (10 eval instances each, shards of 2, 2 episodes at a time) for a fresh run id each start;
the command's whole process group (it and Prefect's ephemeral API server) gets SIGTERM or SIGINT at a
seeded moment 6-20 s after the start, which lands in Prefect's start, in the evaluation or as it ends.
Each stop must end with the signal's exit code and one line; the seconds from the signal to the exit
are printed with their median and maximum, and how many reached the command's 8 s deadline
(``campflow.cli.STOP_GRACE_S``), where the process is ended instead of finishing its own way out.

With --against REV each seeded stop is made twice, side by side: once with this checkout and once with
the commit REV (checked out in a temporary git worktree, run with this environment's packages), and the
two medians are printed with their ratio.

Run: python benchmarks/bench_stop_time.py [--stops 20] [--seed 31] [--against c205e0d]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from campflow.bootcamps import registry  # noqa: E402
from campflow.bootcamps.splits import eval_instances  # noqa: E402
from campflow.cli import STOP_GRACE_S  # noqa: E402
from campflow.testing.scripted_server import OracleScript, ScriptedEndpoint  # noqa: E402

EXE = str(Path(sys.executable).parent / "campflow")
N = 10


@dataclass
class Version:
    name: str
    code: Path
    waited: list[float] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)

    def summary(self, seed: int) -> str:
        at_deadline = sum(1 for w in self.waited if w >= STOP_GRACE_S)
        return (
            f"{self.name}: seconds from the signal to the exit, {len(self.waited)} stops (seed {seed}): "
            f"median {statistics.median(self.waited):.2f}, max {max(self.waited):.2f}; "
            f"{at_deadline} reached the {STOP_GRACE_S:.0f} s deadline; {len(self.wrong)} ended wrongly"
        )


def stop_once(version: Version, k: int, sig: signal.Signals, delay: float, url: str, workdir: Path, env: dict) -> bool:
    """Start `campflow eval`, send `sig` to its process group after `delay` s; False if it finished first."""
    argv = [EXE, "eval", "--policy", "openai", "--model", "scripted", "--bootcamps", "calculator,maze"]
    argv += ["-n", str(N), "--concurrency", "2", "--run-id", f"{version.name}-{k}", "--base-url", url]
    proc = subprocess.Popen(
        argv,
        cwd=workdir,
        env={**env, "PYTHONPATH": str(version.code)},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # a terminal's foreground job: the signal reaches the API server too
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a background shell ignores it
    )
    try:
        proc.wait(timeout=delay)
        proc.communicate()
        return False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, sig)
        sent = time.monotonic()
    _, err = proc.communicate(timeout=120)
    took = time.monotonic() - sent
    lines = err.strip().splitlines()
    ok = proc.returncode == 128 + sig and len(lines) == 1 and lines[0].startswith("error: stopped by")
    print(
        f"{k:3d} {version.name:>10s} {sig.name:7s} after {delay:5.2f} s: exit {proc.returncode} in {took:5.2f} s",
        flush=True,
    )
    if ok:
        version.waited.append(took)
    else:
        version.wrong.append(f"{sig.name} after {delay:.2f} s: exit {proc.returncode}\n{err[-2000:]}")
        print(version.wrong[-1], flush=True)
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stops", type=int, default=20)
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--against", metavar="REV", help="a commit to stop side by side with this checkout")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    workdir = Path(tempfile.mkdtemp(prefix="bench-stop-"))
    env = {**os.environ, "COLUMNS": "200", "PREFECT_HOME": str(workdir / "prefect")}
    env.update({"CAMPFLOW__ROLLOUT__SHARD_SIZE": "2", "CAMPFLOW__ROLLOUT__WORKERS": "1"})
    env.pop("PREFECT_API_URL", None)
    versions = [Version("this", ROOT)]
    if args.against:
        tree = workdir / "against"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), args.against], check=True)
        versions.append(Version(args.against, tree))
    script = OracleScript([i for b in ("calculator", "maze") for i in eval_instances(registry.make(b), N)])
    try:
        with ScriptedEndpoint(script, latency=0.3) as server:
            k = 0
            while len(versions[0].waited) + len(versions[0].wrong) < args.stops:
                sig = rng.choice((signal.SIGINT, signal.SIGTERM))
                delay = rng.uniform(6.0, 20.0)
                for version in versions:
                    stop_once(version, k, sig, delay, server.url, workdir, env)
                k += 1
    finally:
        if args.against:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(workdir / "against")])
        shutil.rmtree(workdir, ignore_errors=True)
    for version in versions:
        print(version.summary(args.seed))
    if args.against:
        this, other = (statistics.median(v.waited) for v in versions)
        print(f"median seconds to stop, {args.against} / this: {other / this:.1f}x")


if __name__ == "__main__":
    main()
